//! `arbiter bench contamination`: an n-gram index built from a synthetic corpus (indexing rate,
//! MB/s), then `--items` (default 1,000,000) items checked against it (cost per item), as a
//! launch checks them.

use arbiter_engine::contamination::{build_index, load_index, DEFAULT_RUN_HASHES};
use std::io::Write;
use std::time::Instant;

const WORDS: [&str; 24] = [
    "the",
    "river",
    "crossed",
    "a",
    "valley",
    "where",
    "seven",
    "farmers",
    "planted",
    "barley",
    "under",
    "grey",
    "skies",
    "while",
    "merchants",
    "counted",
    "silver",
    "coins",
    "beside",
    "old",
    "stone",
    "bridges",
    "near",
    "town",
];

/// Deterministic text: word `i` of a long pseudo-random sequence (splitmix64 of `i`).
fn word(i: u64) -> &'static str {
    let mut mixed = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    mixed ^= mixed >> 31;
    WORDS[(mixed % WORDS.len() as u64) as usize]
}

pub(crate) fn run(items: usize) -> anyhow::Result<()> {
    let directory = tempfile::tempdir()?;
    let corpus = directory.path().join("corpus.txt");
    let target_bytes = 100_000_000u64;
    let total_words = {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&corpus)?);
        let (mut written, mut i) = (0u64, 0u64);
        while written < target_bytes {
            let w = word(i);
            out.write_all(w.as_bytes())?;
            out.write_all(if i % 17 == 16 { b".\n" } else { b" " })?;
            written += w.len() as u64 + 1;
            i += 1;
        }
        i
    };
    println!(
        "== contamination: a {} MB corpus indexed, then {items} items checked",
        target_bytes / 1_000_000
    );
    let index_path = directory.path().join("corpus.ngrams");
    let started = Instant::now();
    let built = build_index(&[corpus], &index_path, 13, DEFAULT_RUN_HASHES)?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "indexing: {:.1} MB in {seconds:.1} s = {:.1} MB/s; {} distinct 13-grams, index {:.0} MB",
        built.bytes_read as f64 / 1e6,
        built.bytes_read as f64 / 1e6 / seconds,
        built.ngrams,
        std::fs::metadata(&index_path)?.len() as f64 / 1e6
    );
    let index = load_index(&index_path)?;
    // Items of 40 words: half copied from the corpus's word sequence, half shuffled words.
    let started = Instant::now();
    let mut flagged = 0usize;
    for item in 0..items as u64 {
        let text: String = (0..40)
            .map(|k| {
                if item % 2 == 0 {
                    word((item * 7919) % (total_words - 64) + k)
                } else {
                    WORDS[((item * 31 + k * 7) % WORDS.len() as u64) as usize]
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        flagged += usize::from(index.check(&text).contaminated());
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "checking: {items} items of 40 words in {seconds:.2} s = {:.2} µs per item; {flagged} flagged",
        seconds * 1e6 / items as f64
    );
    Ok(())
}
