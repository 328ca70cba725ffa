//! Dataset files: parsing an upload (JSONL or CSV) into items, and the revision's content hash.
//!
//! Pure: bytes in, items or a precise error out. Nothing is stored here; the caller stores a
//! parsed dataset in one transaction, so a bad file stores nothing.

use crate::ids::{DatasetId, RevisionId};
use crate::prompt::{describe_bytes, MAX_PROMPT_BYTES};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Uploads larger than this are refused before parsing.
pub const MAX_UPLOAD_BYTES: usize = 20 * 1024 * 1024;
/// Longest accepted case id, in bytes.
const MAX_CASE_ID_BYTES: usize = 200;

/// One case of a dataset: the question put to the model and the reference answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetItem {
    /// Stable id of the case within the dataset; part of every result identity.
    pub case_id: String,
    /// Text substituted for `{input}` in the eval's prompt template.
    pub input: String,
    /// Reference answer the graders compare against.
    pub target: String,
    /// Optional grouping for per-category breakdowns ('' when absent).
    pub category: String,
}

/// A fully validated upload: its items in file order and the revision's content hash.
#[derive(Clone, Debug)]
pub struct ParsedDataset {
    pub items: Vec<DatasetItem>,
    /// `sha256:` + hex of the canonical JSONL of the items (field order fixed, file order kept),
    /// so the same content uploaded as CSV or JSONL gets the same revision.
    pub content_hash: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DatasetError {
    #[error("the file is empty: a dataset needs at least one item")]
    Empty,
    #[error("the file is {size_mb:.1} MB; the limit is {limit_mb} MB")]
    TooLarge { size_mb: f64, limit_mb: usize },
    #[error(
        "the file is not text (it contains binary data near byte {offset}); upload JSONL or CSV"
    )]
    Binary { offset: usize },
    #[error("line {line}: {message}")]
    Line { line: usize, message: String },
}

/// The two accepted formats. CSV is chosen by a `.csv` file name; everything else is JSONL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetFormat {
    Jsonl,
    Csv,
}

impl DatasetFormat {
    pub fn from_file_name(name: &str) -> DatasetFormat {
        if name.to_ascii_lowercase().ends_with(".csv") {
            DatasetFormat::Csv
        } else {
            DatasetFormat::Jsonl
        }
    }
}

/// The JSON shape of one JSONL line. `id` may also be spelled `case_id`, `target` `answer`.
#[derive(Deserialize)]
struct JsonlLine {
    #[serde(alias = "case_id")]
    id: Option<serde_json::Value>,
    input: Option<String>,
    #[serde(alias = "answer")]
    target: Option<serde_json::Value>,
    category: Option<String>,
}

/// Parses an upload of at most [`MAX_UPLOAD_BYTES`].
pub fn parse_dataset(bytes: &[u8], format: DatasetFormat) -> Result<ParsedDataset, DatasetError> {
    parse_dataset_with_limit(bytes, format, MAX_UPLOAD_BYTES)
}

/// Parses a dataset of at most `limit` bytes (tools that load large datasets directly).
pub fn parse_dataset_with_limit(
    bytes: &[u8],
    format: DatasetFormat,
    limit: usize,
) -> Result<ParsedDataset, DatasetError> {
    if bytes.len() > limit {
        return Err(DatasetError::TooLarge {
            size_mb: bytes.len() as f64 / (1024.0 * 1024.0),
            limit_mb: limit / (1024 * 1024),
        });
    }
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        return Err(DatasetError::Binary { offset });
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            return Err(DatasetError::Binary {
                offset: err.valid_up_to(),
            })
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(DatasetError::Empty);
    }
    let items = match format {
        DatasetFormat::Jsonl => parse_jsonl(text)?,
        DatasetFormat::Csv => parse_csv(text)?,
    };
    let items_with_lines: Vec<(usize, DatasetItem)> = items;
    check_unique_ids(&items_with_lines)?;
    let items: Vec<DatasetItem> = items_with_lines.into_iter().map(|(_, item)| item).collect();
    if items.is_empty() {
        return Err(DatasetError::Empty);
    }
    let content_hash = content_hash(&items);
    Ok(ParsedDataset {
        items,
        content_hash,
    })
}

fn line_error(line: usize, message: impl Into<String>) -> DatasetError {
    DatasetError::Line {
        line,
        message: message.into(),
    }
}

fn parse_jsonl(text: &str) -> Result<Vec<(usize, DatasetItem)>, DatasetError> {
    let mut items = Vec::new();
    for (index, raw_line) in text.lines().enumerate() {
        let line = index + 1;
        if raw_line.trim().is_empty() {
            continue;
        }
        let parsed: JsonlLine = serde_json::from_str(raw_line)
            .map_err(|err| line_error(line, format!("invalid JSON: {err}")))?;
        let case_id = match parsed.id {
            Some(serde_json::Value::String(id)) => id,
            Some(serde_json::Value::Number(id)) => id.to_string(),
            Some(_) => return Err(line_error(line, "field `id` must be a string or a number")),
            None => return Err(line_error(line, "missing field `id`")),
        };
        let input = parsed
            .input
            .ok_or_else(|| line_error(line, "missing field `input`"))?;
        let target = match parsed.target {
            Some(serde_json::Value::String(target)) => target,
            Some(serde_json::Value::Number(target)) => target.to_string(),
            Some(serde_json::Value::Bool(target)) => target.to_string(),
            Some(_) => {
                return Err(line_error(
                    line,
                    "field `target` must be a string, number or boolean",
                ))
            }
            None => return Err(line_error(line, "missing field `target`")),
        };
        items.push((
            line,
            validated_item(line, case_id, input, target, parsed.category)?,
        ));
    }
    Ok(items)
}

fn parse_csv(text: &str) -> Result<Vec<(usize, DatasetItem)>, DatasetError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|err| line_error(1, format!("unreadable CSV header: {err}")))?
        .clone();
    let column = |names: &[&str]| {
        headers
            .iter()
            .position(|header| names.contains(&header.trim().to_ascii_lowercase().as_str()))
    };
    let id_column = column(&["id", "case_id"])
        .ok_or_else(|| line_error(1, "the CSV header has no `id` column"))?;
    let input_column =
        column(&["input"]).ok_or_else(|| line_error(1, "the CSV header has no `input` column"))?;
    let target_column = column(&["target", "answer"])
        .ok_or_else(|| line_error(1, "the CSV header has no `target` column"))?;
    let category_column = column(&["category"]);
    let mut items = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|err| {
            let line = err.position().map_or(0, |pos| pos.line() as usize);
            line_error(line, format!("invalid CSV: {err}"))
        })?;
        let line = record.position().map_or(0, |pos| pos.line() as usize);
        let field = |index: usize, name: &str| {
            record
                .get(index)
                .map(str::to_string)
                .ok_or_else(|| line_error(line, format!("missing field `{name}`")))
        };
        let case_id = field(id_column, "id")?;
        let input = field(input_column, "input")?;
        let target = field(target_column, "target")?;
        let category = category_column.and_then(|index| record.get(index).map(str::to_string));
        items.push((
            line,
            validated_item(line, case_id, input, target, category)?,
        ));
    }
    Ok(items)
}

fn validated_item(
    line: usize,
    case_id: String,
    input: String,
    target: String,
    category: Option<String>,
) -> Result<DatasetItem, DatasetError> {
    let case_id = case_id.trim().to_string();
    if case_id.is_empty() {
        return Err(line_error(line, "field `id` is empty"));
    }
    if case_id.len() > MAX_CASE_ID_BYTES {
        return Err(line_error(
            line,
            format!("field `id` is longer than {MAX_CASE_ID_BYTES} bytes"),
        ));
    }
    if input.trim().is_empty() {
        return Err(line_error(line, "field `input` is empty"));
    }
    // A field longer than the longest prompt could never be sent (the input) or put before a
    // judge (the target): refused here rather than at every launch.
    for (name, value) in [("input", &input), ("target", &target)] {
        if value.len() > MAX_PROMPT_BYTES {
            return Err(line_error(
                line,
                format!(
                    "field `{name}` is {}; the limit is {} (the longest prompt Arbiter sends)",
                    describe_bytes(value.len()),
                    describe_bytes(MAX_PROMPT_BYTES)
                ),
            ));
        }
    }
    Ok(DatasetItem {
        case_id,
        input,
        target,
        category: category.unwrap_or_default().trim().to_string(),
    })
}

fn check_unique_ids(items: &[(usize, DatasetItem)]) -> Result<(), DatasetError> {
    let mut first_line: HashMap<&str, usize> = HashMap::with_capacity(items.len());
    for (line, item) in items {
        if let Some(first) = first_line.insert(item.case_id.as_str(), *line) {
            return Err(line_error(
                *line,
                format!(
                    "duplicate case id `{}` (first seen on line {first})",
                    item.case_id
                ),
            ));
        }
    }
    Ok(())
}

/// SHA-256 over one canonical JSON object per item, newline-terminated.
pub fn content_hash(items: &[DatasetItem]) -> String {
    let mut hasher = Sha256::new();
    for item in items {
        // serde_json keeps struct field order, so this encoding is canonical for our type.
        let line = serde_json::to_string(item).expect("dataset items always serialize");
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetRevision {
    pub id: RevisionId,
    pub dataset_id: DatasetId,
    pub content_hash: String,
    pub item_count: i64,
    pub source_name: String,
    pub created_at: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetSummary {
    pub id: DatasetId,
    pub name: String,
    pub revision_count: i64,
    /// The newest revision, which new evals and runs use.
    pub latest_revision: Option<DatasetRevision>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jsonl(text: &str) -> Result<ParsedDataset, DatasetError> {
        parse_dataset(text.as_bytes(), DatasetFormat::Jsonl)
    }

    #[test]
    fn parses_jsonl_with_numbers_and_aliases() {
        let parsed = jsonl(
            "{\"id\": 1, \"input\": \"2+2?\", \"target\": 4}\n\n{\"case_id\": \"b\", \"input\": \"Capital of France?\", \"answer\": \"Paris\", \"category\": \"geo\"}\n",
        )
        .unwrap();
        assert_eq!(parsed.items.len(), 2);
        assert_eq!(parsed.items[0].case_id, "1");
        assert_eq!(parsed.items[0].target, "4");
        assert_eq!(parsed.items[1].category, "geo");
        assert!(parsed.content_hash.starts_with("sha256:"));
    }

    #[test]
    fn same_content_as_csv_and_jsonl_gives_the_same_revision() {
        let from_jsonl =
            jsonl("{\"id\":\"a\",\"input\":\"x\",\"target\":\"y\",\"category\":\"c\"}\n").unwrap();
        let from_csv =
            parse_dataset(b"id,input,target,category\na,x,y,c\n", DatasetFormat::Csv).unwrap();
        assert_eq!(from_jsonl.items, from_csv.items);
        assert_eq!(from_jsonl.content_hash, from_csv.content_hash);
        let changed =
            jsonl("{\"id\":\"a\",\"input\":\"x\",\"target\":\"z\",\"category\":\"c\"}\n").unwrap();
        assert_ne!(changed.content_hash, from_jsonl.content_hash);
    }

    #[test]
    fn bad_json_names_its_line() {
        let err =
            jsonl("{\"id\":\"a\",\"input\":\"x\",\"target\":\"y\"}\n{not json\n").unwrap_err();
        assert!(err.to_string().starts_with("line 2: invalid JSON"), "{err}");
    }

    #[test]
    fn missing_fields_name_line_and_field() {
        let err = jsonl("{\"id\":\"a\",\"input\":\"x\"}\n").unwrap_err();
        assert_eq!(err.to_string(), "line 1: missing field `target`");
        let err = jsonl("{\"input\":\"x\",\"target\":\"y\"}\n").unwrap_err();
        assert_eq!(err.to_string(), "line 1: missing field `id`");
    }

    #[test]
    fn duplicate_ids_name_both_lines() {
        let err = jsonl(
            "{\"id\":\"a\",\"input\":\"x\",\"target\":\"y\"}\n{\"id\":\"b\",\"input\":\"x\",\"target\":\"y\"}\n{\"id\":\"a\",\"input\":\"z\",\"target\":\"y\"}\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 3: duplicate case id `a` (first seen on line 1)"
        );
    }

    #[test]
    fn empty_binary_and_huge_files_are_refused() {
        assert_eq!(jsonl("").unwrap_err(), DatasetError::Empty);
        assert_eq!(jsonl(" \n\n").unwrap_err(), DatasetError::Empty);
        let junk = [0x89u8, b'P', b'N', b'G', 0, 1, 2, 0xff];
        assert!(matches!(
            parse_dataset(&junk, DatasetFormat::Jsonl),
            Err(DatasetError::Binary { .. })
        ));
        let huge = vec![b'a'; 50 * 1024 * 1024];
        let err = parse_dataset(&huge, DatasetFormat::Jsonl).unwrap_err();
        assert_eq!(err.to_string(), "the file is 50.0 MB; the limit is 20 MB");
    }

    #[test]
    fn fields_longer_than_the_longest_prompt_name_line_and_limit() {
        let long = "x".repeat(MAX_PROMPT_BYTES + 1);
        let text = format!(
            "{{\"id\":\"a\",\"input\":\"x\",\"target\":\"y\"}}\n{{\"id\":\"b\",\"input\":\"{long}\",\"target\":\"y\"}}\n"
        );
        assert_eq!(
            jsonl(&text).unwrap_err().to_string(),
            "line 2: field `input` is 1.0 MiB; the limit is 1.0 MiB (the longest prompt Arbiter sends)"
        );
        let csv = format!("id,input,target\na,x,{long}\n");
        let err = parse_dataset(csv.as_bytes(), DatasetFormat::Csv).unwrap_err();
        assert!(
            err.to_string().starts_with("line 2: field `target` is"),
            "{err}"
        );
    }

    #[test]
    fn csv_without_required_column_is_refused() {
        let err = parse_dataset(b"id,question\n1,x\n", DatasetFormat::Csv).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 1: the CSV header has no `input` column"
        );
    }

    #[test]
    fn the_bundled_sample_parses() {
        let parsed = parse_dataset(
            include_bytes!("../../public/samples/qa-basic.jsonl"),
            DatasetFormat::Jsonl,
        )
        .unwrap();
        assert_eq!(parsed.items.len(), 60);
    }
}
