//! A model server's automatic prefix cache, as vLLM keeps one: prompts are cut into blocks of
//! [`BLOCK_TOKENS`] tokens, each block named by a hash of itself and every block before it, and
//! a prompt's leading blocks already held are not computed again. Blocks are kept up to a
//! capacity and the least recently used go first.
//!
//! The simulator reports what it found as vLLM does (`vllm:prefix_cache_queries_total` and
//! `vllm:prefix_cache_hits_total`, in tokens), and a prompt's modelled reading time counts only
//! the tokens it did not find, so requests that share a long prefix and reach the same server
//! are faster there, as on a real one.

use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Tokens per cached block (vLLM's default block size).
pub(crate) const BLOCK_TOKENS: usize = 16;
/// Blocks one model keeps.
const CAPACITY_BLOCKS: usize = 16_384;

#[derive(Default)]
pub(crate) struct PrefixCache {
    /// Block name → when it was last used.
    blocks: HashMap<u64, u64>,
    clock: u64,
    /// Prompt tokens looked up, and those found, since the server started.
    pub(crate) queried: u64,
    pub(crate) hits: u64,
}

impl PrefixCache {
    /// Looks `tokens` up, keeps its blocks, and returns how many leading tokens were found.
    pub(crate) fn read(&mut self, tokens: &[String]) -> usize {
        self.clock += 1;
        let mut name = 0u64;
        let mut found = 0;
        let mut still_found = true;
        for block in tokens.chunks_exact(BLOCK_TOKENS) {
            for token in block {
                name = xxh3_64_with_seed(token.as_bytes(), name);
            }
            match self.blocks.insert(name, self.clock) {
                Some(_) if still_found => found += BLOCK_TOKENS,
                _ => still_found = false,
            }
        }
        self.queried += tokens.len() as u64;
        self.hits += found as u64;
        if self.blocks.len() > CAPACITY_BLOCKS {
            self.evict();
        }
        found
    }

    /// Drops the least recently used tenth of the blocks (exactly that many, even when many
    /// blocks were last used by one prompt).
    fn evict(&mut self) {
        let mut by_age: Vec<(u64, u64)> = self
            .blocks
            .iter()
            .map(|(name, used)| (*used, *name))
            .collect();
        let cut = by_age.len() / 10;
        by_age.select_nth_unstable(cut);
        for (_, name) in &by_age[..cut] {
            self.blocks.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, count: usize) -> Vec<String> {
        (0..count).map(|index| format!("{text}{index}")).collect()
    }

    #[test]
    fn a_shared_prefix_is_found_block_by_block_and_counted_in_tokens() {
        let mut cache = PrefixCache::default();
        let rubric = words("rubric", 40);
        let first: Vec<String> = [rubric.clone(), words("a", 20)].concat();
        let second: Vec<String> = [rubric.clone(), words("b", 20)].concat();
        assert_eq!(cache.read(&first), 0, "nothing is held at first");
        assert_eq!(
            cache.read(&second),
            32,
            "the rubric's two whole blocks; its third holds item tokens"
        );
        assert_eq!(cache.read(&second), 48, "all three whole blocks now");
        assert_eq!((cache.queried, cache.hits), (180, 80));
        // A block found after a miss is not a prefix hit.
        let other_start: Vec<String> = [words("z", 16), rubric[16..].to_vec()].concat();
        assert_eq!(cache.read(&other_start), 0);
    }

    #[test]
    fn the_least_recently_used_blocks_go_first() {
        let mut cache = PrefixCache::default();
        let kept = words("kept", BLOCK_TOKENS);
        cache.read(&kept);
        for round in 0..CAPACITY_BLOCKS / 64 + 2 {
            cache.read(&kept);
            cache.read(&words(&format!("filler{round}-"), 64 * BLOCK_TOKENS));
        }
        assert!(cache.blocks.len() <= CAPACITY_BLOCKS);
        assert_eq!(
            cache.read(&kept),
            BLOCK_TOKENS,
            "used every round, never evicted"
        );
    }
}
