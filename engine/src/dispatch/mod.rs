//! Workers: claim result identities, answer them, grade them, record them.
//!
//! One worker per process runs a pipeline with no batch barrier:
//! - the claimer keeps up to `max_in_flight` identities going, taking them from the runs the
//!   fair-share policy picks, longest expected first, in leased batches, and never more per
//!   endpoint than its limiter lets out soon ([`load`]);
//! - each identity is answered (from the generation cache, or through the [`EndpointPool`]'s
//!   load control and retries) and graded as soon as its answer arrives;
//! - the committer records finished identities in batched transactions; the unique key on a
//!   result makes a late duplicate commit a no-op, so each identity counts exactly once;
//! - the heartbeat extends this worker's leases, returns expired leases of dead workers to the
//!   queue, and rebalances endpoint limits by the number of live workers.
//!
//! No transaction is ever held across a model call.

mod endpoints;
use arbiter_domain::fair_share;
use arbiter_domain::ids::{IdentityId, RunId};
mod judge_batches;
mod judging;
mod likelihood;
mod limiter;
mod load;
mod rolling;

pub use endpoints::{prometheus_sum, EndpointPool, RetryPolicy, Target};
pub(crate) use judging::{judge_pair_order, judge_verdict};
pub use limiter::Limiter;
pub use load::RunLoad;
use load::{held_per_run, load_of, Loads};

use crate::clients::model::GenerationRequest;
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::checkpoint::TokenPrices;
use arbiter_domain::expansion::{request_key, seed_for};
use arbiter_domain::grading::judge::JudgeSpec;
use arbiter_domain::grading::Grader;
use arbiter_domain::manifest::Manifest;
use arbiter_domain::prompt::request::RenderedPrompt;
use arbiter_domain::prompt::PromptRenderer;
use arbiter_store::{ActiveRun, CachedGeneration, ClaimedIdentity, FinishedIdentity, Store};
use fair_share::Candidate;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify, Semaphore};

/// How a worker process behaves; the defaults suit the embedded demo.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Unique name in leases, e.g. `host:pid:n`.
    pub worker_id: String,
    /// Identities this worker works on at once (requests plus results awaiting commit).
    pub max_in_flight: usize,
    /// Most identities claimed in one statement. Up to this many more than `max_in_flight`
    /// are held claimed, so the next batch is ready when slots free up and the endpoint never
    /// waits on a database round trip.
    pub claim_batch: usize,
    /// Most results recorded in one transaction.
    pub commit_batch: usize,
    /// How long a claimed identity stays ours without a heartbeat.
    pub lease: Duration,
    /// Sleep between claims when there is nothing to do.
    pub idle_poll: Duration,
    pub retry: RetryPolicy,
    /// Claim the longest expected identities first (the default); false claims in creation
    /// order, for comparison in the long-tail benchmark.
    pub longest_first: bool,
}

impl WorkerConfig {
    pub fn named(worker_id: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            worker_id: worker_id.into(),
            max_in_flight: 256,
            claim_batch: 256,
            commit_batch: 512,
            lease: Duration::from_secs(60),
            idle_poll: Duration::from_millis(200),
            retry: RetryPolicy::default(),
            longest_first: true,
        }
    }
}

/// What a worker needs to know about a run, read once from its frozen manifest.
struct RunSpec {
    manifest: Manifest,
    target: Target,
    /// Where the triage policy's judges are asked: (cheap, strong).
    judge_targets: (Option<Target>, Option<Target>),
    /// The eval's deterministic grader, compiled once (checked when the eval was saved).
    grader: Result<Grader, String>,
    /// The eval's prompt, compiled once (every item was rendered at launch).
    renderer: Result<PromptRenderer, String>,
    /// Whether the eval is of the original shape (an `{input}` template over four fields).
    original_shape: bool,
}

impl RunSpec {
    /// `prices` are the checkpoints' current prices by name (prices are not part of a
    /// manifest: changing one must not make a new run); `load` counts the run's requests.
    fn new(
        manifest: Manifest,
        prices: &HashMap<String, TokenPrices>,
        load: Arc<RunLoad>,
    ) -> RunSpec {
        let price_of = |checkpoint: &str| prices.get(checkpoint).copied().unwrap_or_default();
        load.set_endpoints(&manifest.endpoint_urls);
        let target = Target {
            endpoint_urls: manifest.endpoint_urls.clone(),
            fallback: manifest
                .fallback
                .as_ref()
                .map(|fallback| (fallback.endpoint_url.clone(), fallback.served_model.clone())),
            prices: price_of(&manifest.checkpoint_name),
            fallback_prices: manifest
                .fallback
                .as_ref()
                .map_or_else(TokenPrices::default, |fallback| {
                    price_of(&fallback.checkpoint_name)
                }),
            load: Some(load),
        };
        let judge_target = |judge: Option<&JudgeSpec>| {
            judge.map(|judge| Target {
                endpoint_urls: judge.endpoint_urls.clone(),
                fallback: None,
                prices: price_of(&judge.checkpoint_name),
                fallback_prices: TokenPrices::default(),
                load: None,
            })
        };
        let judge_targets = match &manifest.triage {
            Some(triage) => (
                judge_target(triage.cheap_judge.as_ref()),
                judge_target(triage.strong_judge.as_ref()),
            ),
            None => (None, None),
        };
        let grader = manifest
            .eval
            .grader
            .compile()
            .map_err(|problem| problem.to_string());
        let renderer = PromptRenderer::new(&manifest.eval.prompt).and_then(|renderer| {
            match &manifest.exemplars {
                Some(exemplars) => renderer.with_exemplars(exemplars, manifest.dataset_id),
                None => Ok(renderer),
            }
        });
        let prompt = &manifest.eval.prompt;
        let original_shape = prompt.syntax.is_placeholder()
            && prompt.system_prompt.is_empty()
            && prompt.few_shot.is_none()
            && prompt.mapping == arbiter_domain::fields::FieldMapping::default();
        RunSpec {
            manifest,
            target,
            judge_targets,
            grader,
            renderer,
            original_shape,
        }
    }

    /// The replica affinity of a long prompt: its first [`SHARED_PREFIX_AFFINITY_BYTES`]
    /// (a system prompt, few-shot exemplars, a document asked about several times). Prompts
    /// that start alike prefer one replica, whose prefix cache then holds that start, and
    /// prompts that start differently (MMLU's subjects, each with its exemplars) are spread
    /// over the replicas by their starts, so each replica's cache holds its share of them. The
    /// least loaded replica takes over while the preferred one is saturated.
    fn prefix_affinity(&self, rendered: &RenderedPrompt) -> Option<u64> {
        if self.original_shape {
            return None;
        }
        let text = rendered.body.as_text();
        let start = text.as_bytes().get(..SHARED_PREFIX_AFFINITY_BYTES)?;
        (text.len() > start.len()).then(|| xxhash_rust::xxh3::xxh3_64(start))
    }

    /// One identity's prompt (a later turn of a conversation with the model's own earlier
    /// answers) and how the eval reads its item; an error says why it cannot be rendered
    /// (which the launch's check makes all but impossible, short of answers too long to send).
    fn render(&self, job: &ClaimedIdentity) -> Result<RenderedPrompt, String> {
        let renderer = self.renderer.as_ref().map_err(Clone::clone)?;
        let turn = usize::try_from(job.turn).unwrap_or(0);
        renderer
            .render_turn(&job.item, turn, &job.earlier_answers)
            .map_err(|problem| match job.turn {
                1 => format!("item `{}` {problem}", job.case_id),
                turn => format!("turn {turn} of item `{}` {problem}", job.case_id),
            })
    }
}

/// An identity's cache key and cached answer. A first turn's were found at launch; a later
/// turn of a conversation is keyed here, now that its request (holding the model's earlier
/// answers) is known, and answered from the cache when an identical request was.
async fn cache_entry(
    job: &ClaimedIdentity,
    spec: &RunSpec,
    rendered: &Result<RenderedPrompt, String>,
    store: &Arc<dyn Store>,
) -> (Option<String>, Option<CachedGeneration>) {
    let (None, Ok(rendered)) = (&job.generation_key, rendered) else {
        return (job.generation_key.clone(), job.cached.clone());
    };
    let settings = &spec.manifest.eval.generation;
    let key = request_key(
        &spec.manifest.fingerprint,
        &rendered.body,
        settings,
        job.repetition,
    );
    let cached = match store.cached_generations(std::slice::from_ref(&key)).await {
        Ok(found) => found.into_iter().next().map(|(_, hit)| hit),
        Err(err) => {
            tracing::warn!(error = %err, "could not read the generation cache; sending the request");
            None
        }
    };
    (Some(key), cached)
}

/// How much of a prompt's start (about 256 tokens) names the prefix it may share with others.
const SHARED_PREFIX_AFFINITY_BYTES: usize = 1_024;

/// The replica affinity of a conversation: every turn of one conversation (case and
/// repetition) prefers the same replica, so the server's prefix cache holds its earlier turns.
fn conversation_affinity(job: &ClaimedIdentity, rendered: &RenderedPrompt) -> Option<u64> {
    (rendered.item.input.turn_count() > 1).then(|| {
        xxhash_rust::xxh3::xxh3_64(format!("{}\u{0}{}", job.case_id, job.repetition).as_bytes())
    })
}

/// Answers one identity: from the generation cache, or through the endpoint pool.
async fn answer(
    job: &ClaimedIdentity,
    cached: Option<&CachedGeneration>,
    spec: &RunSpec,
    rendered: &Result<RenderedPrompt, String>,
    pool: &Arc<EndpointPool>,
) -> (Generation, Option<IdentityId>) {
    let (generation, cached_from) = match (cached, rendered) {
        (Some(cached), rendered) => {
            let mut generation = cached.to_generation();
            if let (Some(likelihood), Ok(rendered)) =
                (&spec.manifest.eval.prompt.likelihood, rendered)
            {
                likelihood.reanswer(&mut generation, &rendered.item.targets);
            }
            (generation, Some(cached.source_identity_id))
        }
        (None, Err(problem)) => (
            Generation {
                outcome: Outcome::EndpointError,
                error: Some(format!("not sent: {problem}")),
                error_category: Some(ErrorCategory::BadRequest),
                ..Generation::default()
            },
            None,
        ),
        (None, Ok(rendered)) if spec.manifest.eval.prompt.likelihood.is_some() => {
            let likelihood = spec.manifest.eval.prompt.likelihood.as_ref();
            let likelihood = likelihood.expect("checked by the guard");
            (
                likelihood::score_choices(job, likelihood, rendered, spec, pool).await,
                None,
            )
        }
        (None, Ok(rendered)) if spec.manifest.eval.prompt.rolling.is_some() => {
            let rolling = spec.manifest.eval.prompt.rolling.as_ref();
            let rolling = rolling.expect("checked by the guard");
            let prefix = spec.manifest.rolling_prefix_token;
            (
                rolling::score_document(job, rolling, prefix, rendered, spec, pool).await,
                None,
            )
        }
        (None, Ok(rendered)) => {
            let settings = &spec.manifest.eval.generation;
            let request = GenerationRequest {
                model: spec.manifest.served_model.clone(),
                body: rendered.body.clone(),
                max_tokens: settings.max_tokens,
                temperature: settings.temperature,
                seed: seed_for(settings, job.repetition),
                sampling: settings.sampling.clone(),
                scoring: crate::clients::model::Scoring::Generate,
                top_logprobs: None,
            };
            // The planner's estimate, stored on the identity, is the request's token cost.
            let cost = u64::try_from(job.cost).unwrap_or(0);
            let affinity =
                conversation_affinity(job, rendered).or_else(|| spec.prefix_affinity(rendered));
            (
                pool.generate(&spec.target, &request, cost, affinity).await,
                None,
            )
        }
    };
    (generation, cached_from)
}

/// Records finished identities in batches, as many as have arrived while the last batch was
/// being written.
async fn commit_loop(
    store: Arc<dyn Store>,
    mut finished: mpsc::Receiver<FinishedIdentity>,
    batch_max: usize,
) {
    let mut batch = Vec::with_capacity(batch_max);
    while let Some(first) = finished.recv().await {
        batch.push(first);
        while batch.len() < batch_max {
            match finished.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        let mut failures = 0;
        loop {
            match store.record_results(&batch).await {
                Ok(outcome) => {
                    for run in outcome.runs {
                        if let Err(err) = store.finish_run_if_done(run).await {
                            tracing::warn!(run = run.get(), error = %err, "could not check run completion");
                        }
                    }
                    break;
                }
                Err(err) => {
                    failures += 1;
                    tracing::error!(error = %err, items = batch.len(), failures, "could not record results");
                    if failures >= 10 {
                        // The leases expire and other workers redo these identities.
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200 * failures)).await;
                }
            }
        }
        batch.clear();
    }
}

/// Keeps this worker's leases alive, returns dead workers' leases to the queue, and shares
/// endpoint limits among the live workers.
async fn heartbeat_loop(
    store: Arc<dyn Store>,
    config: WorkerConfig,
    pool: Arc<EndpointPool>,
    loads: Loads,
    mut shutdown: watch::Receiver<bool>,
) {
    let lease_ms = i64::try_from(config.lease.as_millis()).unwrap_or(i64::MAX);
    let period = config.lease / 3;
    loop {
        let holding: usize = held_per_run(&loads).values().sum();
        match store
            .heartbeat(&config.worker_id, holding as i64, lease_ms, lease_ms)
            .await
        {
            Ok(live) => pool.set_live_workers(live as usize),
            Err(err) => tracing::warn!(error = %err, "heartbeat failed"),
        }
        // Keys bound to hosts by a lead since the last beat apply to this worker's requests.
        if let Err(err) = crate::catalog::refresh_key_bindings(store.as_ref()).await {
            tracing::warn!(error = %err, "could not read endpoint key bindings");
        }
        match store.reap_expired_leases().await {
            Ok(0) => {}
            Ok(reaped) => tracing::info!(reaped, "returned expired leases to the queue"),
            Err(err) => tracing::warn!(error = %err, "could not reap expired leases"),
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Claims after which an identity whose judge stays unreachable goes to a human after all.
const MAX_CLAIMS_WHILE_JUDGES_FAIL: i64 = 3;

/// What the claimer knows about runs between database round trips.
struct ClaimState {
    specs: HashMap<RunId, Arc<RunSpec>>,
    active: Vec<ActiveRun>,
    active_read_at: Option<Instant>,
    /// Runs that recently had nothing left to claim, and until when to skip them.
    drained_until: HashMap<RunId, Instant>,
}

const ACTIVE_RUNS_TTL: Duration = Duration::from_millis(250);
const DRAINED_BACKOFF: Duration = Duration::from_millis(500);

/// Works the queue until `shutdown` turns true, then finishes and records what it holds.
pub async fn run_worker(
    store: Arc<dyn Store>,
    config: WorkerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    tracing::info!(worker = %config.worker_id, backend = store.backend(), "worker started");
    let pool = EndpointPool::new(store.clone(), config.retry.clone());
    let judge_batches = Arc::new(judge_batches::JudgeBatches::default());
    // `slots` bounds identities held (claimed, running or awaiting commit); `running` bounds
    // those being answered. The difference is the prefetched next batch.
    let held_max = config.max_in_flight + config.claim_batch;
    let slots = Arc::new(Semaphore::new(held_max));
    let running = Arc::new(Semaphore::new(config.max_in_flight));
    let loads: Loads = Arc::default();
    // Rung whenever the model answers an identity: room for a claim may have opened.
    let answered = Arc::new(Notify::new());
    // Room for two commit batches: answers keep arriving while one batch is being written,
    // and a full channel would hold up the slots (and so the endpoint) behind the database.
    let (finished_tx, finished_rx) =
        mpsc::channel((2 * config.commit_batch).max(config.max_in_flight).max(1));
    let committer = tokio::spawn(commit_loop(store.clone(), finished_rx, config.commit_batch));
    let (heartbeat_stop, heartbeat_shutdown) = watch::channel(false);
    let heartbeat = tokio::spawn(heartbeat_loop(
        store.clone(),
        config.clone(),
        pool.clone(),
        loads.clone(),
        heartbeat_shutdown.clone(),
    ));
    let sampler = tokio::spawn(load::sample_loop(
        store.clone(),
        config.worker_id.clone(),
        loads.clone(),
        pool.clone(),
        heartbeat_shutdown,
    ));
    let lease_ms = i64::try_from(config.lease.as_millis()).unwrap_or(i64::MAX);
    let min_claim = (config.max_in_flight / 8).clamp(1, (config.claim_batch / 2).max(1)) as u32;
    let mut state = ClaimState {
        specs: HashMap::new(),
        active: Vec::new(),
        active_read_at: None,
        drained_until: HashMap::new(),
    };

    while !*shutdown.borrow() {
        // Wait until a useful batch of slots is free (claims are transactions: a claim per
        // freed slot would cost more than the work), then claim as many as are free.
        let mut slots_held = tokio::select! {
            permits = slots.clone().acquire_many_owned(min_claim) => permits.expect("the semaphore is never closed"),
            _ = shutdown.changed() => break,
        };
        let extra = slots
            .available_permits()
            .min(config.claim_batch.saturating_sub(min_claim as usize));
        if extra > 0 {
            if let Ok(more) = slots.clone().try_acquire_many_owned(extra as u32) {
                slots_held.merge(more);
            }
        }
        let free = slots_held.num_permits();
        let round = Claim {
            store: &store,
            config: &config,
            pool: &pool,
            loads: &loads,
            least: min_claim as usize,
        };
        let (claimed, endpoints_full) = round.claim(&mut state, free, lease_ms).await;
        if claimed.is_empty() {
            drop(slots_held);
            if endpoints_full {
                // Work is waiting for the endpoints: claim as soon as an answer makes room.
                tokio::select! {
                    _ = answered.notified() => {}
                    _ = tokio::time::sleep(config.idle_poll) => {}
                    _ = shutdown.changed() => {}
                }
            } else {
                // Idle: look for newly launched runs at the next poll, not a cache period
                // later.
                state.active_read_at = None;
                tokio::select! {
                    _ = tokio::time::sleep(config.idle_poll) => {}
                    _ = shutdown.changed() => {}
                }
            }
            continue;
        }
        let claimed_at = Instant::now();
        for (job, mut held) in claimed {
            let permit = slots_held
                .split(1)
                .expect("one slot was taken for each claimed identity");
            let Some(spec) = state.specs.get(&job.run_id).cloned() else {
                // Never: only runs with a spec are claimed from (`held` releases it).
                continue;
            };
            let pool = pool.clone();
            let judge_batches = judge_batches.clone();
            let store = store.clone();
            let worker_id = config.worker_id.clone();
            let finished_tx = finished_tx.clone();
            let running = running.clone();
            let answered = answered.clone();
            tokio::spawn(async move {
                // The semaphore queues waiters in order, so claims start longest first.
                let answering = running.acquire().await;
                let rendered = spec.render(&job);
                let (generation_key, cached) = cache_entry(&job, &spec, &rendered, &store).await;
                // A later turn's key is known only now; audit sampling draws by it too.
                let mut job = job;
                job.generation_key = generation_key;
                let waited_before_sending = claimed_at.elapsed();
                let (mut generation, cached_from) =
                    answer(&job, cached.as_ref(), &spec, &rendered, &pool).await;
                let sent = cached_from.is_none() && rendered.is_ok();
                if sent {
                    generation.waited_ms = generation.waited_ms.saturating_add(
                        i64::try_from(waited_before_sending.as_millis()).unwrap_or(i64::MAX),
                    );
                }
                held.answered(&generation, sent);
                answered.notify_one();
                // A later turn waits on this one when the item is a conversation with turns
                // left (unknown when it could not be rendered: then any later turn stops).
                let next_turn_waits = rendered.as_ref().map_or(true, |rendered| {
                    usize::try_from(job.turn).unwrap_or(0) < rendered.item.input.turn_count()
                });
                // Judges are other endpoints with their own limits: while it is judged, the
                // identity keeps its held slot but frees its request slot for the model under
                // test.
                drop(answering);
                let graded = judging::grade_answer(
                    &job,
                    rendered.ok(),
                    &generation,
                    &spec,
                    &store,
                    (&pool, &judge_batches),
                )
                .await;
                let grading = match graded.grader_unavailable {
                    // A judge outage is not a reason for human work: the identity goes back to
                    // the queue to be answered and judged again, up to a few claims.
                    Some(outage) if job.claims < MAX_CLAIMS_WHILE_JUDGES_FAIL => {
                        tracing::warn!(work_item = job.identity_id.get(), %outage, "judge unavailable; returning the identity to the queue");
                        if let Err(err) = store.release_lease(&worker_id, job.identity_id).await {
                            tracing::warn!(error = %err, "could not return the identity; its lease will expire");
                        }
                        drop((held, permit));
                        return;
                    }
                    // Out of claims: grading already escalated it (routed by the policy); the
                    // reason says how often the judge was tried.
                    Some(outage) => {
                        let mut grading = graded.grading;
                        if let Some(task) = grading.human.as_mut() {
                            task.reason =
                                format!("{outage}, on {} claims of this item", job.claims);
                        }
                        grading
                    }
                    None => graded.grading,
                };
                let finished = FinishedIdentity {
                    identity_id: job.identity_id,
                    generation,
                    grading,
                    generation_key: job.generation_key,
                    cached_from,
                    next_turn_waits,
                };
                let _ = finished_tx.send(finished).await;
                held.finished();
                drop(permit);
            });
        }
        // Slots left over (fewer identities than slots) go back now.
        drop(slots_held);
    }

    // Drain: every slot back means every identity has been handed to the committer.
    let _all = slots.acquire_many(held_max as u32).await;
    drop(finished_tx);
    let _ = committer.await;
    let _ = heartbeat_stop.send(true);
    let _ = heartbeat.await;
    let _ = sampler.await;
    if let Err(err) = store.deregister_worker(&config.worker_id).await {
        tracing::warn!(error = %err, "could not deregister the worker");
    }
    tracing::info!(worker = %config.worker_id, "worker stopped");
}

/// One claim round's view of this worker.
struct Claim<'a> {
    store: &'a Arc<dyn Store>,
    config: &'a WorkerConfig,
    pool: &'a Arc<EndpointPool>,
    loads: &'a Loads,
    /// The fewest identities worth a claim statement.
    least: usize,
}

impl Claim<'_> {
    /// Claims up to `free` identities from the runs the fair-share policy picks, no more per
    /// group of endpoints than they can take soon. Also says whether a run with work was
    /// passed over because its endpoints were full.
    async fn claim(
        &self,
        state: &mut ClaimState,
        free: usize,
        lease_ms: i64,
    ) -> (Vec<(ClaimedIdentity, load::Held)>, bool) {
        let now = Instant::now();
        if state
            .active_read_at
            .is_none_or(|read| now - read > ACTIVE_RUNS_TTL)
        {
            match self.store.active_runs().await {
                Ok(active) => {
                    state.active = active;
                    state.active_read_at = Some(now);
                }
                Err(err) => {
                    tracing::error!(error = %err, "could not list active runs");
                    return (Vec::new(), false);
                }
            }
        }
        state.drained_until.retain(|_, until| *until > now);
        let open: Vec<ActiveRun> = state
            .active
            .iter()
            .filter(|run| !state.drained_until.contains_key(&run.id))
            .cloned()
            .collect();
        self.read_specs(state, &open).await;
        let rooms = self.rooms(state, &open).await;
        let holding = held_per_run(self.loads);
        let room_of = |run: &ActiveRun| {
            let spec = state.specs.get(&run.id)?;
            rooms.get(&endpoint_group(spec)).copied()
        };
        let endpoints_full = open.iter().any(|run| room_of(run) == Some(0));
        let candidates: Vec<Candidate> = open
            .iter()
            .filter(|run| room_of(run).is_some_and(|room| room > 0))
            .map(|run| Candidate {
                run_id: run.id,
                priority: run.priority,
                team: run.team.clone(),
                in_flight: holding.get(&run.id).copied().unwrap_or(0),
            })
            .collect();
        let weights: HashMap<&str, f64> = state
            .active
            .iter()
            .map(|run| (run.team.as_str(), run.team_weight))
            .collect();
        let team_weight = |team: &str| weights.get(team).copied().unwrap_or(1.0);
        let mut rooms = rooms;
        let mut claimed = Vec::new();
        for (run_id, quota) in fair_share::allocate(free, &candidates, team_weight) {
            let Some(spec) = state.specs.get(&run_id) else {
                continue;
            };
            let room = rooms.entry(endpoint_group(spec)).or_default();
            let quota = quota.min(*room);
            if quota == 0 {
                continue;
            }
            match self
                .store
                .claim_identities(
                    &self.config.worker_id,
                    run_id,
                    quota as i64,
                    lease_ms,
                    self.config.longest_first,
                )
                .await
            {
                Ok(jobs) => {
                    if jobs.len() < quota {
                        state.drained_until.insert(run_id, now + DRAINED_BACKOFF);
                    }
                    *room -= jobs.len();
                    let held = load_of(self.loads, run_id).claimed(jobs.len());
                    claimed.extend(jobs.into_iter().zip(held));
                }
                Err(err) => {
                    tracing::error!(run_id = run_id.get(), error = %err, "could not claim work")
                }
            }
        }
        (claimed, endpoints_full)
    }

    /// Reads the frozen manifest of each run not seen before.
    async fn read_specs(&self, state: &mut ClaimState, runs: &[ActiveRun]) {
        let mut prices: Option<HashMap<String, TokenPrices>> = None;
        for run in runs {
            let std::collections::hash_map::Entry::Vacant(entry) = state.specs.entry(run.id) else {
                continue;
            };
            if prices.is_none() {
                prices = Some(match self.store.list_checkpoints().await {
                    Ok(checkpoints) => checkpoints
                        .into_iter()
                        .map(|checkpoint| (checkpoint.name, checkpoint.prices))
                        .collect(),
                    Err(err) => {
                        tracing::warn!(error = %err, "could not read checkpoint prices; costs unknown");
                        HashMap::new()
                    }
                });
            }
            match self.store.run_manifest(run.id).await {
                Ok(Some(manifest)) => {
                    let prices = prices.as_ref().expect("read above");
                    let load = load_of(self.loads, run.id);
                    entry.insert(Arc::new(RunSpec::new(manifest, prices, load)));
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::error!(run_id = run.id.get(), error = %err, "could not read the run's manifest");
                }
            }
        }
    }

    /// Room per group of endpoints: what their limiters let out soon, less what this worker's
    /// runs on them hold unanswered.
    async fn rooms(&self, state: &ClaimState, runs: &[ActiveRun]) -> HashMap<Vec<String>, usize> {
        let mut unanswered: HashMap<Vec<String>, usize> = HashMap::new();
        for (run_id, spec) in &state.specs {
            let held = load_of(self.loads, *run_id).unanswered();
            *unanswered.entry(endpoint_group(spec)).or_default() += held;
        }
        let mut rooms = HashMap::new();
        for run in runs {
            let Some(spec) = state.specs.get(&run.id) else {
                continue;
            };
            let group = endpoint_group(spec);
            if rooms.contains_key(&group) {
                continue;
            }
            let limit = self.pool.request_limit(&group).await;
            let waiting = unanswered.get(&group).copied().unwrap_or(0);
            rooms.insert(group, load::room(limit, waiting, self.least));
        }
        rooms
    }
}

/// The endpoints a run's requests share with other runs', as a key.
fn endpoint_group(spec: &RunSpec) -> Vec<String> {
    let mut urls = spec.target.endpoint_urls.clone();
    urls.sort();
    urls
}
