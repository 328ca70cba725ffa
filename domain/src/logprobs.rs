//! Per-token log probabilities: read from an OpenAI chat completion, stored compactly.
//!
//! An endpoint's logprobs JSON repeats every key and spells each token twice (as text and as a
//! byte array): about 7 KB for 32 tokens with 5 alternatives each. Stored as is, that text is
//! most of what a run writes to its database. The binary form here keeps what the readers
//! need (each token's exact bytes, its logprob and its top alternatives) in about a fifth of
//! the space:
//!
//! ```text
//! version (1 byte = 1), token count (varint), then per token:
//!   bytes (varint length + bytes), logprob (f32 LE), alternatives (varint count),
//!   then per alternative: bytes (varint length + bytes), logprob (f32 LE)
//! ```
//!
//! Logprobs are kept as f32: seven significant digits is more than any endpoint's sampling
//! precision, and the comparisons made on them (which token was likelier) are unaffected.

use serde::Deserialize;
use std::borrow::Cow;

const FORMAT_VERSION: u8 = 1;

/// One generated token: its exact bytes, its logprob and the likeliest alternatives at that
/// position (which include the token itself when the endpoint lists it).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<Alternative>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Alternative {
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

impl TokenLogprob {
    /// The token as text (invalid UTF-8, as in a token holding half a character, shown with
    /// replacement characters).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }
}

impl Alternative {
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }
}

/// The `logprobs` object of an OpenAI chat completion choice, borrowed from the response body.
#[derive(Deserialize, Debug, Default)]
pub struct ChatLogprobs<'a> {
    #[serde(default, borrow)]
    content: Option<Vec<ChatToken<'a>>>,
}

#[derive(Deserialize, Debug)]
struct ChatToken<'a> {
    #[serde(borrow)]
    token: Cow<'a, str>,
    logprob: f64,
    /// The token's exact bytes; needed only when the text cannot carry them (a token that
    /// splits a multi-byte character), so it is kept unparsed until then.
    #[serde(default, borrow)]
    bytes: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    top_logprobs: Vec<ChatAlternative<'a>>,
}

#[derive(Deserialize, Debug)]
struct ChatAlternative<'a> {
    #[serde(borrow)]
    token: Cow<'a, str>,
    logprob: f64,
    #[serde(default, borrow)]
    bytes: Option<&'a serde_json::value::RawValue>,
}

/// A token's exact bytes: its text, unless the text shows a replacement character and the
/// endpoint gave the bytes.
fn exact_bytes<'t>(token: &'t str, bytes: Option<&serde_json::value::RawValue>) -> Cow<'t, [u8]> {
    if token.contains('\u{FFFD}') {
        if let Some(parsed) = bytes.and_then(|raw| serde_json::from_str::<Vec<u8>>(raw.get()).ok())
        {
            return Cow::Owned(parsed);
        }
    }
    Cow::Borrowed(token.as_bytes())
}

impl ChatLogprobs<'_> {
    /// The compact binary form; `None` when the endpoint sent no token logprobs.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let tokens = self.content.as_ref()?;
        let mut encoder = Encoder::new(tokens.len());
        for token in tokens {
            encoder.token(
                &exact_bytes(&token.token, token.bytes),
                token.logprob as f32,
                token.top_logprobs.len(),
            );
            for alternative in &token.top_logprobs {
                encoder.alternative(
                    &exact_bytes(&alternative.token, alternative.bytes),
                    alternative.logprob as f32,
                );
            }
        }
        Some(encoder.out)
    }
}

/// The `logprobs` object of an OpenAI (legacy) completion choice: parallel lists of tokens,
/// their logprobs, and maps of the likeliest alternatives.
#[derive(Deserialize, Debug, Default)]
pub struct CompletionLogprobs<'a> {
    #[serde(default, borrow)]
    tokens: Vec<Cow<'a, str>>,
    #[serde(default)]
    token_logprobs: Vec<Option<f64>>,
    #[serde(default, borrow)]
    top_logprobs: Option<Vec<Option<Alternatives<'a>>>>,
}

/// One position's likeliest tokens and their logprobs, as a completion lists them.
type Alternatives<'a> = std::collections::BTreeMap<Cow<'a, str>, f64>;

impl CompletionLogprobs<'_> {
    /// The compact binary form; `None` when the endpoint sent no token logprobs. Alternatives
    /// are kept likeliest first.
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.tokens.is_empty() || self.tokens.len() != self.token_logprobs.len() {
            return None;
        }
        let mut encoder = Encoder::new(self.tokens.len());
        for (index, token) in self.tokens.iter().enumerate() {
            let mut alternatives: Vec<(&str, f64)> = self
                .top_logprobs
                .as_ref()
                .and_then(|top| top.get(index))
                .and_then(Option::as_ref)
                .map(|top| {
                    top.iter()
                        .map(|(text, logprob)| (text.as_ref(), *logprob))
                        .collect()
                })
                .unwrap_or_default();
            alternatives.sort_by(|a, b| b.1.total_cmp(&a.1));
            let logprob = self.token_logprobs[index].unwrap_or(f64::NEG_INFINITY);
            encoder.token(token.as_bytes(), logprob as f32, alternatives.len());
            for (text, logprob) in alternatives {
                encoder.alternative(text.as_bytes(), logprob as f32);
            }
        }
        Some(encoder.out)
    }
}

/// Encodes tokens in the compact form (for tests and for tools that build them directly).
pub fn encode(tokens: &[TokenLogprob]) -> Vec<u8> {
    let mut encoder = Encoder::new(tokens.len());
    for token in tokens {
        encoder.token(&token.bytes, token.logprob, token.top.len());
        for alternative in &token.top {
            encoder.alternative(&alternative.bytes, alternative.logprob);
        }
    }
    encoder.out
}

/// Writes the compact form (the layout in the module comment); the one place that knows it
/// besides [`decode`]. Each token is followed by exactly the alternatives it announced.
struct Encoder {
    out: Vec<u8>,
}

impl Encoder {
    fn new(tokens: usize) -> Encoder {
        let mut out = Vec::with_capacity(16 + tokens * 48);
        out.push(FORMAT_VERSION);
        put_varint(&mut out, tokens);
        Encoder { out }
    }

    fn token(&mut self, bytes: &[u8], logprob: f32, alternatives: usize) {
        put_bytes(&mut self.out, bytes);
        self.out.extend_from_slice(&logprob.to_le_bytes());
        put_varint(&mut self.out, alternatives);
    }

    fn alternative(&mut self, bytes: &[u8], logprob: f32) {
        put_bytes(&mut self.out, bytes);
        self.out.extend_from_slice(&logprob.to_le_bytes());
    }
}

/// Why stored logprobs could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("stored logprobs have unknown format version {0}")]
    UnknownVersion(u8),
    #[error("stored logprobs end early")]
    Truncated,
    #[error("stored logprobs have {0} bytes left over")]
    TrailingBytes(usize),
}

/// Reads the compact form back.
pub fn decode(data: &[u8]) -> Result<Vec<TokenLogprob>, DecodeError> {
    let mut reader = Reader { data, at: 0 };
    match reader.byte()? {
        FORMAT_VERSION => {}
        other => return Err(DecodeError::UnknownVersion(other)),
    }
    let count = reader.varint()?;
    // Each token takes at least six bytes, so a corrupt count cannot allocate much.
    let mut tokens = Vec::with_capacity(count.min(data.len() / 6));
    for _ in 0..count {
        let bytes = reader.bytes()?;
        let logprob = reader.f32()?;
        let alternatives = reader.varint()?;
        let mut top = Vec::with_capacity(alternatives.min(data.len() / 5));
        for _ in 0..alternatives {
            top.push(Alternative {
                bytes: reader.bytes()?,
                logprob: reader.f32()?,
            });
        }
        tokens.push(TokenLogprob {
            bytes,
            logprob,
            top,
        });
    }
    match data.len() - reader.at {
        0 => Ok(tokens),
        left => Err(DecodeError::TrailingBytes(left)),
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: usize) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len());
    out.extend_from_slice(bytes);
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, count: usize) -> Result<&[u8], DecodeError> {
        let end = self
            .at
            .checked_add(count)
            .filter(|end| *end <= self.data.len())
            .ok_or(DecodeError::Truncated)?;
        let slice = &self.data[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<usize, DecodeError> {
        let mut value = 0usize;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Truncated)
    }

    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let length = self.varint()?;
        Ok(self.take(length)?.to_vec())
    }

    fn f32(&mut self) -> Result<f32, DecodeError> {
        let bytes = self.take(4)?;
        Ok(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

/// A token with its probability and listed alternatives, for tests that read logprobs.
#[cfg(test)]
pub(crate) fn test_token(text: &str, p: f64, top: &[(&str, f64)]) -> TokenLogprob {
    TokenLogprob {
        bytes: text.as_bytes().to_vec(),
        logprob: p.ln() as f32,
        top: top
            .iter()
            .map(|(text, p)| Alternative {
                bytes: text.as_bytes().to_vec(),
                logprob: p.ln() as f32,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_logprobs_encode_like_chat_ones() {
        let body = r#"{"tokens": ["Par", "is"], "token_logprobs": [-0.5, -0.1],
            "top_logprobs": [{"Ber": -2.0, "Par": -0.5}, {"is": -0.1}]}"#;
        let parsed: CompletionLogprobs<'_> = serde_json::from_str(body).unwrap();
        let tokens = decode(&parsed.encode().unwrap()).unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].text(), "Par");
        assert_eq!(tokens[0].logprob, -0.5);
        assert_eq!(tokens[0].top[0].text(), "Par", "likeliest first");
        assert_eq!(tokens[0].top[1].text(), "Ber");
        let empty: CompletionLogprobs<'_> = serde_json::from_str("{}").unwrap();
        assert!(empty.encode().is_none());
    }

    fn parse(json: &str) -> Vec<TokenLogprob> {
        let logprobs: ChatLogprobs<'_> = serde_json::from_str(json).unwrap();
        decode(&logprobs.encode().expect("tokens present")).unwrap()
    }

    #[test]
    fn chat_logprobs_round_trip_through_the_compact_form() {
        let tokens = parse(
            r#"{"content": [
                {"token": "Paris", "logprob": -0.0123, "bytes": [80,97,114,105,115],
                 "top_logprobs": [{"token": "Paris", "logprob": -0.0123, "bytes": [80,97,114,105,115]},
                                  {"token": " Lyon", "logprob": -4.5, "bytes": [32,76,121,111,110]}]},
                {"token": ".", "logprob": -0.5, "top_logprobs": []}
            ]}"#,
        );
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].text(), "Paris");
        assert!((tokens[0].logprob - -0.0123).abs() < 1e-7);
        assert_eq!(tokens[0].top.len(), 2);
        assert_eq!(tokens[0].top[1].text(), " Lyon");
        assert_eq!(tokens[0].top[1].logprob, -4.5);
        assert_eq!(tokens[1].text(), ".");
        assert!(tokens[1].top.is_empty());
    }

    #[test]
    fn a_token_holding_half_a_character_keeps_its_exact_bytes() {
        // "é" is C3 A9; a tokenizer may split it, and the text then shows U+FFFD.
        let tokens = parse(
            r#"{"content": [{"token": "\ufffd", "logprob": -1.0, "bytes": [195],
                             "top_logprobs": [{"token": "\ufffd", "logprob": -1.0, "bytes": [195]}]},
                            {"token": "\ufffd", "logprob": -0.1, "bytes": [169], "top_logprobs": []}]}"#,
        );
        assert_eq!(tokens[0].bytes, vec![0xC3]);
        assert_eq!(tokens[0].top[0].bytes, vec![0xC3]);
        let joined: Vec<u8> = tokens
            .iter()
            .flat_map(|token| token.bytes.clone())
            .collect();
        assert_eq!(String::from_utf8(joined).unwrap(), "é");
    }

    #[test]
    fn escaped_token_text_is_unescaped() {
        let tokens =
            parse(r#"{"content": [{"token": "\n\"x\"", "logprob": -2.0, "top_logprobs": []}]}"#);
        assert_eq!(tokens[0].text(), "\n\"x\"");
    }

    #[test]
    fn no_content_means_no_logprobs() {
        let logprobs: ChatLogprobs<'_> = serde_json::from_str(r#"{"content": null}"#).unwrap();
        assert_eq!(logprobs.encode(), None);
        let logprobs: ChatLogprobs<'_> = serde_json::from_str("{}").unwrap();
        assert_eq!(logprobs.encode(), None);
    }

    #[test]
    fn the_compact_form_is_a_fraction_of_the_json() {
        let token = r#"{"token": " answer", "logprob": -0.123456, "bytes": [32,97,110,115,119,101,114], "top_logprobs": [
            {"token": " answer", "logprob": -0.123456, "bytes": [32,97,110,115,119,101,114]},
            {"token": " reply", "logprob": -2.5, "bytes": [32,114,101,112,108,121]},
            {"token": " result", "logprob": -3.25, "bytes": [32,114,101,115,117,108,116]},
            {"token": " sum", "logprob": -4.0, "bytes": [32,115,117,109]},
            {"token": " total", "logprob": -5.0, "bytes": [32,116,111,116,97,108]}]}"#;
        let json = format!(r#"{{"content": [{}]}}"#, vec![token; 32].join(","));
        let logprobs: ChatLogprobs<'_> = serde_json::from_str(&json).unwrap();
        let compact = logprobs.encode().unwrap();
        assert!(
            compact.len() * 4 < json.len(),
            "{} vs {}",
            compact.len(),
            json.len()
        );
        assert_eq!(decode(&compact).unwrap().len(), 32);
    }

    #[test]
    fn encode_and_decode_agree() {
        let tokens = vec![TokenLogprob {
            bytes: b"yes".to_vec(),
            logprob: -0.25,
            top: vec![
                Alternative {
                    bytes: b"yes".to_vec(),
                    logprob: -0.25,
                },
                Alternative {
                    bytes: vec![0xFF; 200],
                    logprob: -9.0,
                },
            ],
        }];
        assert_eq!(decode(&encode(&tokens)).unwrap(), tokens);
    }

    #[test]
    fn corrupt_data_is_an_error_not_a_panic() {
        let good = encode(&[TokenLogprob {
            bytes: b"a".to_vec(),
            logprob: -1.0,
            top: vec![],
        }]);
        assert_eq!(decode(&[]), Err(DecodeError::Truncated));
        assert_eq!(decode(&[9]), Err(DecodeError::UnknownVersion(9)));
        for cut in 1..good.len() {
            assert_eq!(
                decode(&good[..cut]),
                Err(DecodeError::Truncated),
                "cut at {cut}"
            );
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(DecodeError::TrailingBytes(1)));
        // A huge declared count fails on the missing data rather than allocating it.
        assert_eq!(
            decode(&[1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]),
            Err(DecodeError::Truncated)
        );
    }
}
