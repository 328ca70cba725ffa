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

/// The prefix tokens' state, and when it was last used.
struct Snapshot {
    model: ModelWeights,
    tokens: usize,
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

fn prefix_key(tokens: &[u32]) -> u64 {
    let bytes: Vec<u8> = tokens.iter().flat_map(|id| id.to_le_bytes()).collect();
    xxhash_rust::xxh3::xxh3_64(&bytes)
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
        let mut guard = self.lock();
        let (snapshots, clock) = &mut *guard;
        *clock += 1;
        for &boundary in BOUNDARIES.iter().rev() {
            if boundary >= prompt.len() {
                continue;
            }
            if let Some(snapshot) = snapshots.get_mut(&prefix_key(&prompt[..boundary])) {
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
        let mut guard = self.lock();
        let (snapshots, clock) = &mut *guard;
        *clock += 1;
        let used = *clock;
        snapshots
            .entry(prefix_key(prefix))
            .or_insert_with(|| Snapshot {
                model: model.clone(),
                tokens: prefix.len(),
                used,
            });
        let mut held: usize = snapshots.values().map(|snapshot| snapshot.tokens).sum();
        while held > self.capacity_tokens {
            let Some((&oldest, _)) = snapshots.iter().min_by_key(|(_, snapshot)| snapshot.used)
            else {
                break;
            };
            if let Some(evicted) = snapshots.remove(&oldest) {
                held -= evicted.tokens;
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
