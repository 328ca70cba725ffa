//! `arbiter model serve`: a bundled OpenAI-compatible inference server that runs a small GGUF
//! model (SmolLM2-135M-Instruct in the demo) on CPU with Hugging Face's candle crates, so the
//! demo and tests can use a real model's answers and logprobs without a GPU.
//!
//! # Layout, from file to HTTP
//! - [`weights`]: loading the GGUF file (weights dequantized to F32, tokenizer, chat template);
//! - [`tokenizer`]: byte-level BPE rebuilt from the file's vocabulary and merges;
//! - [`chat`]: chat prompts rendered with the model's own Jinja template;
//! - [`generate`], [`scoring`]: one generation, token by token, with its logprobs;
//! - [`prefix_cache`]: prompts that start alike read from where an earlier one left off;
//! - [`openai`]: the OpenAI wire format (requests checked into one job, responses);
//! - [`server`]: the routes, queueing and `/metrics`.

pub mod chat;
pub mod generate;
pub mod openai;
pub mod prefix_cache;
pub mod scoring;
pub mod server;
pub mod tokenizer;
pub mod weights;
