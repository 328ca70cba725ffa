//! Dataset files in the formats the domain does not read from text: gzip-compressed JSONL and
//! Parquet. Both are decoded into what the domain's [`DatasetBuilder`] takes, so every format
//! is validated, hashed and refused the same way (a Parquet problem names its row). Files on
//! disk are read as they stream, so an upload of any size within the operator's limits is
//! parsed in bounded memory.

use arbiter_domain::dataset::{
    parse_csv_reader, parse_dataset, parse_jsonl_reader, DatasetBuilder, DatasetError,
    DatasetFormat, ParsedDataset, StreamedDataset, MAX_UPLOAD_BYTES,
};
use std::io::{BufReader, Read};
use std::path::Path;

/// Parses the file at `path` into a streaming `builder` (which sends its items on in chunks):
/// the file within the builder's byte limit, and what a gzip file expands to within it too.
pub fn parse_file(
    path: &Path,
    format: DatasetFormat,
    mut builder: DatasetBuilder,
) -> Result<StreamedDataset, DatasetError> {
    let limit = builder.limits().max_bytes;
    let unreadable = |err: std::io::Error| DatasetError::At {
        place: "the file".into(),
        message: format!("could not be read: {err}"),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let size = file.metadata().map_err(unreadable)?.len();
    if size > limit as u64 {
        return Err(DatasetError::TooLarge {
            size_mb: size as f64 / (1024.0 * 1024.0),
            limit_mb: limit / (1024 * 1024),
        });
    }
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(DatasetError::At {
            place: "the file".into(),
            message: "is not a regular file".into(),
        });
    }
    let inflated =
        |file| BufReader::new(Limited::new(flate2::read::MultiGzDecoder::new(file), limit));
    // A file that grows while it is read is bounded all the same.
    let plain = |file| BufReader::new(Limited::new(file, limit));
    match format {
        DatasetFormat::Jsonl => parse_jsonl_reader(plain(file), &mut builder)?,
        DatasetFormat::Csv => parse_csv_reader(plain(file), &mut builder)?,
        DatasetFormat::JsonlGzip => parse_jsonl_reader(inflated(file), &mut builder)?,
        DatasetFormat::CsvGzip => parse_csv_reader(inflated(file), &mut builder)?,
        DatasetFormat::Parquet => parse_parquet_rows(file, &mut builder)?,
        DatasetFormat::Zip => {
            let path = path.to_path_buf();
            crate::archives::parse_archive(
                move || std::fs::File::open(&path).map(BufReader::new),
                &mut builder,
            )?
        }
    }
    builder.finish_streaming()
}

/// A reader that fails once more than `limit` bytes came through: a small gzip file must not
/// inflate into gigabytes.
pub(crate) struct Limited<R> {
    inner: R,
    left: usize,
    limit: usize,
}

impl<R> Limited<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Limited<R> {
        Limited {
            inner,
            left: limit,
            limit,
        }
    }
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.left = self.left.checked_sub(read).ok_or_else(|| {
            std::io::Error::other(format!(
                "the file expands to more than {} MB; the limit is {} MB",
                self.limit / (1024 * 1024),
                self.limit / (1024 * 1024)
            ))
        })?;
        Ok(read)
    }
}

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
        DatasetFormat::Zip => {
            if bytes.len() > MAX_UPLOAD_BYTES {
                return Err(too_large(bytes.len()));
            }
            let archive: std::sync::Arc<[u8]> = bytes.into();
            let mut builder = DatasetBuilder::default();
            crate::archives::parse_archive(
                move || Ok(std::io::Cursor::new(archive.clone())),
                &mut builder,
            )?;
            builder.finish()
        }
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
    if bytes.len() > MAX_UPLOAD_BYTES {
        return Err(too_large(bytes.len()));
    }
    let mut builder = DatasetBuilder::default();
    parse_parquet_rows(bytes::Bytes::copy_from_slice(bytes), &mut builder)?;
    builder.finish()
}

/// Reads every row of a Parquet file (in memory or on disk, read a row group at a time).
pub(crate) fn parse_parquet_rows<R: parquet::file::reader::ChunkReader + 'static>(
    source: R,
    builder: &mut DatasetBuilder,
) -> Result<(), DatasetError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let unreadable = |err: parquet::errors::ParquetError| DatasetError::At {
        place: "the file".into(),
        message: format!("is not a readable Parquet file: {err}"),
    };
    let reader = SerializedFileReader::new(source).map_err(unreadable)?;
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
    Ok(())
}
