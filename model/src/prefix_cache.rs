//! Automatic prefix caching: a prompt that starts like an earlier one (a judge's rubric,
//! few-shot exemplars, a system prompt) is read from where the earlier reading left off.
//!
//! candle's llama keeps its KV cache inside the model value, and cloning the value shares the
//! cache's tensors, so a clone taken after reading a prefix is that prefix's state. Such
//! snapshots are kept at [`BOUNDARIES`] (a prompt's first 64, 128, 256, … tokens): a prompt
//! costs at most twice its length in kept tokens, and a shared prefix is found down to the
//! boundary below it. Snapshots are kept up to a capacity in tokens, least recently used out
//! first. What was looked up and found is counted in tokens, as vLLM's
//! `prefix_cache_queries_total` and `prefix_cache_hits_total` are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use candle_transformers::models::quantized_llama::ModelWeights;

/// The prefix lengths snapshots are kept at.
pub const BOUNDARIES: [usize; 8] = [64, 128, 256, 512, 1024, 2048, 4096, 8192];

/// The prefix tokens' state, the prefix itself (compared on every hit, so a hash collision
/// can never answer from another prompt's state), and when it was last used.
struct Snapshot {
    model: ModelWeights,
    prefix: Vec<u32>,
    used: u64,
}

/// Snapshots by a hash of their prefix's token ids.
pub struct PrefixCache {
    capacity_tokens: usize,
    snapshots: Mutex<(HashMap<u64, Snapshot>, u64)>,
    queried: AtomicU64,
    hits: AtomicU64,
}

/// What a prompt's lookup gave: the model to read the rest with, and where the rest starts.
pub struct Restored {
    pub model: ModelWeights,
    pub start: usize,
}

/// The token ids as bytes, to hash any prefix of them by slicing.
fn token_bytes(tokens: &[u32]) -> Vec<u8> {
    tokens.iter().flat_map(|id| id.to_le_bytes()).collect()
}

/// The key of the first `length` tokens of `bytes` (from [`token_bytes`]).
fn prefix_key(bytes: &[u8], length: usize) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&bytes[..length * 4])
}

impl PrefixCache {
    /// A cache holding up to `capacity_tokens` tokens of snapshots; 0 keeps none.
    pub fn new(capacity_tokens: usize) -> PrefixCache {
        PrefixCache {
            capacity_tokens,
            snapshots: Mutex::new((HashMap::new(), 0)),
            queried: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<u64, Snapshot>, u64)> {
        self.snapshots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The state after the longest kept prefix of `prompt` shorter than all of it (the last
    /// token is always read, for the logits after it), or `weights` from the start.
    pub fn restore(&self, weights: &ModelWeights, prompt: &[u32]) -> Restored {
        self.queried
            .fetch_add(prompt.len() as u64, Ordering::Relaxed);
        let bytes = token_bytes(prompt);
        let keys: Vec<(usize, u64)> = BOUNDARIES
            .iter()
            .rev()
            .filter(|boundary| **boundary < prompt.len())
            .map(|boundary| (*boundary, prefix_key(&bytes, *boundary)))
            .collect();
        let mut guard = self.lock();
        let (snapshots, clock) = &mut *guard;
        *clock += 1;
        for (boundary, key) in keys {
            let found = snapshots
                .get_mut(&key)
                .filter(|snapshot| snapshot.prefix[..] == prompt[..boundary]);
            if let Some(snapshot) = found {
                snapshot.used = *clock;
                self.hits.fetch_add(boundary as u64, Ordering::Relaxed);
                return Restored {
                    model: snapshot.model.clone(),
                    start: boundary,
                };
            }
        }
        Restored {
            model: weights.clone(),
            start: 0,
        }
    }

    /// Keeps `model`, which has read `prefix` (a boundary's length), unless it is kept already.
    pub fn keep(&self, prefix: &[u32], model: &ModelWeights) {
        if prefix.len() > self.capacity_tokens {
            return;
        }
        let key = prefix_key(&token_bytes(prefix), prefix.len());
        let mut guard = self.lock();
        let (snapshots, clock) = &mut *guard;
        *clock += 1;
        let used = *clock;
        snapshots
            .entry(key)
            .and_modify(|snapshot| snapshot.used = used)
            .or_insert_with(|| Snapshot {
                model: model.clone(),
                prefix: prefix.to_vec(),
                used,
            });
        let mut held: usize = snapshots
            .values()
            .map(|snapshot| snapshot.prefix.len())
            .sum();
        while held > self.capacity_tokens {
            let Some((&oldest, _)) = snapshots.iter().min_by_key(|(_, snapshot)| snapshot.used)
            else {
                break;
            };
            if let Some(evicted) = snapshots.remove(&oldest) {
                held -= evicted.prefix.len();
            }
        }
    }

    /// Prompt tokens looked up, and those found, since the server started.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.queried.load(Ordering::Relaxed),
            self.hits.load(Ordering::Relaxed),
        )
    }
}
