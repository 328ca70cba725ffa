//! What a worker holds of each run, how much of it the endpoints can take soon, and the
//! samples of that load the run page charts.
//!
//! A worker claims only what its endpoints' limiters let out soon: two rounds of their
//! limits, one at the endpoint and one ready to follow it. Claiming more would not make
//! answers come sooner; the identities would wait inside this worker, counted as slow answers
//! and kept from idle workers, while the server's own queue stays short.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arbiter_domain::answer::Generation;
use arbiter_domain::health::run_load::RunLoadSample;
use arbiter_domain::ids::RunId;
use arbiter_store::Store;
use tokio::sync::watch;

use super::EndpointPool;

/// Rounds of the request limit a worker holds claimed per endpoint: one at the endpoint, one
/// waiting to follow it.
pub(super) const ROUNDS_HELD: usize = 2;

/// How often a worker samples its load for the run page.
pub(super) const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// One run's load in one worker. The window figures (answers and their times, identities
/// finished) are taken and reset by each sample.
///
/// Counts are of identities, while limits are of requests: an identity that sends several
/// requests (a likelihood eval's choices, a rolling eval's windows) makes the two rounds
/// held wider by its fan-out, and its requests at the endpoint may outnumber its unanswered
/// identities (the sample's `waiting` then reads 0).
#[derive(Debug, Default)]
pub struct RunLoad {
    /// Identities claimed and not yet handed to the committer (answering, judging, done).
    held: AtomicUsize,
    /// Of those, identities the model has not answered yet (waiting for a slot, or sent).
    unanswered: AtomicUsize,
    /// Requests of this run at its endpoints now, counted by the endpoint pool.
    sending: AtomicUsize,
    /// Answers the model sent back in the window (cache hits are not answers), their summed
    /// and longest time at the endpoints, and their summed wait inside Arbiter.
    answers: AtomicI64,
    latency_ms_sum: AtomicI64,
    latency_ms_max: AtomicI64,
    waited_ms_sum: AtomicI64,
    /// Identities handed to the committer in the window.
    finished: AtomicI64,
    /// The run's endpoints, set when its manifest is read.
    endpoint_urls: OnceLock<Vec<String>>,
}

impl RunLoad {
    pub(super) fn set_endpoints(&self, urls: &[String]) {
        let _ = self.endpoint_urls.set(urls.to_vec());
    }

    pub(super) fn endpoint_urls(&self) -> &[String] {
        self.endpoint_urls.get().map_or(&[], Vec::as_slice)
    }

    /// `identities` were claimed; each is counted until its [`Held`] drops.
    pub(super) fn claimed(self: &Arc<Self>, identities: usize) -> Vec<Held> {
        self.held.fetch_add(identities, Ordering::Relaxed);
        self.unanswered.fetch_add(identities, Ordering::Relaxed);
        (0..identities)
            .map(|_| Held {
                load: self.clone(),
                answered: false,
            })
            .collect()
    }

    /// The model answered one identity (from the cache when `sent` is false).
    fn answered(&self, generation: &Generation, sent: bool) {
        self.unanswered.fetch_sub(1, Ordering::Relaxed);
        if sent {
            self.answers.fetch_add(1, Ordering::Relaxed);
            self.latency_ms_sum
                .fetch_add(generation.latency_ms, Ordering::Relaxed);
            self.latency_ms_max
                .fetch_max(generation.latency_ms, Ordering::Relaxed);
            self.waited_ms_sum
                .fetch_add(generation.waited_ms, Ordering::Relaxed);
        }
    }

    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(super) fn unanswered(&self) -> usize {
        self.unanswered.load(Ordering::Relaxed)
    }

    /// A request of this run is at an endpoint until the guard drops.
    pub(super) fn sending(&self) -> SendingGuard<'_> {
        self.sending.fetch_add(1, Ordering::Relaxed);
        SendingGuard(self)
    }

    /// The period's sample; `None` when the run had nothing held and no answers.
    fn take_sample(&self) -> Option<RunLoadSample> {
        let answers = self.answers.swap(0, Ordering::Relaxed);
        let finished = self.finished.swap(0, Ordering::Relaxed);
        let sample = RunLoadSample {
            claimed: self.held() as i64,
            sending: self.sending.load(Ordering::Relaxed) as i64,
            answers,
            latency_ms_sum: self.latency_ms_sum.swap(0, Ordering::Relaxed),
            latency_ms_max: self.latency_ms_max.swap(0, Ordering::Relaxed),
            waited_ms_sum: self.waited_ms_sum.swap(0, Ordering::Relaxed),
            finished,
            ..RunLoadSample::default()
        };
        let waiting = (self.unanswered() as i64 - sample.sending).max(0);
        (sample.claimed > 0 || answers > 0 || finished > 0)
            .then_some(RunLoadSample { waiting, ..sample })
    }
}

/// One claimed identity, counted in its run's load until dropped: answered or not, finished
/// or returned to the queue, or lost to a panic, the counts never drift (a leaked count would
/// close the endpoint's room for good).
pub(super) struct Held {
    load: Arc<RunLoad>,
    answered: bool,
}

impl Held {
    /// The model answered it (from the cache when `sent` is false).
    pub(super) fn answered(&mut self, generation: &Generation, sent: bool) {
        if !self.answered {
            self.answered = true;
            self.load.answered(generation, sent);
        }
    }

    /// Handed to the committer.
    pub(super) fn finished(self) {
        self.load.finished.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.answered {
            self.load.unanswered.fetch_sub(1, Ordering::Relaxed);
        }
        self.load.held.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts one request at an endpoint while it lives.
pub struct SendingGuard<'a>(&'a RunLoad);

impl Drop for SendingGuard<'_> {
    fn drop(&mut self) {
        self.0.sending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Every run's load in one worker.
pub(super) type Loads = Arc<Mutex<HashMap<RunId, Arc<RunLoad>>>>;

pub(super) fn load_of(loads: &Loads, run_id: RunId) -> Arc<RunLoad> {
    loads
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .entry(run_id)
        .or_default()
        .clone()
}

/// Identities held by this worker, per run.
pub(super) fn held_per_run(loads: &Loads) -> HashMap<RunId, usize> {
    loads
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .iter()
        .map(|(run, load)| (*run, load.held()))
        .collect()
}

/// Identities a group of runs sharing endpoints may claim now: [`ROUNDS_HELD`] rounds of the
/// endpoints' summed request limit, less what those runs hold unanswered. None below `least`,
/// so that a claim statement is worth its round trip; `least` is capped at half the holding,
/// so a small endpoint is still fed as its requests finish.
pub(super) fn room(request_limit: usize, unanswered: usize, least: usize) -> usize {
    let holding = ROUNDS_HELD * request_limit.max(1);
    let room = holding.saturating_sub(unanswered);
    if room >= least.min(holding / 2).max(1) {
        room
    } else {
        0
    }
}

/// Writes each run's load every [`SAMPLE_EVERY`] until `shutdown`, and a last sample then.
pub(super) async fn sample_loop(
    store: Arc<dyn Store>,
    worker_id: String,
    loads: Loads,
    pool: Arc<EndpointPool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let period = SAMPLE_EVERY.as_millis() as i64;
    let mut last_taken_at = 0;
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(SAMPLE_EVERY) => false,
            _ = shutdown.changed() => true,
        };
        // The last sample at shutdown may fall in the period just sampled: it takes the next.
        let taken_at = ((arbiter_store::now_ms() / period) * period).max(last_taken_at + period);
        last_taken_at = taken_at;
        let runs: Vec<(RunId, Arc<RunLoad>)> = loads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(run, load)| (*run, load.clone()))
            .collect();
        let mut samples = Vec::new();
        for (run_id, load) in runs {
            let Some(sample) = load.take_sample() else {
                continue;
            };
            let urls = load.endpoint_urls();
            samples.push(RunLoadSample {
                run_id: run_id.get(),
                worker: worker_id.clone(),
                taken_at,
                request_limit: pool.request_limit(urls).await as i64,
                server_waiting: pool.server_waiting(urls),
                ..sample
            });
        }
        if !samples.is_empty() {
            if let Err(err) = store.record_run_load(&samples).await {
                tracing::debug!(error = %err, "run load samples not kept");
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_two_rounds_of_the_limit_less_what_waits_and_worth_a_claim() {
        assert_eq!(room(4, 0, 32), 8, "two rounds of a limit of 4");
        assert_eq!(room(4, 5, 32), 0, "3 free: less than half the holding");
        assert_eq!(room(4, 4, 32), 4, "half the holding is worth a claim");
        assert_eq!(room(4, 9, 32), 0, "never negative");
        assert_eq!(room(256, 0, 32), 512);
        assert_eq!(room(256, 490, 32), 0, "22 free: less than a useful claim");
        assert_eq!(room(256, 480, 32), 32);
        assert_eq!(room(0, 0, 32), 2, "a limit is at least one request");
        assert_eq!(room(1, 1, 32), 1);
    }

    #[test]
    fn a_sample_splits_waiting_from_sending_and_resets_its_window() {
        let load = Arc::new(RunLoad::default());
        assert_eq!(load.take_sample(), None, "nothing held, nothing answered");
        let mut held = load.claimed(5);
        let _first = load.sending();
        let _second = load.sending();
        let answer = Generation {
            latency_ms: 300,
            waited_ms: 40,
            ..Generation::default()
        };
        held[0].answered(&answer, true);
        held[0].answered(&answer, true);
        held[1].answered(&Generation::default(), false);
        let sample = load.take_sample().unwrap();
        assert_eq!(
            (sample.claimed, sample.waiting, sample.sending),
            (5, 1, 2),
            "5 held, 3 unanswered of which 2 at the endpoint"
        );
        assert_eq!(
            (sample.answers, sample.latency_ms_sum, sample.waited_ms_sum),
            (1, 300, 40),
            "a cached answer is not timed"
        );
        let next = load.take_sample().unwrap();
        assert_eq!(
            (next.answers, next.latency_ms_max),
            (0, 0),
            "the window restarts"
        );
        drop(_first);
        assert_eq!(load.take_sample().unwrap().sending, 1);
        // Finished, returned unanswered, or dropped by a panicking task: all released.
        held.remove(0).finished();
        drop(held);
        let last = load.take_sample().unwrap();
        assert_eq!((last.claimed, last.finished), (0, 1));
        assert_eq!(load.unanswered(), 0);
    }
}
