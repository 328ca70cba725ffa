//! The model's tokenizer, rebuilt from the vocabulary and merges stored in the GGUF file.
//!
//! candle can convert a GGUF vocabulary itself, but for `tokenizer.ggml.pre = smollm` it adds a
//! prefix space after special tokens, which changes the ids of every chat prompt. The Hugging
//! Face tokenizer for these models splits digits one by one and then applies byte-level BPE
//! without a prefix space, so that pipeline is built here explicitly.

use std::collections::HashMap;

use anyhow::{bail, Context};
use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, Tokenizer};

/// GGUF `tokenizer.ggml.token_type` values that mark tokens matched whole in the input.
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// A byte-level BPE tokenizer plus what generation needs to know about its vocabulary.
pub struct TextTokenizer {
    tokenizer: Tokenizer,
    /// Each token's raw bytes (byte-level BPE maps every byte to a printable character).
    token_bytes: Vec<Vec<u8>>,
    /// Control tokens, whose text never appears in an answer.
    special: Vec<bool>,
    pub bos: Option<u32>,
    pub eos: u32,
    /// Tokens that end a generation: the end-of-sequence token and `<|endoftext|>`/`<|im_end|>`
    /// where the vocabulary has them.
    pub stop_tokens: Vec<u32>,
    /// Whether a completion prompt starts with the beginning-of-sequence token.
    pub add_bos: bool,
}

impl TextTokenizer {
    pub fn from_gguf(content: &Content) -> anyhow::Result<TextTokenizer> {
        let model = string(content, "tokenizer.ggml.model")?;
        if model != "gpt2" {
            bail!("only byte-level BPE tokenizers (`gpt2`) are supported, this file has `{model}`");
        }
        let tokens = string_array(content, "tokenizer.ggml.tokens")?;
        let merges = string_array(content, "tokenizer.ggml.merges")?
            .into_iter()
            .map(|merge| {
                merge
                    .split_once(' ')
                    .map(|(left, right)| (left.to_string(), right.to_string()))
                    .with_context(|| format!("malformed merge `{merge}`"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let token_types = match content.metadata.get("tokenizer.ggml.token_type") {
            Some(value) => value
                .to_vec()?
                .iter()
                .map(|kind| kind.to_i32())
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![1; tokens.len()],
        };
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, token)| (token.clone(), id as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|err| anyhow::anyhow!("building the BPE model: {err}"))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let pre_tokenizer = Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
        ]);
        tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
        tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
        let matched_whole: Vec<AddedToken> = tokens
            .iter()
            .zip(&token_types)
            .filter(|(_, kind)| matches!(**kind, TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED))
            .map(|(token, _)| AddedToken::from(token.clone(), true))
            .collect();
        tokenizer
            .add_special_tokens(matched_whole)
            .map_err(|err| anyhow::anyhow!("adding special tokens: {err}"))?;

        let char_to_byte = byte_level_chars();
        let token_bytes = tokens
            .iter()
            .map(|token| {
                token
                    .chars()
                    .map(|c| match char_to_byte.get(&c) {
                        Some(byte) => vec![*byte],
                        // Added tokens are stored as plain text.
                        None => c.to_string().into_bytes(),
                    })
                    .collect::<Vec<_>>()
                    .concat()
            })
            .collect();
        let special = token_types
            .iter()
            .map(|kind| *kind == TOKEN_TYPE_CONTROL)
            .collect();
        let id_of = |key: &str| {
            content
                .metadata
                .get(key)
                .and_then(|value| value.to_u32().ok())
        };
        let eos = id_of("tokenizer.ggml.eos_token_id").context("the GGUF names no eos token")?;
        let mut stop_tokens = vec![eos];
        for name in ["<|endoftext|>", "<|im_end|>", "<|eot_id|>"] {
            if let Some(id) = tokens.iter().position(|token| token == name) {
                if !stop_tokens.contains(&(id as u32)) {
                    stop_tokens.push(id as u32);
                }
            }
        }
        let add_bos = content
            .metadata
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|value| value.to_bool().ok())
            .unwrap_or(false);
        Ok(TextTokenizer {
            tokenizer,
            token_bytes,
            special,
            bos: id_of("tokenizer.ggml.bos_token_id"),
            eos,
            stop_tokens,
            add_bos,
        })
    }

    /// Token ids for `text`; special tokens written in the text (as a chat template does) are
    /// matched whole.
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|err| anyhow::anyhow!("tokenizing: {err}"))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// A completion prompt's ids, with the beginning-of-sequence token when the model wants it.
    pub fn encode_prompt(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let mut ids = Vec::new();
        if let (true, Some(bos)) = (self.add_bos, self.bos) {
            ids.push(bos);
        }
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    /// The bytes a token stands for: empty for control tokens, which are not text.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        match self.token_bytes.get(id as usize) {
            Some(_) if self.is_special(id) => &[],
            Some(bytes) => bytes,
            None => &[],
        }
    }

    /// The token as OpenAI's logprobs show it: its text, or its name for a control token.
    pub fn token_label(&self, id: u32) -> String {
        if self.is_special(id) {
            return self.tokenizer.id_to_token(id).unwrap_or_default();
        }
        String::from_utf8_lossy(self.token_bytes(id)).into_owned()
    }

    pub fn token_text(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    pub fn id_of(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    pub fn decode(&self, ids: &[u32]) -> anyhow::Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|err| anyhow::anyhow!("decoding: {err}"))
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    /// Whether `id` is a control token (a chat template's turn markers, the end token).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }
}

fn string<'a>(content: &'a Content, key: &str) -> anyhow::Result<&'a str> {
    let value = content
        .metadata
        .get(key)
        .with_context(|| format!("the GGUF has no `{key}`"))?;
    Ok(value.to_string()?.as_str())
}

fn string_array(content: &Content, key: &str) -> anyhow::Result<Vec<String>> {
    let value = content
        .metadata
        .get(key)
        .with_context(|| format!("the GGUF has no `{key}`"))?;
    value
        .to_vec()?
        .iter()
        .map(|item| match item {
            Value::String(text) => Ok(text.clone()),
            other => bail!("`{key}` holds a non-string {other:?}"),
        })
        .collect()
}

/// GPT-2's byte-level alphabet, reversed: the printable character each byte is written as.
/// Printable Latin-1 bytes stand for themselves; the rest are shifted up past U+0100.
fn byte_level_chars() -> HashMap<char, u8> {
    let printable =
        |byte: u8| (b'!'..=b'~').contains(&byte) || (0xA1..=0xAC).contains(&byte) || byte >= 0xAE;
    let mut shifted = 0u32;
    (0..=255u8)
        .map(|byte| {
            if printable(byte) {
                (char::from(byte), byte)
            } else {
                let c = char::from_u32(256 + shifted).expect("below U+0200");
                shifted += 1;
                (c, byte)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_alphabet_covers_every_byte_once() {
        let chars = byte_level_chars();
        assert_eq!(chars.len(), 256);
        assert_eq!(chars[&'Ġ'], b' ');
        assert_eq!(chars[&'Ċ'], b'\n');
        assert_eq!(chars[&'a'], b'a');
        let mut bytes: Vec<u8> = chars.values().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
    }
}
