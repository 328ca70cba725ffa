//! Dataset files: parsing an upload (JSONL or CSV; the engine decodes gzip and Parquet into
//! rows) into items, and the revision's content hash.
//!
//! An item is a JSON object with any fields. Items of the original four-field shape (`id`,
//! `input`, `target`, `category`) are kept as they always were, with the same revision
//! hashes; any other item keeps all of its fields, and each eval's field mapping says which
//! is which. Pure: bytes or rows in, items or a precise error out. Nothing is stored here;
//! the caller stores a parsed dataset in one transaction, so a bad file stores nothing.

use crate::fields::scalar_text;
use crate::ids::{DatasetId, RevisionId};
use crate::prompt::{describe_bytes, describe_excess, MAX_PROMPT_BYTES};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::HashMap;

/// Uploads larger than this are refused before parsing.
pub const MAX_UPLOAD_BYTES: usize = 20 * 1024 * 1024;
/// Longest accepted case id, in bytes.
const MAX_CASE_ID_BYTES: usize = 200;
/// Largest item (its fields as JSON), in bytes: several fields of the longest prompt.
pub const MAX_ITEM_BYTES: usize = 4 * MAX_PROMPT_BYTES;
/// Longest line read from a streamed JSONL file: room for the largest item with generous
/// whitespace and escapes.
const MAX_LINE_BYTES: usize = 2 * MAX_ITEM_BYTES;
/// Canonical bytes of items a streaming builder gathers before handing them on, whatever
/// their count.
const MAX_CHUNK_BYTES: usize = 16 * 1024 * 1024;
/// Most fields an item may have.
const MAX_FIELDS: usize = 256;
/// Most bytes of items (their canonical form) one upload may hold, whatever its file size: a
/// compressed or dictionary-encoded file can expand far beyond its own size.
pub const MAX_DECODED_BYTES: usize = 256 * 1024 * 1024;
/// Most items one upload may hold.
pub const MAX_ITEMS: usize = 2_000_000;
/// Field names that hold an item's id, in order of preference (`task_id`: HumanEval, MBPP).
const ID_FIELDS: [&str; 3] = ["id", "case_id", "task_id"];

/// What one upload may hold: the operator's settings, or these defaults (a file of a few
/// million items, far beyond any benchmark suite). Streamed uploads are bounded by them, not
/// by memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadLimits {
    /// Bytes of the file as sent, and of what it decodes to (gzip, or the items' canonical
    /// form: a compressed or dictionary-encoded file can expand far beyond its own size).
    pub max_bytes: usize,
    pub max_items: usize,
}

impl Default for UploadLimits {
    fn default() -> UploadLimits {
        UploadLimits {
            max_bytes: MAX_DECODED_BYTES,
            max_items: MAX_ITEMS,
        }
    }
}

/// A streamed upload once every item has gone to its sink: the revision's content hash and
/// how many items it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamedDataset {
    pub content_hash: String,
    pub item_count: usize,
}

/// Where a streaming builder sends each chunk of validated items; an error stops the parse.
pub type ItemSink = Box<dyn FnMut(Vec<DatasetItem>) -> Result<(), DatasetError> + Send>;

/// Rewrites an item's fields before it is validated and hashed (an archive's image files
/// become data URLs); `Err` says what is wrong with the item.
pub type FieldResolver = Box<dyn FnMut(&mut Map<String, Value>) -> Result<(), String> + Send>;

/// One case of a dataset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetItem {
    /// Stable id of the case within the dataset; part of every result identity.
    pub case_id: String,
    /// Four-field items: the input. Others: the item's fields as readable text (for tables
    /// and raters; evals read [`DatasetItem::fields`]).
    pub input: String,
    /// Four-field items: the reference answer. Others: the `target` or `answer` field as text,
    /// if any.
    pub target: String,
    /// Optional grouping for per-category breakdowns ('' when absent).
    pub category: String,
    /// All fields of an item that is not of the four-field shape (its id excepted); `None`
    /// for four-field items, whose fields are `input`, `target` and `category`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Map<String, Value>>,
}

impl DatasetItem {
    /// An item of the original shape.
    pub fn four_field(
        case_id: impl Into<String>,
        input: impl Into<String>,
        target: impl Into<String>,
        category: impl Into<String>,
    ) -> DatasetItem {
        DatasetItem {
            case_id: case_id.into(),
            input: input.into(),
            target: target.into(),
            category: category.into(),
            structured: None,
        }
    }

    /// An item with any fields; its display columns are derived from them.
    pub fn structured(case_id: impl Into<String>, fields: Map<String, Value>) -> DatasetItem {
        let target = ["target", "answer"]
            .iter()
            .find_map(|name| fields.get(*name))
            .map(|value| scalar_text(value).unwrap_or_else(|| value.to_string()))
            .unwrap_or_default();
        let category = fields
            .get("category")
            .and_then(scalar_text)
            .unwrap_or_default();
        DatasetItem {
            case_id: case_id.into(),
            input: readable(&fields),
            target,
            category,
            structured: Some(fields),
        }
    }

    /// The item's fields as evals read them (four-field items: `input`, `target`, and
    /// `category` when it has one).
    pub fn fields(&self) -> Cow<'_, Map<String, Value>> {
        match &self.structured {
            Some(fields) => Cow::Borrowed(fields),
            None => {
                let mut fields = Map::new();
                fields.insert("input".into(), Value::String(self.input.clone()));
                fields.insert("target".into(), Value::String(self.target.clone()));
                if !self.category.is_empty() {
                    fields.insert("category".into(), Value::String(self.category.clone()));
                }
                Cow::Owned(fields)
            }
        }
    }

    /// The canonical line this item contributes to its revision's hash. Four-field items keep
    /// the original encoding (struct field order), so their revisions keep their hashes; other
    /// items are `{"case_id", "fields"}` with object keys sorted at every depth.
    fn canonical_line(&self) -> String {
        match &self.structured {
            None => serde_json::to_string(self).expect("dataset items always serialize"),
            Some(fields) => {
                let mut line = Map::new();
                line.insert("case_id".into(), Value::String(self.case_id.clone()));
                line.insert("fields".into(), Value::Object(fields.clone()));
                // serde_json's map is a BTreeMap (no `preserve_order` in this build), so keys
                // serialize sorted; the hash test pins this.
                serde_json::to_string(&line).expect("JSON values always serialize")
            }
        }
    }
}

/// An item's fields as text a person reads: one `name: value` line per field, strings as they
/// are, conversations as their turns, anything else as compact JSON.
pub fn readable(fields: &Map<String, Value>) -> String {
    fields
        .iter()
        .map(|(name, value)| match value {
            Value::String(text) => match crate::images::describe(text) {
                Some(image) => format!("{name}: {image}"),
                None => format!("{name}: {text}"),
            },
            Value::Array(turns) if turns.iter().all(is_message) => {
                let turns: Vec<String> = turns
                    .iter()
                    .map(|turn| {
                        format!(
                            "  {}: {}",
                            turn["role"].as_str().unwrap_or(""),
                            turn["content"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                format!("{name}:\n{}", turns.join("\n"))
            }
            other => format!("{name}: {other}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_message(value: &Value) -> bool {
    value.get("role").is_some_and(Value::is_string)
        && value.get("content").is_some_and(Value::is_string)
}

/// A fully validated upload: its items in file order and the revision's content hash.
#[derive(Clone, Debug)]
pub struct ParsedDataset {
    pub items: Vec<DatasetItem>,
    /// `sha256:` + hex over each item's canonical line (file order kept), so the same content
    /// uploaded as CSV, JSONL or Parquet gets the same revision.
    pub content_hash: String,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DatasetError {
    #[error("the file is empty: a dataset needs at least one item")]
    Empty,
    #[error("the file is {size_mb:.1} MB; the limit is {limit_mb} MB")]
    TooLarge { size_mb: f64, limit_mb: usize },
    #[error(
        "the file is not text (it contains binary data near byte {offset}); upload JSONL, CSV or Parquet"
    )]
    Binary { offset: usize },
    /// A problem with one line (JSONL, CSV) or row (Parquet): `place` says which.
    #[error("{place}: {message}")]
    At { place: String, message: String },
}

/// The accepted formats, chosen by the file name's extension (`.csv`, `.csv.gz`, `.parquet`,
/// `.jsonl.gz`/`.json.gz`, `.zip`; anything else is JSONL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetFormat {
    Jsonl,
    JsonlGzip,
    Csv,
    CsvGzip,
    Parquet,
    /// A zip archive of one data file (in any of the other formats) and the image files its
    /// items name, which become data URLs in the items.
    Zip,
}

impl DatasetFormat {
    pub fn from_file_name(name: &str) -> DatasetFormat {
        let name = name.to_ascii_lowercase();
        if name.ends_with(".csv") {
            DatasetFormat::Csv
        } else if name.ends_with(".csv.gz") {
            DatasetFormat::CsvGzip
        } else if name.ends_with(".parquet") || name.ends_with(".pq") {
            DatasetFormat::Parquet
        } else if name.ends_with(".zip") {
            DatasetFormat::Zip
        } else if name.ends_with(".gz") {
            DatasetFormat::JsonlGzip
        } else {
            DatasetFormat::Jsonl
        }
    }
}

/// Parses an upload of at most [`MAX_UPLOAD_BYTES`] in a text format.
pub fn parse_dataset(bytes: &[u8], format: DatasetFormat) -> Result<ParsedDataset, DatasetError> {
    parse_dataset_with_limit(bytes, format, MAX_UPLOAD_BYTES)
}

/// Parses a text dataset (JSONL or CSV) of at most `limit` bytes.
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
    let text = as_text(bytes)?;
    let mut builder = DatasetBuilder::default();
    match format {
        DatasetFormat::Csv => parse_csv(text, &mut builder)?,
        DatasetFormat::Jsonl => parse_jsonl(text, &mut builder)?,
        DatasetFormat::JsonlGzip
        | DatasetFormat::CsvGzip
        | DatasetFormat::Parquet
        | DatasetFormat::Zip => {
            return Err(at(
                "the file",
                "is compressed or binary; the engine decodes it before parsing",
            ))
        }
    }
    builder.finish()
}

/// The bytes as UTF-8 text without a byte-order mark; binary data is refused.
pub fn as_text(bytes: &[u8]) -> Result<&str, DatasetError> {
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        return Err(DatasetError::Binary { offset });
    }
    let text = std::str::from_utf8(bytes).map_err(|err| DatasetError::Binary {
        offset: err.valid_up_to(),
    })?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

fn at(place: &str, message: impl Into<String>) -> DatasetError {
    DatasetError::At {
        place: place.to_string(),
        message: message.into(),
    }
}

/// Reads JSONL text: one JSON object per non-blank line.
pub fn parse_jsonl(text: &str, builder: &mut DatasetBuilder) -> Result<(), DatasetError> {
    for (index, raw_line) in text.lines().enumerate() {
        push_json_line(builder, index + 1, raw_line)?;
    }
    Ok(())
}

/// Reads JSONL as it streams in, a line at a time (nothing else is held): text as
/// [`parse_jsonl`] takes it, refused as binary at the first NUL byte or invalid UTF-8.
pub fn parse_jsonl_reader(
    mut reader: impl std::io::BufRead,
    builder: &mut DatasetBuilder,
) -> Result<(), DatasetError> {
    use std::io::{BufRead, Read};
    let mut line = Vec::new();
    let mut offset = 0usize;
    for number in 1.. {
        line.clear();
        // A line is read up to its cap, never whole: a file without newlines must not fill
        // memory before it is refused.
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|err| {
                at(
                    "the file",
                    format!("could not be read (line {number}): {err}"),
                )
            })?;
        if read == 0 {
            return Ok(());
        }
        if read > MAX_LINE_BYTES {
            return Err(at(
                &format!("line {number}"),
                format!(
                    "is longer than {} (an item holds at most {})",
                    describe_bytes(MAX_LINE_BYTES),
                    describe_bytes(MAX_ITEM_BYTES)
                ),
            ));
        }
        if let Some(at_byte) = line.iter().position(|&byte| byte == 0) {
            return Err(DatasetError::Binary {
                offset: offset + at_byte,
            });
        }
        let text = std::str::from_utf8(&line).map_err(|err| DatasetError::Binary {
            offset: offset + err.valid_up_to(),
        })?;
        let text = if number == 1 {
            text.strip_prefix('\u{feff}').unwrap_or(text)
        } else {
            text
        };
        push_json_line(builder, number, text.trim_end_matches(['\n', '\r']))?;
        offset += read;
    }
    Ok(())
}

/// One JSONL line (`number` from 1): blank lines are skipped, anything else must be an object.
fn push_json_line(
    builder: &mut DatasetBuilder,
    number: usize,
    raw_line: &str,
) -> Result<(), DatasetError> {
    if raw_line.trim().is_empty() {
        return Ok(());
    }
    let place = format!("line {number}");
    let object = match serde_json::from_str::<Value>(raw_line) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err(at(&place, "each line must be a JSON object")),
        Err(err) => return Err(at(&place, format!("invalid JSON: {err}"))),
    };
    builder.push(&place, object)
}

/// Reads CSV text with a header row; every value is a string.
fn parse_csv(text: &str, builder: &mut DatasetBuilder) -> Result<(), DatasetError> {
    parse_csv_reader(text.as_bytes(), builder)
}

/// Reads CSV with a header row as it streams in, a record at a time; every value is a string.
pub fn parse_csv_reader(
    input: impl std::io::Read,
    builder: &mut DatasetBuilder,
) -> Result<(), DatasetError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(input);
    let headers = reader
        .headers()
        .map_err(|err| at("line 1", format!("unreadable CSV header: {err}")))?
        .clone();
    // Headers naming a four-field key in any case (`ID`, `Input`) are that key, as they always
    // were; other headers are field names as written.
    let names: Vec<String> = headers
        .iter()
        .map(|header| {
            let lower = header.trim().to_ascii_lowercase();
            if is_four_field_key(&lower) {
                lower
            } else {
                header.trim().to_string()
            }
        })
        .collect();
    let mut seen = HashMap::new();
    for (column, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(at(
                "line 1",
                format!("CSV column {} has no name", column + 1),
            ));
        }
        if let Some(first) = seen.insert(name.as_str(), column) {
            return Err(at(
                "line 1",
                format!(
                    "the CSV header names `{name}` twice (columns {} and {})",
                    first + 1,
                    column + 1
                ),
            ));
        }
    }
    for record in reader.records() {
        let record = record.map_err(|err| match err.position() {
            Some(position) => at(
                &format!("line {}", position.line()),
                format!("invalid CSV: {err}"),
            ),
            // Reading failed (a corrupt or oversized gzip stream), not the CSV.
            None => at("the file", format!("could not be read: {err}")),
        })?;
        let place = format!("line {}", record.position().map_or(0, |pos| pos.line()));
        let mut object = Map::new();
        for (name, value) in names.iter().zip(record.iter()) {
            object.insert(name.clone(), Value::String(value.to_string()));
        }
        builder.push(&place, object)?;
    }
    Ok(())
}

fn is_four_field_key(name: &str) -> bool {
    matches!(
        name,
        "id" | "case_id" | "input" | "target" | "answer" | "category"
    )
}

/// Where an item's id comes from, settled by the first item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdSource {
    /// The `id` (or `case_id`) field.
    Field(&'static str),
    /// Items without an id field are numbered by position: 1, 2, 3…
    Position,
}

/// Collects validated items one at a time (in file order) with the running content hash:
/// every format feeds it the same way. A streaming builder hands its items to a sink in
/// chunks instead of keeping them; only the ids stay (to refuse a duplicate anywhere).
#[derive(Default)]
pub struct DatasetBuilder {
    items: Vec<DatasetItem>,
    /// Canonical bytes of the items gathered since the last chunk.
    chunk_bytes: usize,
    count: usize,
    decoded_bytes: usize,
    /// Each id's 128-bit hash (a few million ids in tens of megabytes, not their text), with
    /// the line or row (from 1) it was first seen on. Ids numbered by position need none.
    ids: HashMap<u128, u64>,
    hasher: Sha256,
    id_source: Option<IdSource>,
    limits: UploadLimits,
    sink: Option<(usize, ItemSink)>,
    resolver: Option<FieldResolver>,
}

impl DatasetBuilder {
    /// A builder that sends its items to `sink` in chunks of `chunk` items, within `limits`.
    pub fn streaming(limits: UploadLimits, chunk: usize, sink: ItemSink) -> DatasetBuilder {
        DatasetBuilder {
            limits,
            sink: Some((chunk.max(1), sink)),
            ..DatasetBuilder::default()
        }
    }

    /// Has `resolver` rewrite every item's fields first.
    pub fn resolve_fields(&mut self, resolver: FieldResolver) {
        self.resolver = Some(resolver);
    }

    /// The limits this builder enforces.
    pub fn limits(&self) -> UploadLimits {
        self.limits
    }

    /// Sends the items gathered so far to the sink (a streaming builder only).
    fn flush(&mut self) -> Result<(), DatasetError> {
        if let Some((_, sink)) = self.sink.as_mut() {
            if !self.items.is_empty() {
                self.chunk_bytes = 0;
                sink(std::mem::take(&mut self.items))?;
            }
        }
        Ok(())
    }

    /// Finishes a streaming upload: the last chunk goes to the sink.
    pub fn finish_streaming(mut self) -> Result<StreamedDataset, DatasetError> {
        self.flush()?;
        if self.count == 0 {
            return Err(DatasetError::Empty);
        }
        Ok(StreamedDataset {
            content_hash: format!("sha256:{}", hex::encode(self.hasher.finalize())),
            item_count: self.count,
        })
    }

    /// Adds the item read at `place` ("line 3", "row 3").
    pub fn push(
        &mut self,
        place: &str,
        mut object: Map<String, Value>,
    ) -> Result<(), DatasetError> {
        if let Some(resolver) = self.resolver.as_mut() {
            resolver(&mut object).map_err(|message| at(place, message))?;
        }
        if self.count >= self.limits.max_items {
            return Err(at(
                place,
                format!(
                    "the file has more than {} items (the limit for one upload)",
                    self.limits.max_items
                ),
            ));
        }
        let id_source = *self.id_source.get_or_insert_with(|| {
            ID_FIELDS
                .iter()
                .find(|name| object.contains_key(**name))
                .map_or(IdSource::Position, |name| IdSource::Field(name))
        });
        let case_id = match id_source {
            IdSource::Position => {
                // Ids come from every item or from none: a file that has them on some lines
                // only is a mistake, never silently renumbered.
                if let Some(name) = ID_FIELDS.iter().find(|name| object.contains_key(**name)) {
                    return Err(at(
                        place,
                        format!("this item has an `{name}`, but the first item has none (give every item an id, or none)"),
                    ));
                }
                (self.count + 1).to_string()
            }
            IdSource::Field(_) => {
                let value = ID_FIELDS
                    .iter()
                    .find_map(|name| object.remove(*name))
                    .ok_or_else(|| at(place, "missing field `id`"))?;
                match value {
                    Value::String(id) => id,
                    Value::Number(id) => id.to_string(),
                    _ => return Err(at(place, "field `id` must be a string or a number")),
                }
            }
        };
        if object.is_empty() {
            return Err(at(place, "the item has no fields"));
        }
        let item = validated_item(place, case_id, object)?;
        let line = item.canonical_line();
        self.decoded_bytes += line.len() + 1;
        if self.decoded_bytes > self.limits.max_bytes {
            return Err(at(
                place,
                format!(
                    "the items so far hold more than {} (the limit for one upload)",
                    describe_bytes(self.limits.max_bytes)
                ),
            ));
        }
        if id_source != IdSource::Position {
            let (unit, number) = place.split_once(' ').unwrap_or((place, ""));
            let number = number.parse::<u64>().unwrap_or(0);
            let id_hash = xxhash_rust::xxh3::xxh3_128(item.case_id.as_bytes());
            if let Some(first) = self.ids.insert(id_hash, number) {
                return Err(at(
                    place,
                    format!(
                        "duplicate case id `{}` (first seen on {unit} {first})",
                        item.case_id
                    ),
                ));
            }
        }
        self.chunk_bytes += line.len();
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.items.push(item);
        self.count += 1;
        if let Some((chunk, _)) = &self.sink {
            if self.items.len() >= *chunk || self.chunk_bytes >= MAX_CHUNK_BYTES {
                self.flush()?;
            }
        }
        Ok(())
    }

    pub fn finish(self) -> Result<ParsedDataset, DatasetError> {
        if self.items.is_empty() {
            return Err(DatasetError::Empty);
        }
        Ok(ParsedDataset {
            items: self.items,
            content_hash: format!("sha256:{}", hex::encode(self.hasher.finalize())),
        })
    }
}

fn validated_item(
    place: &str,
    case_id: String,
    fields: Map<String, Value>,
) -> Result<DatasetItem, DatasetError> {
    let case_id = case_id.trim().to_string();
    if case_id.is_empty() {
        return Err(at(place, "field `id` is empty"));
    }
    if case_id.len() > MAX_CASE_ID_BYTES {
        return Err(at(
            place,
            format!("field `id` is longer than {MAX_CASE_ID_BYTES} bytes"),
        ));
    }
    if fields.len() > MAX_FIELDS {
        return Err(at(
            place,
            format!("the item has more than {MAX_FIELDS} fields"),
        ));
    }
    // A field longer than the longest prompt could never be sent or put before a judge:
    // refused here rather than at every launch.
    for (name, value) in &fields {
        // Text with a NUL byte is binary, and PostgreSQL cannot store it.
        if has_nul(value) {
            return Err(at(
                place,
                format!("field `{name}` contains a NUL character (the file is binary, or corrupt)"),
            ));
        }
        if let Some(longest) = longest_string(value).filter(|len| *len > MAX_PROMPT_BYTES) {
            let (size, limit) = describe_excess(longest, MAX_PROMPT_BYTES);
            return Err(at(
                place,
                format!(
                    "field `{name}` is {size}; the limit is {limit} (the longest prompt Arbiter sends)"
                ),
            ));
        }
    }
    if let Some(item) = four_field_item(place, &case_id, &fields)? {
        return Ok(item);
    }
    let item = DatasetItem::structured(case_id, fields);
    let size = item.canonical_line().len();
    if size > MAX_ITEM_BYTES {
        return Err(at(
            place,
            format!(
                "the item is {}; the limit is {}",
                describe_bytes(size),
                describe_bytes(MAX_ITEM_BYTES)
            ),
        ));
    }
    Ok(item)
}

/// The item as a four-field item, when it has that shape: only `input`, `target` (or
/// `answer`) and `category`, with a text input and a scalar target. `None` otherwise.
fn four_field_item(
    place: &str,
    case_id: &str,
    fields: &Map<String, Value>,
) -> Result<Option<DatasetItem>, DatasetError> {
    let shaped = fields.keys().all(|key| is_four_field_key(key))
        && !(fields.contains_key("target") && fields.contains_key("answer"));
    let input = match fields.get("input") {
        Some(Value::String(input)) if shaped => input,
        _ => return Ok(None),
    };
    let Some(target) = fields
        .get("target")
        .or_else(|| fields.get("answer"))
        .and_then(scalar_text)
    else {
        return Ok(None);
    };
    let category = match fields.get("category") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(category)) => category.trim().to_string(),
        Some(_) => return Ok(None),
    };
    if input.trim().is_empty() {
        return Err(at(place, "field `input` is empty"));
    }
    Ok(Some(DatasetItem::four_field(
        case_id,
        input.clone(),
        target,
        category,
    )))
}

/// Whether any string anywhere in a value holds a NUL character.
fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(values) => values.iter().any(has_nul),
        Value::Object(map) => map
            .iter()
            .any(|(key, value)| key.contains('\0') || has_nul(value)),
        _ => false,
    }
}

/// The length of the longest string anywhere in a value.
fn longest_string(value: &Value) -> Option<usize> {
    match value {
        Value::String(text) => Some(text.len()),
        Value::Array(values) => values.iter().filter_map(longest_string).max(),
        Value::Object(map) => map.values().filter_map(longest_string).max(),
        _ => None,
    }
}

/// SHA-256 over each item's canonical line, newline-terminated.
pub fn content_hash(items: &[DatasetItem]) -> String {
    let mut hasher = Sha256::new();
    for item in items {
        hasher.update(item.canonical_line().as_bytes());
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
    fn ids_come_from_the_first_item_or_positions() {
        let err = jsonl("{\"id\":\"a\",\"input\":\"x\"}\n{\"input\":\"y\"}\n").unwrap_err();
        assert_eq!(err.to_string(), "line 2: missing field `id`");
        let numbered = jsonl("{\"question\":\"x\"}\n{\"question\":\"y\"}\n").unwrap();
        assert_eq!(numbered.items[0].case_id, "1");
        assert_eq!(numbered.items[1].case_id, "2");
        // Ids on some lines only are a mistake, never silently replaced by positions.
        let mixed = jsonl("{\"question\":\"x\"}\n{\"question\":\"y\",\"id\":\"b\"}\n").unwrap_err();
        assert!(
            mixed
                .to_string()
                .starts_with("line 2: this item has an `id`"),
            "{mixed}"
        );
        assert_eq!(
            jsonl("{}\n").unwrap_err().to_string(),
            "line 1: the item has no fields"
        );
        // CSV headers naming the four fields in any case are those fields.
        let csv = parse_dataset(b"ID,Input,Answer,Notes\n1,x,y,z\n", DatasetFormat::Csv).unwrap();
        assert_eq!(csv.items[0].case_id, "1");
        assert_eq!(csv.items[0].fields()["input"], "x");
        assert_eq!(csv.items[0].fields()["Notes"], "z");
    }

    #[test]
    fn structured_items_keep_every_field() {
        let parsed = jsonl(
            "{\"id\":\"q1\",\"question\":\"Capital of France?\",\"choices\":[\"Berlin\",\"Paris\"],\"answer\":1,\"subject\":\"geo\"}\n",
        )
        .unwrap();
        let item = &parsed.items[0];
        assert_eq!(item.case_id, "q1");
        let fields = item.fields();
        assert_eq!(fields["choices"][1], "Paris");
        assert_eq!(fields["answer"], 1);
        assert!(!fields.contains_key("id"));
        // Display columns for tables and raters.
        assert_eq!(item.target, "1");
        assert!(
            item.input.contains("question: Capital of France?"),
            "{}",
            item.input
        );
        // Four-field items read as their three fields.
        let four = jsonl("{\"id\":\"a\",\"input\":\"x\",\"target\":\"y\"}\n").unwrap();
        assert!(four.items[0].structured.is_none());
        assert_eq!(four.items[0].fields().len(), 2);
    }

    #[test]
    fn the_hash_is_over_content_not_key_order_or_format() {
        let a = jsonl("{\"id\":\"1\",\"q\":\"x\",\"meta\":{\"b\":1,\"a\":2}}\n").unwrap();
        let b = jsonl("{\"meta\":{\"a\":2,\"b\":1},\"q\":\"x\",\"id\":\"1\"}\n").unwrap();
        assert_eq!(a.content_hash, b.content_hash);
        let from_jsonl = jsonl("{\"id\":\"1\",\"q\":\"x\",\"a\":\"y\"}\n").unwrap();
        let from_csv = parse_dataset(b"id,q,a\n1,x,y\n", DatasetFormat::Csv).unwrap();
        assert_eq!(from_jsonl.items, from_csv.items);
        assert_eq!(from_jsonl.content_hash, from_csv.content_hash);
        let changed = jsonl("{\"id\":\"1\",\"q\":\"x\",\"a\":\"z\"}\n").unwrap();
        assert_ne!(changed.content_hash, from_jsonl.content_hash);
    }

    /// The hash of a four-field revision as Arbiter computed it before items had fields.
    #[test]
    fn four_field_files_keep_their_revision_hash() {
        let parsed =
            jsonl("{\"id\":\"a\",\"input\":\"x\",\"target\":\"y\",\"category\":\"c\"}\n").unwrap();
        assert_eq!(
            parsed.content_hash,
            "sha256:fee2a10a574d7a04f9db6b34ff1196ad77f7184f03dabf74beb7adb07c29394e"
        );
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
            "line 2: field `input` is 1048577 bytes; the limit is 1048576 bytes (the longest prompt Arbiter sends)"
        );
        let csv = format!("id,input,target\na,x,{long}\n");
        let err = parse_dataset(csv.as_bytes(), DatasetFormat::Csv).unwrap_err();
        assert!(
            err.to_string().starts_with("line 2: field `target` is"),
            "{err}"
        );
    }

    #[test]
    fn csv_headers_must_be_named_once() {
        let err = parse_dataset(b"id,question,question\n1,x,y\n", DatasetFormat::Csv).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 1: the CSV header names `question` twice (columns 2 and 3)"
        );
        let err = jsonl("[1, 2]\n").unwrap_err();
        assert_eq!(err.to_string(), "line 1: each line must be a JSON object");
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

    #[test]
    fn streamed_lines_are_capped_and_nul_characters_refused() {
        let long = format!("{{\"input\": \"{}\"", "x".repeat(MAX_LINE_BYTES + 10));
        let mut builder = DatasetBuilder::default();
        let refused = parse_jsonl_reader(long.as_bytes(), &mut builder).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "line 1: is longer than 8.0 MiB (an item holds at most 4.0 MiB)"
        );
        let mut builder = DatasetBuilder::default();
        let nul = "{\"id\": \"a\", \"input\": \"x\\u0000y\", \"target\": \"1\"}\n";
        let refused = parse_jsonl_reader(nul.as_bytes(), &mut builder).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "line 1: field `input` contains a NUL character (the file is binary, or corrupt)"
        );
        // A streaming builder hands items on in chunks and keeps only their count and hash.
        let chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = chunks.clone();
        let sink: ItemSink = Box::new(move |chunk: Vec<DatasetItem>| {
            seen.lock().unwrap().push(chunk.len());
            Ok(())
        });
        let mut builder = DatasetBuilder::streaming(UploadLimits::default(), 2, sink);
        let text = "{\"input\": \"a\", \"target\": \"1\"}\n\n{\"input\": \"b\", \"target\": \"2\"}\n{\"input\": \"c\", \"target\": \"3\"}\n";
        parse_jsonl_reader(text.as_bytes(), &mut builder).unwrap();
        let streamed = builder.finish_streaming().unwrap();
        assert_eq!(streamed.item_count, 3);
        assert_eq!(*chunks.lock().unwrap(), vec![2, 1]);
        let whole = parse_dataset(text.as_bytes(), DatasetFormat::Jsonl).unwrap();
        assert_eq!(streamed.content_hash, whole.content_hash);
    }
}
