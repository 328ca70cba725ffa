//! In-process and standalone workers: claim result identities, generate, grade, record.
//!
//! A worker keeps up to `max_in_flight` requests going at once and claims more as soon as slots
//! free up (no batch barrier: one slow item never holds back the rest). Each identity is leased;
//! if the worker dies its lease expires and another worker picks the item up, and the unique
//! key on a result makes a late duplicate commit a no-op. No transaction is held across a model
//! call.

use crate::grading::grade_exact_match;
use crate::manifest::render_prompt;
use crate::model_client::{GenerationRequest, ModelClient};
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};

/// How a worker process behaves; the defaults suit the embedded demo.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Unique name in leases, e.g. `host:pid:n`.
    pub worker_id: String,
    /// Requests this worker keeps in flight at once.
    pub max_in_flight: usize,
    /// Most identities claimed in one statement.
    pub claim_batch: i64,
    /// How long a claimed identity stays ours without being finished.
    pub lease: Duration,
    /// Sleep between claims when the queue is empty.
    pub idle_poll: Duration,
    /// Limit on one HTTP attempt.
    pub attempt_timeout: Duration,
}

impl WorkerConfig {
    pub fn named(worker_id: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            worker_id: worker_id.into(),
            max_in_flight: 64,
            claim_batch: 32,
            lease: Duration::from_secs(300),
            idle_poll: Duration::from_millis(300),
            attempt_timeout: Duration::from_secs(60),
        }
    }
}

/// Runs one identity end to end: load, generate, grade, record. Errors are logged; the lease
/// lets another attempt happen later.
async fn process_item(store: &dyn Store, client: &ModelClient, work_item_id: i64) {
    let job = match store.load_job(work_item_id).await {
        Ok(job) => job,
        Err(err) => {
            tracing::error!(work_item_id, error = %err, "could not load work item");
            return;
        }
    };
    let request = GenerationRequest {
        base_url: job.base_url.clone(),
        model: job.model.clone(),
        prompt: render_prompt(&job.prompt_template, &job.input),
        max_tokens: u32::try_from(job.max_tokens).unwrap_or(u32::MAX),
        temperature: job.temperature,
        // Each repetition is its own sample: seed + repetition.
        seed: (job.seed + job.repetition) as u64,
    };
    let generation = client.generate(&request).await;
    // Errors are outcomes, never answers: they get no grade.
    let grade = (!generation.outcome.is_error())
        .then(|| grade_exact_match(&generation.output, &job.target));
    match store
        .record_result(work_item_id, &generation, grade.as_ref())
        .await
    {
        Ok(true) => {}
        Ok(false) => tracing::info!(work_item_id, "result already recorded by another worker"),
        Err(err) => tracing::error!(work_item_id, error = %err, "could not record result"),
    }
}

/// Works the queue until `shutdown` turns true, then finishes the requests in flight.
pub async fn run_worker(
    store: Arc<dyn Store>,
    config: WorkerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let client = ModelClient::new(config.attempt_timeout);
    let slots = Arc::new(Semaphore::new(config.max_in_flight));
    let lease_ms = i64::try_from(config.lease.as_millis()).unwrap_or(i64::MAX);
    tracing::info!(worker = %config.worker_id, backend = store.backend(), "worker started");
    while !*shutdown.borrow() {
        let free = slots.available_permits() as i64;
        let claimed = if free == 0 {
            Vec::new()
        } else {
            match store
                .claim_work(&config.worker_id, free.min(config.claim_batch), lease_ms)
                .await
            {
                Ok(ids) => ids,
                Err(err) => {
                    tracing::error!(error = %err, "could not claim work");
                    Vec::new()
                }
            }
        };
        if claimed.is_empty() {
            // Wait for a free slot or the poll interval, whichever says there may be work.
            tokio::select! {
                _ = tokio::time::sleep(config.idle_poll) => {}
                _ = shutdown.changed() => {}
            }
            continue;
        }
        for work_item_id in claimed {
            let permit = slots
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let store = store.clone();
            let client = client.clone();
            tokio::spawn(async move {
                process_item(store.as_ref(), &client, work_item_id).await;
                drop(permit);
            });
        }
    }
    // Drain: wait until every slot is free again.
    let _ = slots.acquire_many(config.max_in_flight as u32).await;
    tracing::info!(worker = %config.worker_id, "worker stopped");
}
