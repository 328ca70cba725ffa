//! Loading a GGUF file: the Llama-family weights, the tokenizer and the chat template.
//!
//! The weights are dequantized to F32 at load. candle's quantized kernels quantize activations
//! to 8 bits, which flips near-tied tokens (SmolLM2-135M's first answer token is one) and is
//! slow on these CPUs; F16 weights (candle's `CANDLE_DEQUANTIZE_ALL_F16`) answer correctly but
//! measured 5.9 tokens/s against F32's 8.5 here. Dequantizing rewrites each tensor's data into
//! an in-memory copy of the file's tensor section as F32, then hands that to candle's own Llama
//! loader, which keeps F32 tensors as plain tensors.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value};
use candle_core::quantized::GgmlDType;
use candle_core::Device;
use candle_transformers::models::quantized_llama::ModelWeights;

use crate::tokenizer::TextTokenizer;

/// candle's Llama builds its rotary position tables for this many positions (its private
/// `MAX_SEQ_LEN`), whatever the file says; a longer sequence would fail mid-generation.
pub const CANDLE_MAX_POSITIONS: usize = 4096;

/// A loaded model: weights shared by every generation (each clone gets its own KV cache).
pub struct LoadedModel {
    pub weights: ModelWeights,
    pub tokenizer: TextTokenizer,
    /// The Jinja chat template from `tokenizer.chat_template`, if the file has one.
    pub chat_template: Option<String>,
    /// The longest sequence (prompt plus answer) served: the file's context length, capped at
    /// [`CANDLE_MAX_POSITIONS`].
    pub context_length: usize,
    /// `general.name`, for logs.
    pub description: String,
    pub load_time: Duration,
}

pub fn load(path: &Path) -> anyhow::Result<LoadedModel> {
    let started = Instant::now();
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let content = Content::read(&mut reader)
        .with_context(|| format!("{} is not a readable GGUF file", path.display()))?;
    let architecture = metadata_string(&content, "general.architecture").unwrap_or_default();
    if architecture != "llama" {
        anyhow::bail!(
            "{} is a `{architecture}` model; only Llama-family GGUF files are supported",
            path.display()
        );
    }
    let (tokenizer, chat_template) = text_side(&content)?;
    let context_length = content
        .metadata
        .get("llama.context_length")
        .and_then(|value| value.to_u32().ok())
        .map_or(2048, |length| length as usize)
        .min(CANDLE_MAX_POSITIONS);
    let description = metadata_string(&content, "general.name").unwrap_or_default();

    let (dequantized, mut tensors) = dequantize_to_f32(&content, &mut reader)?;
    let weights = ModelWeights::from_gguf(dequantized, &mut tensors, &Device::Cpu)
        .context("building the model from its weights")?;
    Ok(LoadedModel {
        weights,
        tokenizer,
        chat_template,
        context_length,
        description,
        load_time: started.elapsed(),
    })
}

/// The tokenizer and chat template of a GGUF file, without its weights: what a prompt becomes
/// in tokens, for tools and tests that need no generation.
pub fn read_text_side(path: &Path) -> anyhow::Result<(TextTokenizer, Option<String>)> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let content = Content::read(&mut BufReader::new(file))
        .with_context(|| format!("{} is not a readable GGUF file", path.display()))?;
    text_side(&content)
}

fn text_side(content: &Content) -> anyhow::Result<(TextTokenizer, Option<String>)> {
    Ok((
        TextTokenizer::from_gguf(content)?,
        metadata_string(content, "tokenizer.chat_template"),
    ))
}

/// A copy of `content` whose tensors are all F32, with their data in memory.
fn dequantize_to_f32<R: Read + Seek>(
    content: &Content,
    reader: &mut R,
) -> anyhow::Result<(Content, Cursor<Vec<u8>>)> {
    let mut data = Vec::new();
    let mut tensor_infos = HashMap::new();
    // A stable order keeps the buffer's layout the same from run to run.
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let tensor = content
            .tensor(reader, name, &Device::Cpu)?
            .dequantize(&Device::Cpu)
            .with_context(|| format!("dequantizing {name}"))?;
        let values = tensor.flatten_all()?.to_vec1::<f32>()?;
        let info = TensorInfo {
            ggml_dtype: GgmlDType::F32,
            shape: tensor.shape().clone(),
            offset: data.len() as u64,
        };
        tensor_infos.insert(name.clone(), info);
        data.reserve(values.len() * 4);
        for value in values {
            data.extend_from_slice(&value.to_le_bytes());
        }
    }
    let dequantized = Content {
        magic: content.magic,
        metadata: content.metadata.clone(),
        tensor_infos,
        tensor_data_offset: 0,
    };
    Ok((dequantized, Cursor::new(data)))
}

/// The file's SHA-256 in hex: which weights exactly are being served.
pub fn file_sha256(path: &Path) -> anyhow::Result<String> {
    use sha2::{Digest, Sha256};
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).with_context(|| format!("reading {}", path.display()))?;
    Ok(format!("{:x}", hasher.finalize()))
}

fn metadata_string(content: &Content, key: &str) -> Option<String> {
    match content.metadata.get(key) {
        Some(Value::String(text)) => Some(text.clone()),
        _ => None,
    }
}
