//! Exporting a run's human labels, one row per label: who gave it, the answers to each
//! dimension, the rationale, the time on task, whether the item is a gold item, the review's
//! outcome (and a spot check's), and the rubric and guidelines versions it was made under. CSV
//! and JSON Lines for people and scripts, Parquet for DuckDB and BigQuery (`arbiter export
//! --labels` writes the results' partition layout under a root of its own, `labels/`, so a
//! glob over the results never mixes the two schemas).
//!
//! The columns are one table ([`COLUMNS`]) that the CSV header, the CSV records, the Parquet
//! schema and its column writers are all made from, so the formats cannot drift apart.

use crate::error::{ServiceError, ServiceResult};
use crate::reports::export::{ExportFormat, EXPORT_PAGE, PARQUET_ROW_GROUP};
use arbiter_domain::ids::RunId;
use arbiter_domain::spreadsheet::quote_formulas;
use arbiter_store::annotation::LabelRecord;
use arbiter_store::Store;
use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::io::Write;
use std::sync::Arc;

/// How a row gives one column's value, and so the column's Parquet type.
enum Column {
    Int(fn(&LabelRecord) -> i64),
    OptionalInt(fn(&LabelRecord) -> Option<i64>),
    /// Milliseconds since the epoch, typed as a UTC timestamp in Parquet.
    Time(fn(&LabelRecord) -> i64),
    OptionalTime(fn(&LabelRecord) -> Option<i64>),
    Text(fn(&LabelRecord) -> &str),
    OptionalText(fn(&LabelRecord) -> Option<&str>),
    Bool(fn(&LabelRecord) -> bool),
}

/// Every column, in order.
const COLUMNS: &[(&str, Column)] = &[
    ("label_id", Column::Int(|r| r.label_id)),
    ("run_id", Column::Int(|r| r.run_id)),
    ("work_item_id", Column::Int(|r| r.work_item_id)),
    ("case_id", Column::Text(|r| &r.case_id)),
    ("repetition", Column::Int(|r| r.repetition)),
    ("turn", Column::Int(|r| r.turn)),
    ("checkpoint", Column::Text(|r| &r.checkpoint)),
    ("rater", Column::Text(|r| &r.rater)),
    ("verdict", Column::Text(|r| &r.verdict)),
    ("answers", Column::OptionalText(|r| r.answers.as_deref())),
    ("rationale", Column::Text(|r| &r.rationale)),
    ("duration_ms", Column::OptionalInt(|r| r.duration_ms)),
    ("labelled_at", Column::Time(|r| r.labelled_at)),
    ("edited_at", Column::OptionalTime(|r| r.edited_at)),
    ("state", Column::Text(|r| &r.state)),
    ("gold", Column::Bool(|r| r.gold)),
    (
        "review_state",
        Column::OptionalText(|r| r.review_state.as_deref()),
    ),
    (
        "review_decision",
        Column::OptionalText(|r| r.review_decision.as_deref()),
    ),
    (
        "review_verdict",
        Column::OptionalText(|r| r.review_verdict.as_deref()),
    ),
    (
        "review_answers",
        Column::OptionalText(|r| r.review_answers.as_deref()),
    ),
    (
        "review_reason",
        Column::OptionalText(|r| r.review_reason.as_deref()),
    ),
    (
        "check_state",
        Column::OptionalText(|r| r.check_state.as_deref()),
    ),
    (
        "check_verdict",
        Column::OptionalText(|r| r.check_verdict.as_deref()),
    ),
    (
        "check_reason",
        Column::OptionalText(|r| r.check_reason.as_deref()),
    ),
    ("rubric", Column::OptionalText(|r| r.rubric.as_deref())),
    ("rubric_version", Column::OptionalInt(|r| r.rubric_version)),
    (
        "rubric_hash",
        Column::OptionalText(|r| r.rubric_hash.as_deref()),
    ),
    (
        "guideline_version",
        Column::OptionalInt(|r| r.guideline_version),
    ),
];

/// The Parquet schema made from [`COLUMNS`].
fn parquet_schema() -> String {
    let fields: String = COLUMNS
        .iter()
        .map(|(name, column)| {
            let field = match column {
                Column::Int(_) => "required int64",
                Column::OptionalInt(_) => "optional int64",
                Column::Time(_) => "required int64",
                Column::OptionalTime(_) => "optional int64",
                Column::Text(_) => "required binary",
                Column::OptionalText(_) => "optional binary",
                Column::Bool(_) => "required boolean",
            };
            let annotation = match column {
                Column::Time(_) | Column::OptionalTime(_) => " (TIMESTAMP(MILLIS,true))",
                Column::Text(_) | Column::OptionalText(_) => " (UTF8)",
                _ => "",
            };
            format!("    {field} {name}{annotation};\n")
        })
        .collect();
    format!("message arbiter_label {{\n{fields}}}")
}

/// One row as CSV fields, from [`COLUMNS`].
fn csv_record(row: &LabelRecord) -> Vec<String> {
    COLUMNS
        .iter()
        .map(|(_, column)| match column {
            Column::Int(value) | Column::Time(value) => value(row).to_string(),
            Column::OptionalInt(value) | Column::OptionalTime(value) => value(row)
                .map(|value| value.to_string())
                .unwrap_or_default(),
            Column::Text(value) => value(row).to_string(),
            Column::OptionalText(value) => value(row).unwrap_or_default().to_string(),
            Column::Bool(value) => value(row).to_string(),
        })
        .collect()
}

fn parquet_error(err: parquet::errors::ParquetError) -> ServiceError {
    tracing::error!(error = %err, "parquet label export failed");
    ServiceError::Internal
}

fn io_error(err: std::io::Error) -> ServiceError {
    tracing::warn!(error = %err, "label export write failed");
    ServiceError::Internal
}

/// Writes label rows as one format. Parquet buffers a row group; the others write through.
enum LabelWriter<W: Write + Send> {
    Csv(csv::Writer<W>),
    Jsonl(W),
    Parquet {
        writer: SerializedFileWriter<W>,
        buffer: Vec<LabelRecord>,
    },
}

impl<W: Write + Send> LabelWriter<W> {
    fn new(format: ExportFormat, out: W) -> ServiceResult<Self> {
        Ok(match format {
            ExportFormat::Csv => {
                let mut writer = csv::Writer::from_writer(out);
                writer
                    .write_record(COLUMNS.iter().map(|(name, _)| *name))
                    .map_err(|err| io_error(err.into()))?;
                LabelWriter::Csv(writer)
            }
            ExportFormat::Jsonl => LabelWriter::Jsonl(out),
            ExportFormat::Parquet => {
                let schema =
                    Arc::new(parse_message_type(&parquet_schema()).map_err(parquet_error)?);
                let properties = Arc::new(
                    WriterProperties::builder()
                        .set_compression(Compression::SNAPPY)
                        .set_created_by("arbiter".into())
                        .build(),
                );
                LabelWriter::Parquet {
                    writer: SerializedFileWriter::new(out, schema, properties)
                        .map_err(parquet_error)?,
                    buffer: Vec::new(),
                }
            }
        })
    }

    fn write(&mut self, rows: Vec<LabelRecord>) -> ServiceResult<()> {
        match self {
            LabelWriter::Csv(writer) => {
                for row in &rows {
                    // Rationales and answers are people's text: no spreadsheet runs them.
                    let mut record = csv_record(row);
                    quote_formulas(&mut record);
                    writer
                        .write_record(&record)
                        .map_err(|err| io_error(err.into()))?;
                }
            }
            LabelWriter::Jsonl(out) => {
                for row in &rows {
                    serde_json::to_writer(&mut *out, row).map_err(|err| io_error(err.into()))?;
                    out.write_all(b"\n").map_err(io_error)?;
                }
            }
            LabelWriter::Parquet { writer, buffer } => {
                buffer.extend(rows);
                if buffer.len() >= PARQUET_ROW_GROUP {
                    write_row_group(writer, &std::mem::take(buffer))?;
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> ServiceResult<W> {
        match self {
            LabelWriter::Csv(writer) => writer
                .into_inner()
                .map_err(|err| io_error(std::io::Error::other(err.to_string()))),
            LabelWriter::Jsonl(out) => Ok(out),
            LabelWriter::Parquet { mut writer, buffer } => {
                if !buffer.is_empty() {
                    write_row_group(&mut writer, &buffer)?;
                }
                writer.into_inner().map_err(parquet_error)
            }
        }
    }
}

/// Values and definition levels of an optional column.
fn optional<T>(
    rows: &[LabelRecord],
    value: impl Fn(&LabelRecord) -> Option<T>,
) -> (Vec<T>, Vec<i16>) {
    let levels = rows
        .iter()
        .map(|row| i16::from(value(row).is_some()))
        .collect();
    (rows.iter().filter_map(value).collect(), levels)
}

fn write_row_group<W: Write + Send>(
    writer: &mut SerializedFileWriter<W>,
    rows: &[LabelRecord],
) -> ServiceResult<()> {
    let mut group = writer.next_row_group().map_err(parquet_error)?;
    for (_, column) in COLUMNS {
        let mut out = group.next_column().map_err(parquet_error)?.ok_or_else(|| {
            parquet_error(parquet::errors::ParquetError::General(
                "a column is missing".into(),
            ))
        })?;
        let written = match column {
            Column::Int(value) | Column::Time(value) => out.typed::<Int64Type>().write_batch(
                &rows.iter().map(value).collect::<Vec<_>>(),
                None,
                None,
            ),
            Column::OptionalInt(value) | Column::OptionalTime(value) => {
                let (values, levels) = optional(rows, value);
                out.typed::<Int64Type>()
                    .write_batch(&values, Some(&levels), None)
            }
            Column::Text(value) => out.typed::<ByteArrayType>().write_batch(
                &rows
                    .iter()
                    .map(|row| ByteArray::from(value(row)))
                    .collect::<Vec<_>>(),
                None,
                None,
            ),
            Column::OptionalText(value) => {
                let (values, levels) = optional(rows, |row| value(row).map(ByteArray::from));
                out.typed::<ByteArrayType>()
                    .write_batch(&values, Some(&levels), None)
            }
            Column::Bool(value) => out.typed::<BoolType>().write_batch(
                &rows.iter().map(value).collect::<Vec<_>>(),
                None,
                None,
            ),
        };
        written.map_err(parquet_error)?;
        out.close().map_err(parquet_error)?;
    }
    group.close().map_err(parquet_error)?;
    Ok(())
}

/// Streams every label on `run_id`'s items into `out` in `format`, a page at a time (rejected
/// labels included, with their state). Returns the writer and the number of rows written.
pub async fn export_labels<W: Write + Send>(
    store: &dyn Store,
    run_id: RunId,
    format: ExportFormat,
    out: W,
) -> ServiceResult<(W, u64)> {
    if store.run_manifest(run_id).await?.is_none() {
        return Err(ServiceError::NotFound(format!("no run with id {run_id}")));
    }
    let mut writer = LabelWriter::new(format, out)?;
    let mut after = (0, 0);
    let mut written = 0;
    loop {
        let rows = store.label_records(run_id, after, EXPORT_PAGE).await?;
        let Some(last) = rows.last() else { break };
        after = (last.work_item_id, last.label_id);
        written += rows.len() as u64;
        writer.write(rows)?;
    }
    Ok((writer.finish()?, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_and_header_come_from_one_table() {
        let schema = parse_message_type(&parquet_schema()).unwrap();
        assert_eq!(schema.get_fields().len(), COLUMNS.len());
        let row = LabelRecord {
            answers: Some(r#"{"helpful":3}"#.into()),
            rationale: "=SUM(A1)".into(),
            ..LabelRecord::default()
        };
        let mut record = csv_record(&row);
        assert_eq!(record.len(), COLUMNS.len());
        quote_formulas(&mut record);
        assert!(record.contains(&"'=SUM(A1)".to_string()), "{record:?}");
    }
}
