//! Contamination checks: does an eval item's text appear in a training corpus? As in the GPT-3
//! paper's decontamination (Brown et al., 2020, appendix C), text is normalised to words
//! (lower-cased, punctuation dropped, split on whitespace) and an item counts as contaminated
//! when any of its 13-grams occurs in the corpus. The corpus is kept as a sorted set of 64-bit
//! n-gram hashes (xxh3, a fixed seed, so the same text always hashes alike), in a file with a
//! small header; an item's check is one binary search per n-gram.
//!
//! Pure: building the index file from a corpus (streaming, in bounded memory) is the engine's.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// The GPT-3 paper's n-gram length.
pub const DEFAULT_NGRAM: usize = 13;
/// The index file's first bytes.
pub const MAGIC: &[u8; 16] = b"ARBITER-NGRAMS1\n";
/// Header: magic, n (u32), reserved (u32), hash count (u64).
pub const HEADER_BYTES: usize = 16 + 4 + 4 + 8;

/// An item's text as words: lower-cased, with everything but letters, digits and whitespace
/// dropped (so "Paris," and "paris" are one word), split on whitespace.
pub fn normalised_words(text: &str) -> Vec<String> {
    let cleaned: String = text
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_alphanumeric() || c.is_whitespace() {
                c
            } else {
                ' '
            }
        })
        .collect();
    cleaned.split_whitespace().map(str::to_string).collect()
}

/// The hash of one n-gram of normalised words (joined by single spaces).
pub fn ngram_hash(words: &[String]) -> u64 {
    xxh3_64(words.join(" ").as_bytes())
}

/// The hashes of every n-gram of `words` (none when there are fewer than n words).
pub fn ngram_hashes(words: &[String], n: usize) -> impl Iterator<Item = u64> + '_ {
    words.windows(n.max(1)).map(ngram_hash)
}

/// The header of an index file with `count` hashes of `n`-grams.
pub fn header(n: usize, count: u64) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..16].copy_from_slice(MAGIC);
    header[16..20].copy_from_slice(&(n as u32).to_le_bytes());
    header[24..32].copy_from_slice(&count.to_le_bytes());
    header
}

/// A loaded index: the sorted, distinct n-gram hashes of a corpus.
#[derive(Clone, Debug)]
pub struct NgramIndex {
    pub n: usize,
    hashes: Vec<u64>,
    /// `sha256:` + hex of the index file, recorded in manifests.
    pub content_hash: String,
}

impl NgramIndex {
    /// Reads an index file's bytes; the error says what is wrong with them.
    pub fn from_bytes(bytes: &[u8]) -> Result<NgramIndex, String> {
        use sha2::{Digest, Sha256};
        if bytes.len() < HEADER_BYTES || &bytes[..16] != MAGIC {
            return Err(
                "is not an Arbiter n-gram index (made by `arbiter contamination index`)".into(),
            );
        }
        let n = u32::from_le_bytes(bytes[16..20].try_into().expect("four bytes")) as usize;
        let count = u64::from_le_bytes(bytes[24..32].try_into().expect("eight bytes"));
        let body = &bytes[HEADER_BYTES..];
        if n == 0 || body.len() as u64 != count.saturating_mul(8) {
            return Err(format!(
                "is damaged: its header says {count} hashes of {n}-grams, its body holds {} bytes",
                body.len()
            ));
        }
        let hashes: Vec<u64> = body
            .chunks_exact(8)
            .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("eight bytes")))
            .collect();
        if hashes.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err("is damaged: its hashes are not sorted and distinct".into());
        }
        Ok(NgramIndex {
            n,
            hashes,
            content_hash: format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
        })
    }

    /// N-grams in the index.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    pub fn contains(&self, hash: u64) -> bool {
        self.hashes.binary_search(&hash).is_ok()
    }

    /// What the corpus shares with `text`.
    pub fn check(&self, text: &str) -> Overlap {
        let words = normalised_words(text);
        let mut overlap = Overlap {
            ngrams: words.len().saturating_sub(self.n - 1) as u32,
            ..Overlap::default()
        };
        for (start, window) in words.windows(self.n).enumerate() {
            if self.contains(ngram_hash(window)) {
                overlap.matched += 1;
                if overlap.example.is_none() {
                    overlap.example = Some(words[start..start + self.n].join(" "));
                }
            }
        }
        overlap
    }
}

/// An eval's contamination check: an index file on the server (`arbiter contamination
/// index`), and whether targets are checked beside inputs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContaminationSpec {
    pub index: String,
    #[serde(default)]
    pub check_target: bool,
}

/// The check as a run's manifest freezes it: the index's content hash says exactly which
/// corpus it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenContamination {
    pub index: String,
    pub content_hash: String,
    pub n: usize,
    pub check_target: bool,
}

/// A run's scores with and without its contaminated items.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ContaminationReport {
    pub index_hash: String,
    pub n: usize,
    /// Items with an n-gram in the corpus.
    pub flagged_items: u64,
    /// Pass rate over every decided answer, over those of clean items, and of flagged ones.
    pub pass_rate: Option<f64>,
    pub clean_pass_rate: Option<f64>,
    pub clean_interval: Option<crate::stats::Interval>,
    pub flagged_pass_rate: Option<f64>,
    pub flagged_interval: Option<crate::stats::Interval>,
    /// Decided answers of clean and of flagged items.
    pub clean_answers: u64,
    pub flagged_answers: u64,
}

impl ContaminationReport {
    /// From the run's verdict counts (pass, fail) for flagged and clean items.
    pub fn new(
        frozen: &FrozenContamination,
        flagged_items: u64,
        flagged: (u64, u64),
        clean: (u64, u64),
    ) -> ContaminationReport {
        let rate = |(pass, fail): (u64, u64)| {
            (pass + fail > 0).then(|| pass as f64 / (pass + fail) as f64)
        };
        let interval = |(pass, fail): (u64, u64)| {
            crate::stats::proportion::wilson(pass, pass + fail, crate::stats::DEFAULT_CONFIDENCE)
        };
        ContaminationReport {
            index_hash: frozen.content_hash.clone(),
            n: frozen.n,
            flagged_items,
            pass_rate: rate((flagged.0 + clean.0, flagged.1 + clean.1)),
            clean_pass_rate: rate(clean),
            clean_interval: interval(clean),
            flagged_pass_rate: rate(flagged),
            flagged_interval: interval(flagged),
            clean_answers: clean.0 + clean.1,
            flagged_answers: flagged.0 + flagged.1,
        }
    }
}

/// What one text shares with a corpus.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Overlap {
    /// The text's n-grams (0 when it has fewer words than n: it cannot be checked).
    pub ngrams: u32,
    /// Of those, how many the corpus has.
    pub matched: u32,
    /// The first n-gram found, as normalised words.
    pub example: Option<String>,
}

impl Overlap {
    /// Contaminated: any n-gram is in the corpus (the GPT-3 paper's criterion).
    pub fn contaminated(&self) -> bool {
        self.matched > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_of(corpus: &str, n: usize) -> NgramIndex {
        let mut hashes: Vec<u64> = ngram_hashes(&normalised_words(corpus), n).collect();
        hashes.sort_unstable();
        hashes.dedup();
        let mut bytes = header(n, hashes.len() as u64).to_vec();
        for hash in &hashes {
            bytes.extend_from_slice(&hash.to_le_bytes());
        }
        NgramIndex::from_bytes(&bytes).unwrap()
    }

    #[test]
    fn words_are_lower_cased_without_punctuation() {
        assert_eq!(
            normalised_words("The capital of France is Paris, isn't it?"),
            ["the", "capital", "of", "france", "is", "paris", "isn", "t", "it"]
        );
        assert_eq!(normalised_words("  Zürich\n\tÉTÉ  "), ["zürich", "été"]);
    }

    #[test]
    fn an_item_sharing_an_ngram_with_the_corpus_is_contaminated() {
        let index = index_of(
            "Long ago the quick brown fox jumped over the lazy dog beside the river.",
            5,
        );
        let seen = index.check("Q: The QUICK brown fox, jumped over... what?");
        assert!(seen.contaminated());
        assert_eq!(seen.matched, 2);
        assert_eq!(seen.example.as_deref(), Some("the quick brown fox jumped"));
        let unseen = index.check("A slow green turtle walked under the busy bridge today.");
        assert!(!unseen.contaminated());
        assert_eq!(unseen.ngrams, 6);
        // Too short to hold one n-gram: not checked, so never contaminated.
        let short = index.check("quick brown fox");
        assert_eq!((short.ngrams, short.matched), (0, 0));
    }

    #[test]
    fn damaged_or_foreign_files_are_refused() {
        let index = index_of("one two three four five six", 3);
        assert_eq!(index.len(), 4);
        assert!(NgramIndex::from_bytes(b"not an index at all, not at all").is_err());
        let mut bytes = header(3, 2).to_vec();
        bytes.extend_from_slice(&5u64.to_le_bytes());
        assert!(NgramIndex::from_bytes(&bytes)
            .unwrap_err()
            .contains("damaged"));
        bytes.extend_from_slice(&1u64.to_le_bytes());
        assert!(NgramIndex::from_bytes(&bytes)
            .unwrap_err()
            .contains("not sorted"));
    }
}
