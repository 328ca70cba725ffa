//! Token ids for the simulator's tokens, so it serves vLLM's tokenizer endpoints (`/tokenize`,
//! `/detokenize`, `/tokenizer_info`) and prompts given as token ids, as rolling-likelihood
//! clients (lm-evaluation-harness's `local-completions`, Arbiter's perplexity evals) use them.
//!
//! The simulator's tokens are pieces of text (see [`crate::replies::tokenize`]), not a fixed
//! vocabulary, so ids are handed out as pieces are first seen, for the life of the process.
//! Id 0 is the end-of-text token. A prompt of ids reads back as exactly the pieces they name,
//! so its echo scores those tokens, as a real server's does.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The end-of-text token, always id 0.
pub const END_OF_TEXT: &str = "<|endoftext|>";
/// Most distinct pieces one simulator process names; beyond it `/tokenize` refuses.
const MAX_PIECES: usize = 1_000_000;

#[derive(Default)]
struct Vocab {
    ids: HashMap<String, u32>,
    pieces: Vec<String>,
}

fn vocab() -> &'static Mutex<Vocab> {
    static VOCAB: OnceLock<Mutex<Vocab>> = OnceLock::new();
    VOCAB.get_or_init(|| {
        let mut vocab = Vocab::default();
        vocab.ids.insert(END_OF_TEXT.to_string(), 0);
        vocab.pieces.push(END_OF_TEXT.to_string());
        Mutex::new(vocab)
    })
}

/// The ids of `pieces`, naming new pieces as they come; `None` once the vocabulary is full.
pub fn ids_of(pieces: &[String]) -> Option<Vec<u32>> {
    let mut vocab = vocab()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    pieces
        .iter()
        .map(|piece| {
            if let Some(id) = vocab.ids.get(piece) {
                return Some(*id);
            }
            if vocab.pieces.len() >= MAX_PIECES {
                return None;
            }
            let id = u32::try_from(vocab.pieces.len()).ok()?;
            vocab.ids.insert(piece.clone(), id);
            vocab.pieces.push(piece.clone());
            Some(id)
        })
        .collect()
}

/// The pieces `ids` name; `Err` with the first id never handed out.
pub fn pieces_of(ids: &[u32]) -> Result<Vec<String>, u32> {
    let vocab = vocab()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    ids.iter()
        .map(|id| vocab.pieces.get(*id as usize).cloned().ok_or(*id))
        .collect()
}

/// Text split into the simulator's tokens, with the end-of-text marker as a token of its own.
pub fn pieces(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    for (index, part) in text.split(END_OF_TEXT).enumerate() {
        if index > 0 {
            pieces.push(END_OF_TEXT.to_string());
        }
        pieces.extend(crate::replies::tokenize(part));
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_pieces_both_ways() {
        let pieces = pieces("The cat<|endoftext|> sat on\nthe mat");
        assert_eq!(
            pieces,
            [
                "The",
                " cat",
                END_OF_TEXT,
                " sat",
                " on",
                "\n",
                "the",
                " mat"
            ]
        );
        let ids = ids_of(&pieces).unwrap();
        assert_eq!(ids[2], 0);
        assert_eq!(
            ids_of(&pieces).unwrap(),
            ids,
            "the same pieces, the same ids"
        );
        assert_eq!(pieces_of(&ids).unwrap(), pieces);
        assert_eq!(pieces_of(&[0, u32::MAX]), Err(u32::MAX));
    }
}
