//! Downloads: the rater pool's figures and the pay ledger as CSV for leads, and a run's results
//! or its human labels as CSV, JSON Lines or Parquet, streamed from a temporary file.

use super::forms::{json_error, service_error_response, session_allowed};
use arbiter_app::guard::AppState;
use arbiter_domain::accounts::Permission;
use arbiter_domain::ids::RunId;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use tower_sessions::Session;

/// The rater pool's figures as CSV, for leads.
pub async fn raters_csv(State(state): State<AppState>, session: Session) -> Response {
    if let Err(refused) = session_allowed(&state, &session, Permission::ManageUsers).await {
        return refused;
    }
    match arbiter_engine::annotation::raters::rater_table(state.store.as_ref()).await {
        Ok((raters, _)) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"raters.csv\"",
                ),
            ],
            arbiter_domain::annotation::pool::stats_csv(&raters),
        )
            .into_response(),
        Err(err) => service_error_response(&err),
    }
}

/// The query of the pay ledger's download.
#[derive(serde::Deserialize)]
pub struct LedgerQuery {
    #[serde(default)]
    from: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    period: String,
}

/// The pay ledger as CSV for payroll, for leads: `/pay/ledger.csv?from=…&until=…&period=…`.
pub async fn pay_ledger_csv(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Query(query): axum::extract::Query<LedgerQuery>,
) -> Response {
    if let Err(refused) = session_allowed(&state, &session, Permission::ManageUsers).await {
        return refused;
    }
    let ledger = arbiter_engine::annotation::pay::ledger(
        state.store.as_ref(),
        &query.from,
        &query.until,
        &query.period,
        None,
    )
    .await;
    match ledger {
        Ok(ledger) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()),
                (
                    header::CONTENT_DISPOSITION,
                    format!(
                        "attachment; filename=\"pay-{}-{}.csv\"",
                        ledger.from, ledger.until
                    ),
                ),
            ],
            arbiter_domain::annotation::pay::ledger_csv(&ledger.rows),
        )
            .into_response(),
        Err(err) => service_error_response(&err),
    }
}

/// Downloads a run's results: `/runs/{id}/export/{format}` with `csv`, `jsonl` or `parquet`.
pub async fn export_results(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Path((run_id, format)): axum::extract::Path<(RunId, String)>,
) -> Response {
    download(state, session, run_id, &format, Export::Results).await
}

/// Downloads a run's human labels, a row each: `/runs/{id}/labels/{format}`, for leads.
pub async fn export_labels(
    State(state): State<AppState>,
    session: Session,
    axum::extract::Path((run_id, format)): axum::extract::Path<(RunId, String)>,
) -> Response {
    download(state, session, run_id, &format, Export::Labels).await
}

/// What a download holds.
#[derive(Clone, Copy)]
enum Export {
    Results,
    Labels,
}

/// The export is written to a temporary file a page of rows at a time, then streamed, so a
/// million-row run never sits in memory.
async fn download(
    state: AppState,
    session: Session,
    run_id: RunId,
    format: &str,
    export: Export,
) -> Response {
    use arbiter_engine::reports::export::{export_run, ExportFormat};
    use arbiter_engine::reports::label_export::export_labels;
    use std::io::{Seek, SeekFrom};
    // Labels carry each rater's record (time on task, rejections, which items are gold): the
    // rater pool's figures, which leads see.
    let needed = match export {
        Export::Results => Permission::ViewResults,
        Export::Labels => Permission::ManageUsers,
    };
    if let Err(refused) = session_allowed(&state, &session, needed).await {
        return refused;
    }
    let Some(format) = ExportFormat::parse(format) else {
        return json_error(
            StatusCode::BAD_REQUEST,
            &format!("unknown export format `{format}`: use csv, jsonl or parquet"),
        );
    };
    let file = match tempfile::tempfile() {
        Ok(file) => std::io::BufWriter::new(file),
        Err(err) => {
            tracing::error!(error = %err, "no temporary file for an export");
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the export could not be written",
            );
        }
    };
    let written = match export {
        Export::Results => export_run(state.store.as_ref(), run_id, format, file).await,
        Export::Labels => export_labels(state.store.as_ref(), run_id, format, file).await,
    };
    let (writer, _) = match written {
        Ok(done) => done,
        Err(err) => {
            return json_error(
                StatusCode::from_u16(err.status_code())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                &err.to_string(),
            )
        }
    };
    let file = match writer
        .into_inner()
        .map_err(|err| err.into_error())
        .and_then(|mut file| {
            file.seek(SeekFrom::Start(0))?;
            Ok(file)
        }) {
        Ok(file) => file,
        Err(err) => {
            tracing::error!(error = %err, "an export could not be read back");
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the export could not be written",
            );
        }
    };
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
    (
        [
            (header::CONTENT_TYPE, format.content_type().to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"{}-{run_id}.{}\"",
                    match export {
                        Export::Results => "run",
                        Export::Labels => "labels",
                    },
                    format.extension()
                ),
            ),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}
