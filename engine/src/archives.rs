//! Zip archives of a dataset: one data file (JSONL, CSV, their gzip forms, or Parquet) and the
//! image files its items name. Every string field (or list entry) that names an image of the
//! archive becomes that image as a data URL before the item is hashed, so the revision holds
//! the image bytes and two archives with the same items and images are one revision. An image
//! path that the archive does not hold is refused with the item's line.

use crate::dataset_files::{parse_parquet_rows, Limited};
use arbiter_domain::dataset::{
    parse_csv_reader, parse_jsonl_reader, DatasetBuilder, DatasetError, DatasetFormat,
};
use arbiter_domain::images::{data_url, media_type_of, MAX_IMAGE_BYTES};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufReader, Read, Seek};
use zip::ZipArchive;

/// Longest string read as an image path.
const MAX_PATH_CHARS: usize = 1_000;

/// Reads the archive's data file into `builder`, resolving image paths. `open` gives a fresh
/// reader over the archive each time it is called (the images are read while the data file
/// streams).
pub fn parse_archive<R, F>(open: F, builder: &mut DatasetBuilder) -> Result<(), DatasetError>
where
    R: Read + Seek + Send + 'static,
    F: Fn() -> std::io::Result<R>,
{
    let unreadable =
        |err: &dyn std::fmt::Display| at(format!("is not a readable zip archive: {err}"));
    let mut archive =
        ZipArchive::new(open().map_err(|err| unreadable(&err))?).map_err(|err| unreadable(&err))?;
    let mut data_files = Vec::new();
    let mut images = HashMap::new();
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|err| unreadable(&err))?;
        let name = entry.name().map_err(|err| unreadable(&err))?.to_string();
        if entry.is_dir()
            || name.starts_with("__MACOSX/")
            || name
                .rsplit('/')
                .next()
                .is_some_and(|file| file.starts_with('.'))
        {
            continue;
        }
        if media_type_of(&name).is_some() {
            images.insert(name, index);
        } else if is_data_file(&name) {
            data_files.push((name, index));
        }
    }
    let (data_name, data_index) = match data_files.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(at(
                "holds no data file (.jsonl, .csv, .parquet, or their .gz forms)".into(),
            ))
        }
        many => {
            let names: Vec<&str> = many.iter().map(|(name, _)| name.as_str()).collect();
            return Err(at(format!(
                "holds {} data files ({}); put exactly one in the archive",
                many.len(),
                names.join(", ")
            )));
        }
    };
    let folder = data_name
        .rsplit_once('/')
        .map_or("", |(folder, _)| folder)
        .to_string();
    let mut image_reader =
        ZipArchive::new(open().map_err(|err| unreadable(&err))?).map_err(|err| unreadable(&err))?;
    builder.resolve_fields(Box::new(move |object| {
        for value in object.values_mut() {
            match value {
                Value::String(text) => resolve(text, &folder, &images, &mut image_reader)?,
                Value::Array(entries) => {
                    for entry in entries {
                        if let Value::String(text) = entry {
                            resolve(text, &folder, &images, &mut image_reader)?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }));
    let limit = builder.limits().max_bytes;
    let entry = archive
        .by_index(data_index)
        .map_err(|err| unreadable(&err))?;
    let plain = BufReader::new(Limited::new(entry, limit));
    match DatasetFormat::from_file_name(&data_name) {
        DatasetFormat::Csv => parse_csv_reader(plain, builder),
        DatasetFormat::CsvGzip => parse_csv_reader(gunzipped(plain, limit), builder),
        DatasetFormat::JsonlGzip => parse_jsonl_reader(gunzipped(plain, limit), builder),
        DatasetFormat::Parquet => {
            let mut bytes = Vec::new();
            let mut plain = plain;
            plain
                .read_to_end(&mut bytes)
                .map_err(|err| at(format!("`{data_name}` could not be read: {err}")))?;
            parse_parquet_rows(bytes::Bytes::from(bytes), builder)
        }
        DatasetFormat::Jsonl | DatasetFormat::Zip => parse_jsonl_reader(plain, builder),
    }
}

fn gunzipped<R: Read>(
    reader: R,
    limit: usize,
) -> BufReader<Limited<flate2::read::MultiGzDecoder<R>>> {
    BufReader::new(Limited::new(
        flate2::read::MultiGzDecoder::new(reader),
        limit,
    ))
}

fn is_data_file(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        ".jsonl",
        ".json",
        ".jsonl.gz",
        ".json.gz",
        ".csv",
        ".csv.gz",
        ".parquet",
        ".pq",
    ]
    .iter()
    .any(|extension| name.ends_with(extension))
}

fn at(message: String) -> DatasetError {
    DatasetError::At {
        place: "the archive".into(),
        message,
    }
}

/// Replaces `text` by the image it names (relative to the archive's root or to the data
/// file's folder); refuses a path that looks like an image file the archive lacks.
fn resolve<R: Read + Seek>(
    text: &mut String,
    folder: &str,
    images: &HashMap<String, usize>,
    archive: &mut ZipArchive<R>,
) -> Result<(), String> {
    if text.len() > MAX_PATH_CHARS || media_type_of(text).is_none() {
        return Ok(());
    }
    let path = text.trim_start_matches("./");
    let in_folder = format!("{folder}/{path}");
    let Some((name, &index)) = images
        .get_key_value(path)
        .or_else(|| images.get_key_value(in_folder.as_str()))
    else {
        if text.contains("://") || text.starts_with("data:") || text.contains(char::is_whitespace) {
            return Ok(());
        }
        return Err(format!(
            "names the image `{text}`, which the archive does not hold"
        ));
    };
    let media_type = media_type_of(name).unwrap_or("image/png");
    let entry = archive
        .by_index(index)
        .map_err(|err| format!("the image `{name}` could not be read: {err}"))?;
    if entry.size() > MAX_IMAGE_BYTES as u64 {
        return Err(format!(
            "the image `{name}` is larger than {} MB",
            MAX_IMAGE_BYTES / (1024 * 1024)
        ));
    }
    let mut bytes = Vec::with_capacity(entry.size() as usize);
    entry
        .take(MAX_IMAGE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| format!("the image `{name}` could not be read: {err}"))?;
    *text = data_url(media_type, &bytes);
    Ok(())
}
