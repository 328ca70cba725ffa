//! Dataset files in the formats the domain does not read from text: gzip-compressed JSONL and
//! Parquet. Both are decoded into what the domain's [`DatasetBuilder`] takes, so every format
//! is validated, hashed and refused the same way (a Parquet problem names its row).

use arbiter_domain::dataset::{
    parse_dataset, DatasetBuilder, DatasetError, DatasetFormat, ParsedDataset, MAX_UPLOAD_BYTES,
};
use std::io::Read;

/// Parses an upload in any accepted format. The size limit applies to the file as sent and,
/// for gzip, to what it expands to (a small file must not inflate into gigabytes).
pub fn parse_upload(bytes: &[u8], format: DatasetFormat) -> Result<ParsedDataset, DatasetError> {
    match format {
        DatasetFormat::Jsonl | DatasetFormat::Csv => parse_dataset(bytes, format),
        DatasetFormat::JsonlGzip => {
            let text = gunzip(bytes, MAX_UPLOAD_BYTES)?;
            parse_dataset(&text, DatasetFormat::Jsonl)
        }
        DatasetFormat::CsvGzip => {
            let text = gunzip(bytes, MAX_UPLOAD_BYTES)?;
            parse_dataset(&text, DatasetFormat::Csv)
        }
        DatasetFormat::Parquet => parse_parquet(bytes),
    }
}

fn too_large(size: usize) -> DatasetError {
    DatasetError::TooLarge {
        size_mb: size as f64 / (1024.0 * 1024.0),
        limit_mb: MAX_UPLOAD_BYTES / (1024 * 1024),
    }
}

/// Inflates at most `limit` bytes; more is refused as too large.
fn gunzip(bytes: &[u8], limit: usize) -> Result<Vec<u8>, DatasetError> {
    if bytes.len() > limit {
        return Err(too_large(bytes.len()));
    }
    let mut inflated = Vec::new();
    let mut reader = flate2::read::MultiGzDecoder::new(bytes).take(limit as u64 + 1);
    reader
        .read_to_end(&mut inflated)
        .map_err(|err| DatasetError::At {
            place: "the file".into(),
            message: format!("is not valid gzip: {err}"),
        })?;
    if inflated.len() > limit {
        return Err(DatasetError::At {
            place: "the file".into(),
            message: format!(
                "expands to more than {} MB; the limit is {} MB",
                limit / (1024 * 1024),
                limit / (1024 * 1024)
            ),
        });
    }
    Ok(inflated)
}

/// Reads every row of a Parquet file as a JSON object (lists become arrays, nested groups
/// objects).
fn parse_parquet(bytes: &[u8]) -> Result<ParsedDataset, DatasetError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    if bytes.len() > MAX_UPLOAD_BYTES {
        return Err(too_large(bytes.len()));
    }
    let unreadable = |err: parquet::errors::ParquetError| DatasetError::At {
        place: "the file".into(),
        message: format!("is not a readable Parquet file: {err}"),
    };
    let reader =
        SerializedFileReader::new(bytes::Bytes::copy_from_slice(bytes)).map_err(unreadable)?;
    let mut builder = DatasetBuilder::default();
    let rows = reader.get_row_iter(None).map_err(unreadable)?;
    for (index, row) in rows.enumerate() {
        let place = format!("row {}", index + 1);
        let row = row.map_err(|err| DatasetError::At {
            place: place.clone(),
            message: format!("unreadable: {err}"),
        })?;
        match row.to_json_value() {
            serde_json::Value::Object(object) => builder.push(&place, object)?,
            _ => unreachable!("a Parquet row converts to a JSON object"),
        }
    }
    builder.finish()
}
