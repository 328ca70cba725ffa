//! Exporting a run's results: CSV and JSON Lines for people and scripts, Parquet for DuckDB,
//! BigQuery and long-term archives. Rows stream from the store a page at a time into the
//! writer, so a million-item export never holds the run in memory (Parquet holds one row
//! group, `PARQUET_ROW_GROUP` rows, at a time).
//!
//! Parquet archives are laid out Hive-style, `date=YYYY-MM-DD/checkpoint=NAME/run-ID.parquet`,
//! so DuckDB (`read_parquet('…/date=*/*/*.parquet', hive_partitioning = true)`) and BigQuery external
//! tables see `date` and `checkpoint` as columns and prune by them.

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::ids::RunId;
use arbiter_domain::spreadsheet::quote_formulas;
use arbiter_store::{ExportRow, Store};
use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::io::Write;
use std::sync::Arc;

/// Rows read from the store per page.
pub const EXPORT_PAGE: i64 = 5_000;
/// Rows per Parquet row group: large enough for good compression and pruning statistics,
/// small enough to bound the exporter's memory.
pub const PARQUET_ROW_GROUP: usize = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    Csv,
    Jsonl,
    Parquet,
}

impl ExportFormat {
    pub fn parse(name: &str) -> Option<ExportFormat> {
        match name {
            "csv" => Some(ExportFormat::Csv),
            "jsonl" => Some(ExportFormat::Jsonl),
            "parquet" => Some(ExportFormat::Parquet),
            _ => None,
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Csv => "csv",
            ExportFormat::Jsonl => "jsonl",
            ExportFormat::Parquet => "parquet",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            ExportFormat::Csv => "text/csv; charset=utf-8",
            ExportFormat::Jsonl => "application/x-ndjson",
            ExportFormat::Parquet => "application/vnd.apache.parquet",
        }
    }
}

const CSV_HEADER: [&str; 27] = [
    "run_id",
    "work_item_id",
    "case_id",
    "repetition",
    "category",
    "checkpoint",
    "input",
    "target",
    "verdict",
    "decided_by",
    "outcome",
    "output",
    "finish_reason",
    "error",
    "error_category",
    "model_used",
    "fallback_used",
    "from_cache",
    "latency_ms",
    "attempts",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "answered_at",
    "turn",
    "choice_scores",
    "waited_ms",
];

fn optional<T: ToString>(value: &Option<T>) -> String {
    value.as_ref().map(ToString::to_string).unwrap_or_default()
}

fn csv_record(row: &ExportRow) -> [String; 27] {
    [
        row.run_id.to_string(),
        row.identity_id.to_string(),
        row.case_id.clone(),
        row.repetition.to_string(),
        row.category.clone(),
        row.checkpoint.clone(),
        row.input.clone(),
        row.target.clone(),
        row.verdict.clone(),
        row.decided_by.clone(),
        row.outcome.clone(),
        row.output.clone(),
        optional(&row.finish_reason),
        optional(&row.error),
        optional(&row.error_category),
        optional(&row.model_used),
        row.fallback_used.to_string(),
        row.from_cache.to_string(),
        optional(&row.latency_ms),
        optional(&row.attempts),
        optional(&row.prompt_tokens),
        optional(&row.completion_tokens),
        optional(&row.cost_usd),
        optional(&row.answered_at),
        row.turn.to_string(),
        optional(&row.choice_scores),
        optional(&row.waited_ms),
    ]
}

/// The Parquet schema: strings as UTF-8 byte arrays, times as milliseconds.
const PARQUET_SCHEMA: &str = "message arbiter_result {
    required int64 run_id;
    required int64 work_item_id;
    required binary case_id (UTF8);
    required int64 repetition;
    required binary category (UTF8);
    required binary checkpoint (UTF8);
    required binary input (UTF8);
    required binary target (UTF8);
    required binary verdict (UTF8);
    required binary decided_by (UTF8);
    required binary outcome (UTF8);
    required binary output (UTF8);
    optional binary finish_reason (UTF8);
    optional binary error (UTF8);
    optional binary error_category (UTF8);
    optional binary model_used (UTF8);
    required boolean fallback_used;
    required boolean from_cache;
    optional int64 latency_ms;
    optional int64 attempts;
    optional int64 prompt_tokens;
    optional int64 completion_tokens;
    optional double cost_usd;
    optional int64 answered_at (TIMESTAMP(MILLIS,true));
    required int64 turn;
    optional binary choice_scores (UTF8);
    optional int64 waited_ms;
}";

fn parquet_error(err: parquet::errors::ParquetError) -> ServiceError {
    tracing::error!(error = %err, "parquet export failed");
    ServiceError::Internal
}

fn io_error(err: std::io::Error) -> ServiceError {
    tracing::warn!(error = %err, "export write failed");
    ServiceError::Internal
}

/// Writes rows as one format. Parquet buffers a row group; the others write through.
pub enum ExportWriter<W: Write + Send> {
    Csv(csv::Writer<W>),
    Jsonl(W),
    Parquet {
        writer: SerializedFileWriter<W>,
        buffer: Vec<ExportRow>,
    },
}

impl<W: Write + Send> ExportWriter<W> {
    pub fn new(format: ExportFormat, out: W) -> ServiceResult<Self> {
        Ok(match format {
            ExportFormat::Csv => {
                let mut writer = csv::Writer::from_writer(out);
                writer
                    .write_record(CSV_HEADER)
                    .map_err(|err| io_error(err.into()))?;
                ExportWriter::Csv(writer)
            }
            ExportFormat::Jsonl => ExportWriter::Jsonl(out),
            ExportFormat::Parquet => {
                let schema = Arc::new(parse_message_type(PARQUET_SCHEMA).map_err(parquet_error)?);
                let properties = Arc::new(
                    WriterProperties::builder()
                        .set_compression(Compression::SNAPPY)
                        .set_created_by("arbiter".into())
                        .build(),
                );
                ExportWriter::Parquet {
                    writer: SerializedFileWriter::new(out, schema, properties)
                        .map_err(parquet_error)?,
                    buffer: Vec::new(),
                }
            }
        })
    }

    pub fn write(&mut self, rows: Vec<ExportRow>) -> ServiceResult<()> {
        match self {
            ExportWriter::Csv(writer) => {
                for row in &rows {
                    // Text from datasets and models is written so no spreadsheet runs it.
                    let mut record = csv_record(row);
                    quote_formulas(&mut record);
                    writer
                        .write_record(&record)
                        .map_err(|err| io_error(err.into()))?;
                }
            }
            ExportWriter::Jsonl(out) => {
                for row in &rows {
                    serde_json::to_writer(&mut *out, row).map_err(|err| io_error(err.into()))?;
                    out.write_all(b"\n").map_err(io_error)?;
                }
            }
            ExportWriter::Parquet { writer, buffer } => {
                buffer.extend(rows);
                if buffer.len() >= PARQUET_ROW_GROUP {
                    write_row_group(writer, &std::mem::take(buffer))?;
                }
            }
        }
        Ok(())
    }

    /// Flushes what is buffered and writes the format's trailer (Parquet's footer).
    pub fn finish(self) -> ServiceResult<W> {
        match self {
            ExportWriter::Csv(writer) => writer
                .into_inner()
                .map_err(|err| io_error(std::io::Error::other(err.to_string()))),
            ExportWriter::Jsonl(out) => Ok(out),
            ExportWriter::Parquet { mut writer, buffer } => {
                if !buffer.is_empty() {
                    write_row_group(&mut writer, &buffer)?;
                }
                writer.into_inner().map_err(parquet_error)
            }
        }
    }
}

fn strings<'a>(rows: &'a [ExportRow], field: impl Fn(&'a ExportRow) -> &'a str) -> Vec<ByteArray> {
    rows.iter().map(|row| ByteArray::from(field(row))).collect()
}

/// Values and definition levels of an optional column.
fn optional_strings<'a>(
    rows: &'a [ExportRow],
    field: impl Fn(&'a ExportRow) -> Option<&'a str>,
) -> (Vec<ByteArray>, Vec<i16>) {
    let values = rows
        .iter()
        .filter_map(|row| field(row).map(ByteArray::from))
        .collect();
    let levels = rows
        .iter()
        .map(|row| i16::from(field(row).is_some()))
        .collect();
    (values, levels)
}

fn optional_ints(
    rows: &[ExportRow],
    field: impl Fn(&ExportRow) -> Option<i64>,
) -> (Vec<i64>, Vec<i16>) {
    let values = rows.iter().filter_map(&field).collect();
    let levels = rows
        .iter()
        .map(|row| i16::from(field(row).is_some()))
        .collect();
    (values, levels)
}

fn write_row_group<W: Write + Send>(
    writer: &mut SerializedFileWriter<W>,
    rows: &[ExportRow],
) -> ServiceResult<()> {
    let mut group = writer.next_row_group().map_err(parquet_error)?;
    let mut index = 0;
    while let Some(mut column) = group.next_column().map_err(parquet_error)? {
        let result = match index {
            0 => column.typed::<Int64Type>().write_batch(
                &rows.iter().map(|r| r.run_id.get()).collect::<Vec<_>>(),
                None,
                None,
            ),
            1 => column.typed::<Int64Type>().write_batch(
                &rows.iter().map(|r| r.identity_id.get()).collect::<Vec<_>>(),
                None,
                None,
            ),
            2 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.case_id),
                None,
                None,
            ),
            3 => column.typed::<Int64Type>().write_batch(
                &rows.iter().map(|r| r.repetition).collect::<Vec<_>>(),
                None,
                None,
            ),
            4 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.category),
                None,
                None,
            ),
            5 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.checkpoint),
                None,
                None,
            ),
            6 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.input),
                None,
                None,
            ),
            7 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.target),
                None,
                None,
            ),
            8 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.verdict),
                None,
                None,
            ),
            9 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.decided_by),
                None,
                None,
            ),
            10 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.outcome),
                None,
                None,
            ),
            11 => column.typed::<ByteArrayType>().write_batch(
                &strings(rows, |r| &r.output),
                None,
                None,
            ),
            12..=15 => {
                let (values, levels) = optional_strings(rows, |r| match index {
                    12 => r.finish_reason.as_deref(),
                    13 => r.error.as_deref(),
                    14 => r.error_category.as_deref(),
                    _ => r.model_used.as_deref(),
                });
                column
                    .typed::<ByteArrayType>()
                    .write_batch(&values, Some(&levels), None)
            }
            16 => column.typed::<BoolType>().write_batch(
                &rows.iter().map(|r| r.fallback_used).collect::<Vec<_>>(),
                None,
                None,
            ),
            17 => column.typed::<BoolType>().write_batch(
                &rows.iter().map(|r| r.from_cache).collect::<Vec<_>>(),
                None,
                None,
            ),
            18..=21 | 23 | 26 => {
                let (values, levels) = optional_ints(rows, |r| match index {
                    18 => r.latency_ms,
                    19 => r.attempts,
                    20 => r.prompt_tokens,
                    21 => r.completion_tokens,
                    26 => r.waited_ms,
                    _ => r.answered_at,
                });
                column
                    .typed::<Int64Type>()
                    .write_batch(&values, Some(&levels), None)
            }
            22 => {
                let values: Vec<f64> = rows.iter().filter_map(|r| r.cost_usd).collect();
                let levels: Vec<i16> = rows
                    .iter()
                    .map(|r| i16::from(r.cost_usd.is_some()))
                    .collect();
                column
                    .typed::<DoubleType>()
                    .write_batch(&values, Some(&levels), None)
            }
            24 => column.typed::<Int64Type>().write_batch(
                &rows.iter().map(|r| r.turn).collect::<Vec<_>>(),
                None,
                None,
            ),
            25 => {
                let (values, levels) = optional_strings(rows, |r| r.choice_scores.as_deref());
                column
                    .typed::<ByteArrayType>()
                    .write_batch(&values, Some(&levels), None)
            }
            _ => Ok(0),
        };
        result.map_err(parquet_error)?;
        column.close().map_err(parquet_error)?;
        index += 1;
    }
    group.close().map_err(parquet_error)?;
    Ok(())
}

/// Streams every result of `run_id` into `out` in `format`, a page at a time.
/// Returns the writer and the number of rows written.
pub async fn export_run<W: Write + Send>(
    store: &dyn Store,
    run_id: RunId,
    format: ExportFormat,
    out: W,
) -> ServiceResult<(W, u64)> {
    if store.run_manifest(run_id).await?.is_none() {
        return Err(ServiceError::NotFound(format!("no run with id {run_id}")));
    }
    let mut writer = ExportWriter::new(format, out)?;
    let mut after = 0;
    let mut written = 0;
    loop {
        let rows = store.export_rows(run_id, after, EXPORT_PAGE).await?;
        let Some(last) = rows.last() else { break };
        after = last.identity_id.get();
        written += rows.len() as u64;
        writer.write(rows)?;
    }
    Ok((writer.finish()?, written))
}

/// The Hive-style path of a run's Parquet archive under an export folder: partitioned by the
/// run's creation date (UTC) and checkpoint, so archives of many runs form one dataset.
pub fn partition_path(
    run_created_at_ms: i64,
    checkpoint: &str,
    run_id: RunId,
) -> std::path::PathBuf {
    let days = run_created_at_ms.div_euclid(86_400_000);
    let date = civil_date(days);
    let safe: String = checkpoint
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    std::path::PathBuf::from(format!("date={date}"))
        .join(format!("checkpoint={safe}"))
        .join(format!("run-{run_id}.parquet"))
}

/// Days since 1970-01-01 to "YYYY-MM-DD" (Howard Hinnant's civil-from-days algorithm).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{:04}-{m:02}-{d:02}", if m <= 2 { y + 1 } else { y })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::ids::IdentityId;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::RowAccessor;

    fn row(id: i64, verdict: &str, error: Option<&str>) -> ExportRow {
        ExportRow {
            run_id: RunId(1),
            identity_id: IdentityId(id),
            case_id: format!("c{id}"),
            category: "math".into(),
            checkpoint: "ckpt-a".into(),
            input: "What is 2, \"plus\" 2?\nThink.".into(),
            target: "4".into(),
            verdict: verdict.into(),
            outcome: if error.is_some() {
                "endpoint_error".into()
            } else {
                "ok".into()
            },
            output: "Answer: 4".into(),
            error: error.map(Into::into),
            latency_ms: Some(12),
            waited_ms: error.is_none().then_some(3),
            cost_usd: error.is_none().then_some(0.001),
            answered_at: Some(1_764_547_200_000),
            choice_scores: None,
            turn: 1,
            ..ExportRow::default()
        }
    }

    fn export(format: ExportFormat, rows: Vec<ExportRow>) -> Vec<u8> {
        let mut writer = ExportWriter::new(format, Vec::new()).unwrap();
        writer.write(rows).unwrap();
        writer.finish().unwrap()
    }

    #[test]
    fn csv_quotes_text_and_keeps_empty_optionals_empty() {
        let bytes = export(
            ExportFormat::Csv,
            vec![
                row(1, "pass", None),
                row(2, "error", Some("connect refused")),
            ],
        );
        let mut reader = csv::Reader::from_reader(bytes.as_slice());
        assert_eq!(reader.headers().unwrap().len(), 27);
        assert_eq!(&reader.headers().unwrap()[24], "turn");
        assert_eq!(&reader.headers().unwrap()[26], "waited_ms");
        let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(&records[0][6], "What is 2, \"plus\" 2?\nThink.");
        assert_eq!(&records[0][13], "");
        assert_eq!(&records[1][13], "connect refused");
        assert_eq!(&records[1][24], "1");
        assert_eq!((&records[0][26], &records[1][26]), ("3", ""));
    }

    /// Before the fix a dataset's or a model's `=HYPERLINK(…)` became a live formula in the
    /// reader's spreadsheet.
    #[test]
    fn csv_cells_never_start_a_formula() {
        let hostile = ExportRow {
            input: "=HYPERLINK(\"http://evil.test\",\"open\")".into(),
            target: "-5".into(),
            output: "@SUM(A1:A9)".into(),
            case_id: "+1".into(),
            ..row(1, "fail", None)
        };
        let bytes = export(ExportFormat::Csv, vec![hostile]);
        let mut reader = csv::Reader::from_reader(bytes.as_slice());
        let record = reader.records().next().unwrap().unwrap();
        assert_eq!(&record[6], "'=HYPERLINK(\"http://evil.test\",\"open\")");
        assert_eq!(&record[11], "'@SUM(A1:A9)");
        // Plain numbers are not formulas and stay numbers.
        assert_eq!((&record[2], &record[7]), ("+1", "-5"));
    }

    #[test]
    fn choice_scores_are_exported_as_json() {
        let scored = ExportRow {
            choice_scores: Some(r#"{"choices":[{"logprob":-1.5}],"gold":[0]}"#.into()),
            ..row(1, "pass", None)
        };
        let line: serde_json::Value =
            serde_json::from_slice(&export(ExportFormat::Jsonl, vec![scored.clone()])).unwrap();
        assert_eq!(line["choice_scores"]["gold"], serde_json::json!([0]));
        let bytes = export(ExportFormat::Csv, vec![scored]);
        let mut reader = csv::Reader::from_reader(bytes.as_slice());
        assert_eq!(&reader.headers().unwrap()[25], "choice_scores");
        let record = reader.records().next().unwrap().unwrap();
        assert!(record[25].starts_with(r#"{"choices""#));
    }

    #[test]
    fn jsonl_is_one_object_per_line() {
        let bytes = export(
            ExportFormat::Jsonl,
            vec![row(1, "pass", None), row(2, "fail", None)],
        );
        let lines: Vec<ExportRow> = String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines, vec![row(1, "pass", None), row(2, "fail", None)]);
    }

    #[test]
    fn parquet_reads_back_with_nulls_in_place() {
        let bytes = export(
            ExportFormat::Parquet,
            vec![
                row(1, "pass", None),
                row(2, "error", Some("timeout")),
                row(3, "fail", None),
            ],
        );
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 3);
        let rows: Vec<_> = reader
            .get_row_iter(None)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows[1].get_long(1).unwrap(), 2);
        assert_eq!(rows[1].get_string(8).unwrap(), "error");
        assert_eq!(rows[1].get_string(13).unwrap(), "timeout");
        assert!(
            rows[0].get_string(13).is_err(),
            "no error on an answered row"
        );
        assert_eq!(rows[2].get_double(22).unwrap(), 0.001);
        assert_eq!(rows[0].get_long(26).unwrap(), 3);
        assert!(rows[1].get_long(26).is_err(), "no wait on a failed row");
    }

    #[test]
    fn archives_are_partitioned_by_date_and_checkpoint() {
        // 2025-12-01T00:00:00Z.
        let path = partition_path(1_764_547_200_000, "sim/ckpt a", RunId(7));
        assert_eq!(
            path,
            std::path::PathBuf::from("date=2025-12-01/checkpoint=sim_ckpt_a/run-7.parquet")
        );
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(-1), "1969-12-31");
        assert_eq!(civil_date(11_016), "2000-02-29");
    }
}
