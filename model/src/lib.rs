//! `arbiter model serve`: a bundled OpenAI-compatible inference server that runs a small GGUF
//! model (SmolLM2-135M-Instruct in the demo) on CPU with Hugging Face's candle crates, so the
//! demo and tests can use a real model's answers and logprobs without a GPU.

pub mod chat;
pub mod generate;
pub mod openai;
pub mod scoring;
pub mod server;
pub mod tokenizer;
pub mod weights;
