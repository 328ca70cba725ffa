//! A run's load over time, as its workers sample it: what they hold claimed, how much of that
//! waits inside Arbiter for a request slot and how much is at the endpoint, the server's own
//! queue, and how long answers took at the endpoint apart from their wait inside Arbiter.
//! Arbiter's queueing and the server's are told apart, so a slow answer is blamed on the
//! right one.

use serde::{Deserialize, Serialize};

/// One worker's figures for one run over one sampling period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunLoadSample {
    pub run_id: i64,
    pub worker: String,
    /// The period's start, Unix milliseconds (a multiple of the period, so several workers'
    /// samples of one period line up).
    pub taken_at: i64,
    /// Identities the worker held claimed at the end of the period.
    pub claimed: i64,
    /// Of those, identities waiting inside Arbiter for a request slot.
    pub waiting: i64,
    /// Requests at the run's endpoints (sent, not answered).
    pub sending: i64,
    /// The worker's request limit over the run's endpoints.
    pub request_limit: i64,
    /// Requests the run's servers reported waiting in their own queue (vLLM's
    /// `num_requests_waiting`), where they report it.
    pub server_waiting: Option<f64>,
    /// Answers received in the period, and their times.
    pub answers: i64,
    pub latency_ms_sum: i64,
    pub latency_ms_max: i64,
    pub waited_ms_sum: i64,
    /// Identities the worker finished (handed to its committer) in the period.
    pub finished: i64,
}

/// One point of the run's load chart: the workers' samples of one span of time together.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadPoint {
    pub at: i64,
    /// Gauges: summed over workers, averaged over the span's periods.
    pub claimed: f64,
    pub waiting: f64,
    pub sending: f64,
    pub request_limit: f64,
    /// The largest reading of any worker in the span (every worker reads the same servers).
    pub server_waiting: Option<f64>,
    /// Answers in the span, and their mean and longest time at the endpoint and mean wait
    /// inside Arbiter (`None` without answers).
    pub answers: i64,
    pub mean_latency_ms: Option<f64>,
    pub max_latency_ms: Option<i64>,
    pub mean_waited_ms: Option<f64>,
}

/// The run page's load card.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunLoadView {
    pub load_svg: String,
    pub latency_svg: String,
    /// The latest point (the workers' last samples), and the whole run's answers with their
    /// mean time at the endpoints and mean wait inside Arbiter.
    pub latest: Option<LoadPoint>,
    pub answers: i64,
    pub mean_latency_ms: Option<f64>,
    pub mean_waited_ms: Option<f64>,
}

/// The run's samples as at most `max_points` points, oldest first: the samples of each
/// period are added up over workers, and consecutive periods are merged into spans when
/// there are more than `max_points` of them.
pub fn load_series(samples: &[RunLoadSample], max_points: usize) -> Vec<LoadPoint> {
    let mut periods: Vec<(i64, Vec<&RunLoadSample>)> = Vec::new();
    let mut sorted: Vec<&RunLoadSample> = samples.iter().collect();
    sorted.sort_by_key(|sample| sample.taken_at);
    for sample in sorted {
        match periods.last_mut() {
            Some((at, members)) if *at == sample.taken_at => members.push(sample),
            _ => periods.push((sample.taken_at, vec![sample])),
        }
    }
    let per_point = periods.len().div_ceil(max_points.max(1)).max(1);
    periods
        .chunks(per_point)
        .map(|span| {
            let mut point = LoadPoint {
                at: span[0].0,
                ..LoadPoint::default()
            };
            let (mut latency_sum, mut waited_sum) = (0_i64, 0_i64);
            for (_, members) in span {
                for sample in members {
                    point.claimed += sample.claimed as f64;
                    point.waiting += sample.waiting as f64;
                    point.sending += sample.sending as f64;
                    point.request_limit += sample.request_limit as f64;
                    if let Some(waiting) = sample.server_waiting {
                        point.server_waiting = Some(
                            point
                                .server_waiting
                                .map_or(waiting, |seen| seen.max(waiting)),
                        );
                    }
                    point.answers += sample.answers;
                    latency_sum += sample.latency_ms_sum;
                    waited_sum += sample.waited_ms_sum;
                    if sample.answers > 0 {
                        point.max_latency_ms =
                            Some(point.max_latency_ms.map_or(sample.latency_ms_max, |seen| {
                                seen.max(sample.latency_ms_max)
                            }));
                    }
                }
            }
            let periods = span.len() as f64;
            point.claimed /= periods;
            point.waiting /= periods;
            point.sending /= periods;
            point.request_limit /= periods;
            if point.answers > 0 {
                point.mean_latency_ms = Some(latency_sum as f64 / point.answers as f64);
                point.mean_waited_ms = Some(waited_sum as f64 / point.answers as f64);
            }
            point
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(worker: &str, taken_at: i64, claimed: i64, answers: i64) -> RunLoadSample {
        RunLoadSample {
            run_id: 1,
            worker: worker.into(),
            taken_at,
            claimed,
            waiting: claimed / 2,
            sending: claimed - claimed / 2,
            request_limit: 4,
            server_waiting: Some(taken_at as f64 / 1000.0),
            answers,
            latency_ms_sum: answers * 100,
            latency_ms_max: 150 + taken_at / 1000,
            waited_ms_sum: answers * 10,
            finished: answers,
        }
    }

    #[test]
    fn adds_workers_of_a_period_and_averages_periods_of_a_span() {
        let samples = vec![
            sample("a", 2_000, 8, 4),
            sample("b", 0, 6, 2),
            sample("a", 0, 4, 2),
            sample("b", 2_000, 2, 0),
        ];
        let whole = load_series(&samples, 10);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].at, 0);
        assert_eq!(whole[0].claimed, 10.0, "two workers added up");
        assert_eq!(whole[0].sending, 5.0);
        assert_eq!(whole[0].request_limit, 8.0);
        assert_eq!(whole[0].answers, 4);
        assert_eq!(whole[0].mean_latency_ms, Some(100.0));
        assert_eq!(whole[0].mean_waited_ms, Some(10.0));
        assert_eq!(whole[1].server_waiting, Some(2.0), "the largest reading");
        assert_eq!(
            whole[1].max_latency_ms,
            Some(152),
            "a sample without answers adds none"
        );

        let merged = load_series(&samples, 1);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].claimed, 10.0, "(10 + 10) / 2 periods");
        assert_eq!(merged[0].answers, 8, "answers add up over the span");
        assert_eq!(merged[0].max_latency_ms, Some(152));
        assert!(load_series(&[], 5).is_empty());
    }
}
