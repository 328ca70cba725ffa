//! Building and loading n-gram indexes of training corpora (`arbiter contamination index`),
//! for the contamination checks of [`arbiter_domain::contamination`].
//!
//! Corpora stream through in bounded memory: a plain text file is one document read a block at
//! a time (the last n − 1 words carried over, so no n-gram across a block boundary is lost); a
//! JSON Lines file (or its gzip form) is one document per line, its string values joined; a
//! Parquet file one document per row. Hashes gather in runs of at most `run_hashes`, each
//! sorted and written to a scratch file, and the runs are merged into the index: memory is the
//! run, whatever the corpus's size.

use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use arbiter_domain::contamination::{
    header, ngram_hashes, normalised_words, NgramIndex, HEADER_BYTES,
};

use crate::error::{ServiceError, ServiceResult};

/// Hashes held in memory before a run is written out (64 MiB of them).
pub const DEFAULT_RUN_HASHES: usize = 8 << 20;
/// Bytes of a text corpus read at a time.
const BLOCK_BYTES: usize = 1 << 20;

/// What building an index did.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexBuilt {
    pub path: PathBuf,
    pub content_hash: String,
    /// Distinct n-grams in the index.
    pub ngrams: u64,
    /// Corpus bytes read (decompressed).
    pub bytes_read: u64,
    pub documents: u64,
}

/// Builds the index of `corpora`'s `n`-grams at `out`.
pub fn build_index(
    corpora: &[PathBuf],
    out: &Path,
    n: usize,
    run_hashes: usize,
) -> ServiceResult<IndexBuilt> {
    if corpora.is_empty() {
        return Err(ServiceError::Invalid(
            "name at least one corpus file".into(),
        ));
    }
    if !(1..=64).contains(&n) {
        return Err(ServiceError::Invalid(format!(
            "n must be between 1 and 64, not {n}"
        )));
    }
    // Runs go beside the index (where there is room for it), removed however this ends.
    let scratch = Scratch(PathBuf::from(format!(
        "{}.runs-{}",
        out.display(),
        std::process::id()
    )));
    std::fs::create_dir_all(&scratch.0).map_err(|err| io_failure(&scratch.0, err))?;
    let mut runs = Runs {
        buffer: Vec::with_capacity(run_hashes.min(DEFAULT_RUN_HASHES)),
        limit: run_hashes.max(1),
        files: Vec::new(),
        scratch: scratch.0.clone(),
    };
    let mut bytes_read = 0;
    let mut documents = 0;
    for corpus in corpora {
        let (bytes, docs) =
            read_corpus(corpus, n, &mut |hash| runs.push(hash)).map_err(|problem| {
                ServiceError::Invalid(format!("{}: {problem}", corpus.display()))
            })??;
        bytes_read += bytes;
        documents += docs;
    }
    runs.flush()?;
    let ngrams = merge(&runs.files, out, n)?;
    let content_hash = file_hash(out)?;
    Ok(IndexBuilt {
        path: out.to_path_buf(),
        content_hash,
        ngrams,
        bytes_read,
        documents,
    })
}

/// Loads an index file; the error names the file and what is wrong.
pub fn load_index(path: &Path) -> ServiceResult<NgramIndex> {
    let bytes = std::fs::read(path).map_err(|err| {
        ServiceError::Invalid(format!(
            "the contamination index {} cannot be read: {err}",
            path.display()
        ))
    })?;
    NgramIndex::from_bytes(&bytes).map_err(|problem| {
        ServiceError::Invalid(format!(
            "the contamination index {} {problem}",
            path.display()
        ))
    })
}

fn io_failure(path: &Path, err: std::io::Error) -> ServiceError {
    ServiceError::Invalid(format!("{}: {err}", path.display()))
}

/// A scratch folder, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sorted runs of hashes on disk.
struct Runs {
    buffer: Vec<u64>,
    limit: usize,
    files: Vec<PathBuf>,
    scratch: PathBuf,
}

impl Runs {
    fn push(&mut self, hash: u64) -> ServiceResult<()> {
        self.buffer.push(hash);
        if self.buffer.len() >= self.limit {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> ServiceResult<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        self.buffer.sort_unstable();
        self.buffer.dedup();
        let path = self.scratch.join(format!("run-{}", self.files.len()));
        let mut out =
            BufWriter::new(std::fs::File::create(&path).map_err(|err| io_failure(&path, err))?);
        for hash in &self.buffer {
            out.write_all(&hash.to_le_bytes())
                .map_err(|err| io_failure(&path, err))?;
        }
        out.flush().map_err(|err| io_failure(&path, err))?;
        self.files.push(path);
        self.buffer.clear();
        Ok(())
    }
}

/// Merges sorted runs into the index file, dropping repeats; returns the hashes written.
fn merge(runs: &[PathBuf], out: &Path, n: usize) -> ServiceResult<u64> {
    let mut readers = runs
        .iter()
        .map(|path| {
            std::fs::File::open(path)
                .map(BufReader::new)
                .map_err(|err| io_failure(path, err))
        })
        .collect::<ServiceResult<Vec<_>>>()?;
    let next = |reader: &mut BufReader<std::fs::File>| -> Option<u64> {
        let mut bytes = [0u8; 8];
        reader
            .read_exact(&mut bytes)
            .ok()
            .map(|()| u64::from_le_bytes(bytes))
    };
    let mut heap = BinaryHeap::new();
    for (index, reader) in readers.iter_mut().enumerate() {
        if let Some(hash) = next(reader) {
            heap.push(std::cmp::Reverse((hash, index)));
        }
    }
    let file = std::fs::File::create(out).map_err(|err| io_failure(out, err))?;
    let mut writer = BufWriter::new(file);
    writer
        .write_all(&header(n, 0))
        .map_err(|err| io_failure(out, err))?;
    let mut written = 0u64;
    let mut last = None;
    while let Some(std::cmp::Reverse((hash, index))) = heap.pop() {
        if last != Some(hash) {
            writer
                .write_all(&hash.to_le_bytes())
                .map_err(|err| io_failure(out, err))?;
            written += 1;
            last = Some(hash);
        }
        if let Some(following) = next(&mut readers[index]) {
            heap.push(std::cmp::Reverse((following, index)));
        }
    }
    let mut file = writer
        .into_inner()
        .map_err(|err| io_failure(out, err.into_error()))?;
    file.seek(std::io::SeekFrom::Start(0))
        .map_err(|err| io_failure(out, err))?;
    file.write_all(&header(n, written)[..HEADER_BYTES])
        .map_err(|err| io_failure(out, err))?;
    file.sync_all().map_err(|err| io_failure(out, err))?;
    Ok(written)
}

fn file_hash(path: &Path) -> ServiceResult<String> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(path).map_err(|err| io_failure(path, err))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|err| io_failure(path, err))?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// Streams one corpus file's n-gram hashes into `sink`; returns (bytes read, documents). The
/// outer error is the file's problem; the inner one the sink's.
fn read_corpus(
    path: &Path,
    n: usize,
    sink: &mut dyn FnMut(u64) -> ServiceResult<()>,
) -> Result<ServiceResult<(u64, u64)>, String> {
    let name = path.to_string_lossy().to_lowercase();
    let file = std::fs::File::open(path).map_err(|err| format!("cannot be read: {err}"))?;
    let mut document = |text: &str| -> ServiceResult<()> {
        for hash in ngram_hashes(&normalised_words(text), n) {
            sink(hash)?;
        }
        Ok(())
    };
    if name.ends_with(".parquet") {
        let mut documents = 0;
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let reader = SerializedFileReader::new(file)
            .map_err(|err| format!("is not a readable Parquet file: {err}"))?;
        for row in reader
            .get_row_iter(None)
            .map_err(|err| format!("unreadable: {err}"))?
        {
            let row = row.map_err(|err| format!("row {}: {err}", documents + 1))?;
            if let Err(err) = document(&strings_of(&row.to_json_value())) {
                return Ok(Err(err));
            }
            documents += 1;
        }
        return Ok(Ok((bytes, documents)));
    }
    let reader: Box<dyn Read> = if name.ends_with(".gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::new(reader);
    if name.ends_with(".jsonl") || name.ends_with(".jsonl.gz") || name.ends_with(".json") {
        let (mut bytes, mut documents) = (0u64, 0u64);
        let mut line = String::new();
        loop {
            line.clear();
            let read = reader
                .read_line(&mut line)
                .map_err(|err| format!("line {}: {err}", documents + 1))?;
            if read == 0 {
                return Ok(Ok((bytes, documents)));
            }
            bytes += read as u64;
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(&line)
                .map_err(|err| format!("line {}: not JSON: {err}", documents + 1))?;
            if let Err(err) = document(&strings_of(&value)) {
                return Ok(Err(err));
            }
            documents += 1;
        }
    }
    // Plain text: one document, a block at a time, the last n − 1 words carried over.
    let (mut bytes, mut carried) = (0u64, Vec::<String>::new());
    let mut block = vec![0u8; BLOCK_BYTES];
    let mut pending = Vec::new();
    loop {
        let read = reader
            .read(&mut block)
            .map_err(|err| format!("cannot be read: {err}"))?;
        bytes += read as u64;
        pending.extend_from_slice(&block[..read]);
        // Cut at the last whitespace, so no word is split between blocks (the rest waits).
        let cut = if read == 0 {
            pending.len()
        } else {
            pending
                .iter()
                .rposition(u8::is_ascii_whitespace)
                .map_or(0, |at| at + 1)
        };
        let text = String::from_utf8_lossy(&pending[..cut]).into_owned();
        pending.drain(..cut);
        let mut words = std::mem::take(&mut carried);
        words.extend(normalised_words(&text));
        for hash in ngram_hashes(&words, n) {
            if let Err(err) = sink(hash) {
                return Ok(Err(err));
            }
        }
        carried = words[words.len().saturating_sub(n - 1)..].to_vec();
        if read == 0 {
            return Ok(Ok((bytes, 1)));
        }
    }
}

/// A JSON document's text: its string values, in order, one per line.
fn strings_of(value: &serde_json::Value) -> String {
    let mut text = String::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::String(string) => {
                text.push_str(string);
                text.push('\n');
            }
            serde_json::Value::Array(items) => stack.extend(items.iter().rev()),
            serde_json::Value::Object(fields) => stack.extend(fields.values().rev()),
            _ => {}
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_built_in_small_runs_equals_one_built_at_once() {
        let directory = tempfile::tempdir().unwrap();
        let text = directory.path().join("corpus.txt");
        // Longer than one block, so n-grams across blocks must be kept.
        let sentence = "the quick brown fox jumps over the lazy dog near a river bank ";
        let body: String = (0..40_000).map(|i| format!("{sentence}{i} ")).collect();
        std::fs::write(&text, &body).unwrap();
        let jsonl = directory.path().join("corpus.jsonl");
        std::fs::write(
            &jsonl,
            "{\"text\": \"Capital cities: the capital of France is Paris and of Japan Tokyo, said the atlas.\"}\n",
        )
        .unwrap();
        let small = directory.path().join("small.ngrams");
        let large = directory.path().join("large.ngrams");
        let corpora = [text.clone(), jsonl.clone()];
        let built = build_index(&corpora, &small, 13, 1000).unwrap();
        let once = build_index(&corpora, &large, 13, usize::MAX / 2).unwrap();
        assert_eq!(built.ngrams, once.ngrams);
        assert_eq!(built.content_hash, once.content_hash);
        assert_eq!(built.documents, 2);
        let index = load_index(&small).unwrap();
        assert_eq!(index.len() as u64, built.ngrams);
        assert_eq!(index.content_hash, built.content_hash);
        // Every 13-gram of the text, block boundaries included, is in the index.
        let words = normalised_words(&body);
        assert!(ngram_hashes(&words, 13).all(|hash| index.contains(hash)));
        assert!(index
            .check("Recall: capital cities. The capital of France is Paris, and of Japan, Tokyo - said the atlas?")
            .contaminated());
        assert!(!index
            .check("What is the capital of Peru, a country in South America today?")
            .contaminated());
        let missing =
            build_index(&[directory.path().join("nope.txt")], &small, 13, 10).unwrap_err();
        assert!(missing.to_string().contains("nope.txt"), "{missing}");
    }
}
