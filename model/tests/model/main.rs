//! The bundled model's integration tests, in one binary: its tokenizer against llama.cpp's
//! token ids, and prompts read in chunks (or from a cached prefix) against one pass.

mod common;
mod echo;
mod prefill;
mod tokenizer;
