//! Zip archives of a dataset: one data file (JSONL, CSV, their gzip forms, or Parquet) and the
//! image files its items name. Every string of an item (in lists and objects too, so message
//! parts are covered; ids never) that names an image of the archive becomes that image as a
//! data URL before the item is hashed, so the revision holds the image bytes and two archives
//! with the same items and images are one revision. Other text is left as it is: an images
//! field that names a missing file is refused when an eval reads it. An image is refused by its
//! entry's size before it is read, and an item's images within the item size limit.

use crate::dataset_files::{parse_parquet_rows, Limited};
use arbiter_domain::dataset::MAX_ITEM_BYTES;
use arbiter_domain::dataset::{
    parse_csv_reader, parse_jsonl_reader, DatasetBuilder, DatasetError, DatasetFormat,
};
use arbiter_domain::images::{data_url, media_type_of, too_large, MAX_IMAGE_BYTES};
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
    let mut images = ArchiveImages {
        archive: ZipArchive::new(open().map_err(|err| unreadable(&err))?)
            .map_err(|err| unreadable(&err))?,
        folder,
        entries: images,
        cached: HashMap::new(),
        cached_bytes: 0,
    };
    builder.resolve_fields(Box::new(move |object| {
        let mut budget = MAX_ITEM_BYTES;
        for (name, value) in object.iter_mut() {
            // An id is never an image, even when it is named after one.
            if name != "id" && name != "case_id" {
                images.resolve_value(value, &mut budget, 0)?;
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

/// The archive's images, read as items name them.
struct ArchiveImages<R> {
    archive: ZipArchive<R>,
    /// The data file's folder: paths may be relative to it.
    folder: String,
    /// Image entries by name.
    entries: HashMap<String, usize>,
    /// Data URLs already made (an image named by many items is read once), within
    /// [`MAX_CACHED_BYTES`].
    cached: HashMap<usize, String>,
    cached_bytes: usize,
}

/// Data URLs kept for reuse, at most.
const MAX_CACHED_BYTES: usize = 64 * 1024 * 1024;
/// Nesting walked for image paths (message parts sit two levels down).
const MAX_DEPTH: usize = 6;

impl<R: Read + Seek> ArchiveImages<R> {
    /// Replaces every string (in lists and objects too) that names an image of the archive by
    /// that image; `budget` is what the item's images may still add.
    fn resolve_value(
        &mut self,
        value: &mut Value,
        budget: &mut usize,
        depth: usize,
    ) -> Result<(), String> {
        match value {
            Value::String(text) => self.resolve(text, budget),
            Value::Array(entries) if depth < MAX_DEPTH => entries
                .iter_mut()
                .try_for_each(|entry| self.resolve_value(entry, budget, depth + 1)),
            Value::Object(fields) if depth < MAX_DEPTH => fields
                .values_mut()
                .try_for_each(|entry| self.resolve_value(entry, budget, depth + 1)),
            _ => Ok(()),
        }
    }

    /// Replaces `text` by the image it names (relative to the archive's root or to the data
    /// file's folder); other text is left as it is.
    fn resolve(&mut self, text: &mut String, budget: &mut usize) -> Result<(), String> {
        if text.len() > MAX_PATH_CHARS || media_type_of(text).is_none() {
            return Ok(());
        }
        let path = text.trim_start_matches("./");
        let in_folder = format!("{}/{path}", self.folder);
        let Some((name, index)) = self
            .entries
            .get_key_value(path)
            .or_else(|| self.entries.get_key_value(in_folder.as_str()))
            .map(|(name, index)| (name.clone(), *index))
        else {
            return Ok(());
        };
        let url = match self.cached.get(&index) {
            Some(url) => url.clone(),
            None => {
                let url = self.read(&name, index)?;
                if self.cached_bytes + url.len() <= MAX_CACHED_BYTES {
                    self.cached_bytes += url.len();
                    self.cached.insert(index, url.clone());
                }
                url
            }
        };
        *budget = budget.checked_sub(url.len()).ok_or_else(|| {
            format!(
                "the item's images come to more than {} KiB",
                MAX_ITEM_BYTES / 1024
            )
        })?;
        *text = url;
        Ok(())
    }

    /// One image as a data URL, refused before reading when its entry says it is too large.
    fn read(&mut self, name: &str, index: usize) -> Result<String, String> {
        let media_type = media_type_of(name).unwrap_or("image/png");
        let unreadable =
            |err: &dyn std::fmt::Display| format!("the image `{name}` could not be read: {err}");
        let entry = self
            .archive
            .by_index(index)
            .map_err(|err| unreadable(&err))?;
        if entry.size() > MAX_IMAGE_BYTES as u64 {
            return Err(format!("`{name}`: {}", too_large()));
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry
            .take(MAX_IMAGE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| unreadable(&err))?;
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(format!("`{name}`: {}", too_large()));
        }
        Ok(data_url(media_type, &bytes))
    }
}
