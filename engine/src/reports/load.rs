//! A run's load over time for its page: what its workers held claimed, how much of that waited
//! inside Arbiter and how much was at the endpoints, the servers' own queue, and how long
//! answers took at the endpoints apart from their wait inside Arbiter.

use crate::error::ServiceResult;
use crate::reports::charts::series::{time_series_svg, TimeAxis, TimeSeries};
use arbiter_domain::health::run_load::{load_series, LoadPoint, RunLoadView};
use arbiter_domain::ids::RunId;
use arbiter_store::Store;

/// Points on a chart: a sample every two seconds stays whole for the first eight minutes.
const MAX_POINTS: usize = 240;

/// The run's load from its workers' samples, charted from `started` to `until`.
pub async fn run_load(
    store: &dyn Store,
    run_id: RunId,
    started: i64,
    until: i64,
) -> ServiceResult<RunLoadView> {
    let samples = store.run_load(run_id).await?;
    let whole = load_series(&samples, 1).pop();
    let points = load_series(&samples, MAX_POINTS);
    let until = points.last().map_or(until, |last| last.at.max(until));
    let axis = TimeAxis::since(started, until);
    let line = |label: &str, value: fn(&LoadPoint) -> Option<f64>| TimeSeries {
        label: label.into(),
        points: points
            .iter()
            .filter_map(|point| Some((point.at, value(point)?)))
            .collect(),
    };
    Ok(RunLoadView {
        load_svg: time_series_svg(
            "Identities claimed, waiting in Arbiter and at the endpoints",
            "identities",
            &axis,
            &[
                line("claimed by workers", |point| Some(point.claimed)),
                line("waiting in Arbiter for a slot", |point| Some(point.waiting)),
                line("at the endpoints", |point| Some(point.sending)),
                line("request limit", |point| Some(point.request_limit)),
                line("waiting in the servers' queues", |point| {
                    point.server_waiting
                }),
            ],
        ),
        latency_svg: time_series_svg(
            "Answer time at the endpoints and wait in Arbiter",
            "milliseconds",
            &axis,
            &[
                line("mean time at the endpoints", |point| point.mean_latency_ms),
                line("mean wait in Arbiter", |point| point.mean_waited_ms),
                line("longest time at the endpoints", |point| {
                    point.max_latency_ms.map(|ms| ms as f64)
                }),
            ],
        ),
        latest: points.last().cloned(),
        answers: whole.as_ref().map_or(0, |whole| whole.answers),
        mean_latency_ms: whole.as_ref().and_then(|whole| whole.mean_latency_ms),
        mean_waited_ms: whole.and_then(|whole| whole.mean_waited_ms),
    })
}
