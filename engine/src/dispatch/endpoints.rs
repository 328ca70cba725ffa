//! The endpoints a worker talks to: load control per endpoint, replicas balanced by least
//! outstanding requests, retries with backoff, and the fallback checkpoint.
//!
//! Every request a worker sends goes through [`EndpointPool::generate`], which owns the retry
//! policy: exponential backoff with jitter for transient failures, none for permanent ones, a
//! timeout per attempt and per item, and each failed attempt recorded on the identity.

use super::limiter::Limiter;
use super::load::RunLoad;
use crate::clients::egress::{read_capped, GuardedClient};
use crate::clients::model::{server_root, AttemptFailure, GenerationRequest, ModelClient};
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::checkpoint::{EndpointLimits, TokenPrices};
use arbiter_store::Store;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How hard to try one identity.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    pub attempt_timeout: Duration,
    /// All attempts of one identity together, waits included.
    pub item_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            base_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(10),
            attempt_timeout: Duration::from_secs(120),
            item_timeout: Duration::from_secs(600),
        }
    }
}

impl RetryPolicy {
    /// Full-jitter exponential backoff before attempt `attempt + 1`.
    fn backoff(&self, attempt: u32) -> Duration {
        let exponential = self
            .base_backoff
            .saturating_mul(1 << attempt.min(16))
            .min(self.max_backoff);
        let jitter = rand::random::<f64>();
        exponential.mul_f64(0.5 + jitter / 2.0)
    }
}

/// Where a run's requests go: the checkpoint's endpoints and an optional fallback, with what
/// each charges (a generation's cost is its tokens at the prices of the checkpoint that
/// answered).
#[derive(Clone, Debug)]
pub struct Target {
    pub endpoint_urls: Vec<String>,
    /// (endpoint URL, served model) of the fallback checkpoint.
    pub fallback: Option<(String, String)>,
    pub prices: TokenPrices,
    pub fallback_prices: TokenPrices,
    /// The run's load, which counts its requests at the endpoints (the model under test's
    /// target only; judges' calls are not charted).
    pub load: Option<Arc<RunLoad>>,
}

/// One of an endpoint's API keys, with the state a provider keeps per key: its own rate
/// limit (found by the same slow start and halving as the endpoint's) and `Retry-After` pause.
struct ApiKey {
    /// Sent as a bearer token (never logged).
    secret: String,
    limiter: Limiter,
    outstanding: AtomicUsize,
}

/// One endpoint as this worker sees it.
pub struct Endpoint {
    pub url: String,
    /// The API keys requests are spread over, resolved from the store's reference when the
    /// endpoint was first used; empty when it takes none. With one key, a 429 slows the whole
    /// endpoint as before; with several, it slows only the key that drew it.
    keys: Vec<ApiKey>,
    /// Where the next tie between keys starts looking.
    key_turn: AtomicUsize,
    pub limiter: Limiter,
    outstanding: AtomicUsize,
    limits: EndpointLimits,
    /// The server's queue (`num_requests_waiting`) as last read from its `/metrics`, as
    /// `f64` bits; NaN until read.
    server_waiting: AtomicU64,
}

impl Endpoint {
    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    fn server_waiting(&self) -> Option<f64> {
        let waiting = f64::from_bits(self.server_waiting.load(Ordering::Relaxed));
        (!waiting.is_nan()).then_some(waiting)
    }

    /// Whether each key carries its own rate limit (several keys), rather than the endpoint.
    fn limited_per_key(&self) -> bool {
        self.keys.len() > 1
    }

    /// The key the next request goes out with: one not waiting out a `Retry-After` first, then
    /// the one with the fewest requests outstanding.
    /// Ties go round the keys in turn, so requests sent one at a time still use them all.
    fn pick_key(&self) -> Option<&ApiKey> {
        let count = self.keys.len();
        let turn = self.key_turn.fetch_add(1, Ordering::Relaxed);
        (0..count)
            .map(|offset| &self.keys[(turn + offset) % count.max(1)])
            .min_by_key(|key| {
                (
                    key.limiter.paused_for(),
                    key.outstanding.load(Ordering::Relaxed),
                )
            })
    }

    /// Whether a key could send at once (several keys, one of them not paused): a retry after
    /// a key's 429 then goes out with that key instead of waiting out the `Retry-After`.
    fn has_a_key_ready(&self) -> bool {
        self.limited_per_key()
            && self
                .keys
                .iter()
                .any(|key| key.limiter.paused_for().is_zero())
    }
}

/// How long one of several keys that the endpoint refused (401, 403) is left unused.
const REFUSED_KEY_PAUSE: Duration = Duration::from_secs(600);

/// Requests a preferred replica may hold beyond the least loaded's (and a quarter more)
/// before its affinity gives way.
const AFFINITY_SLACK: usize = 4;

/// Counts one request on an `outstanding` counter until dropped, so an attempt cancelled
/// mid-way (a dropped future) is uncounted too.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(counter: &'a AtomicUsize) -> Counted<'a> {
        counter.fetch_add(1, Ordering::Relaxed);
        Counted(counter)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The key a request goes out with, counted on it, with its slot when keys carry their own
/// rate limits.
struct KeySlot<'a> {
    key: &'a ApiKey,
    _counted: Counted<'a>,
    _permit: Option<super::limiter::Permit<'a>>,
}

/// How often a request waiting for one key's slot looks again at the keys: a key paused by a
/// 429 while the request waited must not keep it waiting when another key is free.
const KEY_RECHECK: Duration = Duration::from_millis(250);

/// Picks the key for a request and, with several keys, waits for a slot of its own on one.
async fn key_slot(endpoint: &Endpoint) -> Option<KeySlot<'_>> {
    loop {
        let key = endpoint.pick_key()?;
        let counted = Counted::new(&key.outstanding);
        if !endpoint.limited_per_key() {
            return Some(KeySlot {
                key,
                _counted: counted,
                _permit: None,
            });
        }
        tokio::select! {
            permit = key.limiter.acquire(1) => {
                return Some(KeySlot { key, _counted: counted, _permit: Some(permit) });
            }
            // Pick again: the keys' pauses and loads may have changed meanwhile.
            _ = tokio::time::sleep(KEY_RECHECK) => {}
        }
    }
}

/// All endpoints of one worker process.
pub struct EndpointPool {
    client: ModelClient,
    store: Arc<dyn Store>,
    policy: RetryPolicy,
    endpoints: Mutex<HashMap<String, Arc<Endpoint>>>,
    live_workers: AtomicUsize,
}

/// A failed attempt as recorded on the identity.
fn log_entry(endpoint: &str, failure: &AttemptFailure, elapsed: Duration) -> serde_json::Value {
    json!({
        "endpoint": endpoint,
        "category": failure.category.as_str(),
        "status": failure.status,
        "ms": elapsed.as_millis() as u64,
        "message": failure.message,
    })
}

impl EndpointPool {
    pub fn new(store: Arc<dyn Store>, policy: RetryPolicy) -> Arc<EndpointPool> {
        Arc::new(EndpointPool {
            client: ModelClient::new(),
            store,
            policy,
            endpoints: Mutex::new(HashMap::new()),
            live_workers: AtomicUsize::new(1),
        })
    }

    fn share(total: i64, workers: usize) -> usize {
        (total.max(1) as usize).div_ceil(workers.max(1))
    }

    /// Each worker gets an equal share of every endpoint's limits.
    pub fn set_live_workers(&self, workers: usize) {
        let workers = workers.max(1);
        if self.live_workers.swap(workers, Ordering::Relaxed) == workers {
            return;
        }
        let endpoints: Vec<Arc<Endpoint>> = self.lock().values().cloned().collect();
        for endpoint in endpoints {
            let ceiling = Self::share(endpoint.limits.max_in_flight, workers);
            endpoint.limiter.set_ceiling(ceiling);
            for key in &endpoint.keys {
                key.limiter.set_ceiling(ceiling);
            }
            endpoint.limiter.set_token_budget(
                endpoint
                    .limits
                    .token_budget
                    .map(|budget| Self::share(budget, workers) as u64),
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Endpoint>>> {
        self.endpoints
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The endpoint at `url`, created (with its limits and `/metrics` watcher) on first use.
    pub async fn endpoint(self: &Arc<Self>, url: &str) -> Arc<Endpoint> {
        if let Some(endpoint) = self.lock().get(url) {
            return endpoint.clone();
        }
        let limits = self.store.endpoint_limits(url).await.unwrap_or_else(|err| {
            tracing::warn!(url, error = %err, "could not read endpoint limits; using defaults");
            EndpointLimits::default()
        });
        let secrets = match self.store.endpoint_api_key_ref(url).await {
            Ok(stored) => crate::secrets::process()
                .resolve_endpoint_keys(stored.as_deref(), url)
                .unwrap_or_else(|problem| {
                    tracing::warn!(url, %problem, "endpoint API key not sent; calling without one");
                    Vec::new()
                }),
            Err(err) => {
                tracing::warn!(url, error = %err, "could not read the endpoint's API key reference");
                Vec::new()
            }
        };
        let workers = self.live_workers.load(Ordering::Relaxed);
        let ceiling = Self::share(limits.max_in_flight, workers);
        let created = Arc::new(Endpoint {
            url: url.to_string(),
            keys: secrets
                .into_iter()
                .map(|secret| ApiKey {
                    secret,
                    limiter: Limiter::new(ceiling, None),
                    outstanding: AtomicUsize::new(0),
                })
                .collect(),
            key_turn: AtomicUsize::new(0),
            limiter: Limiter::new(
                ceiling,
                limits
                    .token_budget
                    .map(|budget| Self::share(budget, workers) as u64),
            ),
            outstanding: AtomicUsize::new(0),
            limits,
            server_waiting: AtomicU64::new(f64::NAN.to_bits()),
        });
        let endpoint = {
            let mut endpoints = self.lock();
            match endpoints.get(url) {
                Some(existing) => return existing.clone(),
                None => {
                    endpoints.insert(url.to_string(), created.clone());
                    created
                }
            }
        };
        tokio::spawn(watch_server_queue(
            Arc::downgrade(&endpoint),
            self.client.http().clone(),
            self.store.clone(),
        ));
        endpoint
    }

    /// The replica an affinity keeps to: highest random weight (rendezvous hashing) of the
    /// affinity and each URL, so it stays put as long as its replica is listed; while that
    /// replica is saturated, or holds more than a quarter (and [`AFFINITY_SLACK`]) over the
    /// least loaded's requests, the least loaded instead (a turn never queues behind a busy
    /// replica while another is idle, where waiting out its deadline would stop the rest of
    /// the conversation).
    async fn pick_for(self: &Arc<Self>, urls: &[String], affinity: u64) -> Arc<Endpoint> {
        let preferred = urls
            .iter()
            .max_by_key(|url| xxhash_rust::xxh3::xxh3_64_with_seed(url.as_bytes(), affinity))
            .expect("a run has at least one endpoint");
        let preferred = self.endpoint(preferred).await;
        let least = self.pick(urls).await;
        // Bounded load: the preferred replica while it has room and is not far busier than the
        // least loaded, so a run or judge that all prefers one replica does not leave the
        // others idle below their limits.
        let bound = least.outstanding() + least.outstanding() / 4 + AFFINITY_SLACK;
        if preferred.outstanding() < preferred.limiter.limit().max(1)
            && preferred.outstanding() <= bound
        {
            return preferred;
        }
        // Otherwise another replica only when it is less loaded (when all are full, moving
        // gains nothing and loses the prefix cache).
        if least.outstanding() < preferred.outstanding() {
            least
        } else {
            preferred
        }
    }

    /// This worker's request limit over `urls` together (each endpoint's current limit).
    pub async fn request_limit(self: &Arc<Self>, urls: &[String]) -> usize {
        let mut limit = 0;
        for url in urls {
            limit += self.endpoint(url).await.limiter.limit();
        }
        limit
    }

    /// Requests the servers at `urls` reported waiting in their own queues at their last
    /// reading, summed; `None` when none of them reports a queue (or none was used yet).
    pub fn server_waiting(&self, urls: &[String]) -> Option<f64> {
        let endpoints = self.lock();
        urls.iter()
            .filter_map(|url| endpoints.get(url)?.server_waiting())
            .fold(None, |sum, waiting| Some(sum.unwrap_or(0.0) + waiting))
    }

    /// The least loaded of a checkpoint's endpoints.
    async fn pick(self: &Arc<Self>, urls: &[String]) -> Arc<Endpoint> {
        let mut best: Option<Arc<Endpoint>> = None;
        for url in urls {
            let endpoint = self.endpoint(url).await;
            if best
                .as_ref()
                .is_none_or(|current| endpoint.outstanding() < current.outstanding())
            {
                best = Some(endpoint);
            }
        }
        best.expect("a run has at least one endpoint")
    }

    /// One attempt through an endpoint's limiter, keeping its counters and load signals; the
    /// time spent waiting for the limiter's slot is added to `waited`.
    async fn attempt(
        &self,
        endpoint: &Endpoint,
        request: &GenerationRequest,
        cost: u64,
        deadline: Instant,
        (load, waited): (Option<&RunLoad>, &mut Duration),
    ) -> Result<Generation, AttemptFailure> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let _outstanding = Counted::new(&endpoint.outstanding);
        let waiting_since = Instant::now();
        // The key's slot first: while it waits out its own `Retry-After`, it holds none of the
        // endpoint's slots that the other keys could use.
        let slot = tokio::time::timeout(remaining, async {
            let key = key_slot(endpoint).await;
            (key, endpoint.limiter.acquire(cost).await)
        })
        .await;
        *waited += waiting_since.elapsed();
        let (result, key) = match slot {
            Err(_) => (
                Err(AttemptFailure {
                    category: ErrorCategory::Timeout,
                    status: None,
                    message: format!("waited too long for a free slot on {}", endpoint.url),
                    retry_after: None,
                }),
                None,
            ),
            Ok((key, _permit)) => {
                let _sending = load.map(RunLoad::sending);
                let timeout = self
                    .policy
                    .attempt_timeout
                    .min(deadline.saturating_duration_since(Instant::now()))
                    .max(Duration::from_millis(1));
                let secret = key.as_ref().map(|slot| slot.key.secret.as_str());
                let result = self
                    .client
                    .attempt(&endpoint.url, secret, request, timeout)
                    .await;
                (result, key)
            }
        };
        let key_limiter = key
            .as_ref()
            .filter(|_| endpoint.limited_per_key())
            .map(|slot| &slot.key.limiter);
        match &result {
            Ok(_) => {
                endpoint.limiter.on_success();
                if let Some(limiter) = key_limiter {
                    limiter.on_success();
                }
            }
            Err(failure) if failure.category == ErrorCategory::RateLimited => {
                key_limiter
                    .unwrap_or(&endpoint.limiter)
                    .on_overload(failure.retry_after);
            }
            // One of several keys refused (revoked, or out of credit): set aside for a while,
            // so the others carry the endpoint's requests.
            Err(failure) if failure.category == ErrorCategory::Unauthorized => {
                if let Some(limiter) = key_limiter {
                    tracing::warn!(
                        url = %endpoint.url,
                        status = ?failure.status,
                        "one of the endpoint's API keys was refused; it is set aside for ten minutes"
                    );
                    limiter.on_overload(Some(REFUSED_KEY_PAUSE));
                }
            }
            Err(_) => {}
        }
        result
    }

    /// Answers one request: retries transient failures on the least loaded replica other than
    /// the one that failed (where there is another), then tries the fallback once; returns the
    /// final generation with every failed attempt logged. With an `affinity` (the turns of one
    /// conversation, prompts with the same long start, one judge's calls), the first attempt
    /// goes to the replica that affinity keeps to while it has room.
    pub async fn generate(
        self: &Arc<Self>,
        target: &Target,
        request: &GenerationRequest,
        cost: u64,
        affinity: Option<u64>,
    ) -> Generation {
        let started = Instant::now();
        let deadline = started + self.policy.item_timeout;
        let load = target.load.as_deref();
        let mut waited = Duration::ZERO;
        let mut log: Vec<serde_json::Value> = Vec::new();
        let mut last_failure: Option<AttemptFailure> = None;
        let mut attempts: u32 = 0;
        // The replica the last attempt failed on.
        let mut failed_on: Option<String> = None;
        while attempts < self.policy.max_attempts && Instant::now() < deadline {
            attempts += 1;
            let endpoint = match (affinity, &failed_on) {
                (Some(affinity), None) => self.pick_for(&target.endpoint_urls, affinity).await,
                // A retry goes to another replica where there is one: a dead server refuses
                // connections at once, so it always has the fewest requests outstanding and
                // least loaded alone would send every retry back to it.
                (_, Some(failed)) => {
                    let others: Vec<String> = target
                        .endpoint_urls
                        .iter()
                        .filter(|url| *url != failed)
                        .cloned()
                        .collect();
                    if others.is_empty() {
                        self.pick(&target.endpoint_urls).await
                    } else {
                        self.pick(&others).await
                    }
                }
                (None, None) => self.pick(&target.endpoint_urls).await,
            };
            let attempt_started = Instant::now();
            match self
                .attempt(&endpoint, request, cost, deadline, (load, &mut waited))
                .await
            {
                Ok(generation) => {
                    let timing = Timing { started, waited };
                    return finish(generation, &target.prices, timing, attempts, log, false);
                }
                Err(failure) => {
                    log.push(log_entry(
                        &endpoint.url,
                        &failure,
                        attempt_started.elapsed(),
                    ));
                    failed_on = Some(endpoint.url.clone());
                    // A refused key is retried only with another key of the endpoint.
                    let another_key = failure.category == ErrorCategory::Unauthorized
                        && endpoint.has_a_key_ready();
                    let retry = (failure.category.is_transient() || another_key)
                        && attempts < self.policy.max_attempts;
                    // A `Retry-After` binds the key that drew it: with another key free, the
                    // retry goes out with that one after the ordinary backoff.
                    let rate_limited_key = failure.category == ErrorCategory::RateLimited
                        && endpoint.has_a_key_ready();
                    let wait = match failure.retry_after {
                        Some(after) if !rate_limited_key => after,
                        _ => self.policy.backoff(attempts - 1),
                    };
                    last_failure = Some(failure);
                    if !retry {
                        break;
                    }
                    let wait = wait.min(deadline.saturating_duration_since(Instant::now()));
                    tokio::time::sleep(wait).await;
                }
            }
        }
        let exhausted = last_failure
            .as_ref()
            .is_none_or(|failure| failure.category.is_transient());
        if let (Some((url, model)), true) = (&target.fallback, exhausted) {
            let endpoint = self.endpoint(url).await;
            let fallback_request = GenerationRequest {
                model: model.clone(),
                ..request.clone()
            };
            attempts += 1;
            let attempt_started = Instant::now();
            let fallback_deadline = Instant::now() + self.policy.attempt_timeout;
            match self
                .attempt(
                    &endpoint,
                    &fallback_request,
                    cost,
                    fallback_deadline,
                    (load, &mut waited),
                )
                .await
            {
                Ok(generation) => {
                    let timing = Timing { started, waited };
                    return finish(
                        generation,
                        &target.fallback_prices,
                        timing,
                        attempts,
                        log,
                        true,
                    );
                }
                Err(failure) => {
                    log.push(log_entry(
                        &endpoint.url,
                        &failure,
                        attempt_started.elapsed(),
                    ));
                    last_failure = Some(failure);
                }
            }
        }
        let failure = last_failure.unwrap_or(AttemptFailure {
            category: ErrorCategory::Timeout,
            status: None,
            message: "the item timed out before an attempt could be made".into(),
            retry_after: None,
        });
        let outcome = if failure.category == ErrorCategory::Timeout {
            Outcome::Timeout
        } else {
            Outcome::EndpointError
        };
        Generation {
            outcome,
            error: Some(failure.message),
            error_category: Some(failure.category),
            attempt_log: Some(serde_json::Value::Array(log).to_string()),
            latency_ms: millis(started.elapsed().saturating_sub(waited)),
            waited_ms: millis(waited),
            attempts: i64::from(attempts),
            ..Generation::default()
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// When an identity's first attempt began, and how long it has waited for slots since.
struct Timing {
    started: Instant,
    waited: Duration,
}

fn finish(
    mut generation: Generation,
    prices: &TokenPrices,
    timing: Timing,
    attempts: u32,
    log: Vec<serde_json::Value>,
    fallback: bool,
) -> Generation {
    generation.latency_ms = millis(timing.started.elapsed().saturating_sub(timing.waited));
    generation.waited_ms = millis(timing.waited);
    generation.attempts = i64::from(attempts);
    generation.fallback_used = fallback;
    generation.cost_usd = prices.cost(generation.prompt_tokens, generation.completion_tokens);
    if !log.is_empty() {
        generation.attempt_log = Some(serde_json::Value::Array(log).to_string());
    }
    generation
}

/// Sums a Prometheus text metric over all its label sets; `None` if absent.
pub fn prometheus_sum(text: &str, metric: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if &line[..name_end] != metric {
            continue;
        }
        let value = line
            .rsplit(' ')
            .next()
            .and_then(|value| value.parse::<f64>().ok());
        if let Some(value) = value {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

/// The prefix cache a server's `/metrics` describe: vLLM V1's token counters
/// (`prefix_cache_queries_total`, `prefix_cache_hits_total`), else V0's hit-rate gauge;
/// `None` when it reports neither (or has looked nothing up yet).
pub fn prefix_cache_reading(text: &str) -> Option<arbiter_domain::health::PrefixCacheReading> {
    use arbiter_domain::health::PrefixCacheReading;
    // Some vLLM V1 releases name the counters `gpu_prefix_cache_…`.
    let counted = ["vllm:prefix_cache", "vllm:gpu_prefix_cache"]
        .iter()
        .find_map(|name| {
            let queried = prometheus_sum(text, &format!("{name}_queries_total"))?;
            let hits = prometheus_sum(text, &format!("{name}_hits_total"))?;
            (queried > 0.0).then(|| PrefixCacheReading {
                hit_rate: hits / queried,
                queried_tokens: Some(queried),
            })
        });
    counted.or_else(|| {
        // V0 reports -1 with prefix caching off.
        let rate = prometheus_sum(text, "vllm:gpu_prefix_cache_hit_rate")
            .filter(|rate| (0.0..=1.0).contains(rate))?;
        Some(PrefixCacheReading {
            hit_rate: rate,
            queried_tokens: None,
        })
    })
}

/// How often `/metrics` is read: once a second, and while the limiter is still finding the
/// server's capacity (it doubles on each reading that shows no queue) also whenever the limit
/// fills up, at most every `METRICS_POLL_MIN_GAP`.
const METRICS_POLL_SLOW_START: Duration = Duration::from_millis(100);
const METRICS_POLL_MIN_GAP: Duration = Duration::from_millis(5);
const METRICS_POLL: Duration = Duration::from_secs(1);

/// The most a worker reads of one `/metrics` page (vLLM's is tens of kilobytes).
const METRICS_BODY_LIMIT: usize = 4 << 20;

/// How often a worker writes an endpoint's queue readings to the store for the health page.
const OBSERVATION_EVERY: Duration = Duration::from_secs(10);

/// Polls vLLM-style `/metrics` and feeds the server's queue depth to the limiter (and, every
/// few seconds, to the store for the health page); stops when the endpoint has no such
/// metrics or the pool is gone.
async fn watch_server_queue(
    endpoint_ref: Weak<Endpoint>,
    http: GuardedClient,
    store: Arc<dyn Store>,
) {
    let mut misses = 0;
    let mut last_observation: Option<std::time::Instant> = None;
    loop {
        let Some(endpoint) = endpoint_ref.upgrade() else {
            return;
        };
        let url = format!("{}/metrics", server_root(&endpoint.url));
        let text = match http.get(&url) {
            Ok(request) => match request.timeout(Duration::from_secs(2)).send().await {
                Ok(response) if response.status().is_success() => {
                    read_capped(response, METRICS_BODY_LIMIT)
                        .await
                        .ok()
                        .and_then(|body| String::from_utf8(body).ok())
                }
                _ => None,
            },
            Err(_) => None,
        };
        let queue = text.as_deref().and_then(|text| {
            let waiting = prometheus_sum(text, "vllm:num_requests_waiting")?;
            let running = prometheus_sum(text, "vllm:num_requests_running").unwrap_or(0.0);
            Some((waiting, running))
        });
        match queue {
            Some((waiting, running)) => {
                misses = 0;
                endpoint
                    .server_waiting
                    .store(waiting.to_bits(), Ordering::Relaxed);
                endpoint.limiter.on_server_queue(waiting, running);
                if last_observation.is_none_or(|at| at.elapsed() >= OBSERVATION_EVERY) {
                    last_observation = Some(std::time::Instant::now());
                    let now = arbiter_store::now_ms();
                    let prefix_cache = text.as_deref().and_then(prefix_cache_reading);
                    if let Err(err) = store
                        .observe_endpoint_queue(
                            &endpoint.url,
                            (waiting, running),
                            prefix_cache,
                            now,
                        )
                        .await
                    {
                        tracing::debug!(error = %err, "endpoint queue reading not kept");
                    }
                }
            }
            None => {
                misses += 1;
                if misses >= 3 {
                    tracing::debug!(url, "no vLLM queue metrics; load control uses 429s only");
                    return;
                }
            }
        }
        tokio::time::sleep(METRICS_POLL_MIN_GAP).await;
        if endpoint.limiter.in_slow_start() {
            tokio::select! {
                _ = tokio::time::sleep(METRICS_POLL_SLOW_START) => {}
                _ = endpoint.limiter.limit_reached() => {}
            }
        } else {
            // Not held across the long wait: the pool may go away meanwhile.
            drop(endpoint);
            tokio::time::sleep(METRICS_POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_prometheus_metrics_over_labels() {
        let text = "# HELP vllm:num_requests_waiting waiting\n\
                    vllm:num_requests_waiting{model_name=\"a\"} 3\n\
                    vllm:num_requests_waiting{model_name=\"b\"} 4.0\n\
                    vllm:num_requests_waiting_total 99\n\
                    vllm:num_requests_running 7\n";
        assert_eq!(prometheus_sum(text, "vllm:num_requests_waiting"), Some(7.0));
        assert_eq!(prometheus_sum(text, "vllm:num_requests_running"), Some(7.0));
        assert_eq!(prometheus_sum(text, "vllm:gpu_cache_usage_perc"), None);
    }

    #[test]
    fn prefix_cache_readings_come_from_v1_counters_or_the_v0_gauge() {
        let v1 = "vllm:prefix_cache_queries_total{model_name=\"a\"} 600\n\
                  vllm:prefix_cache_queries_total{model_name=\"b\"} 400\n\
                  vllm:prefix_cache_hits_total{model_name=\"a\"} 450\n\
                  vllm:prefix_cache_hits_total{model_name=\"b\"} 50\n";
        let reading = prefix_cache_reading(v1).unwrap();
        assert_eq!(
            (reading.hit_rate, reading.queried_tokens),
            (0.5, Some(1000.0))
        );
        let v0 = "vllm:gpu_prefix_cache_hit_rate{model_name=\"a\"} 0.25\n";
        assert_eq!(prefix_cache_reading(v0).unwrap().hit_rate, 0.25);
        assert_eq!(prefix_cache_reading(v0).unwrap().queried_tokens, None);
        assert_eq!(
            prefix_cache_reading(
                "vllm:prefix_cache_queries_total 0\nvllm:prefix_cache_hits_total 0\n"
            ),
            None,
            "nothing looked up yet"
        );
        assert_eq!(prefix_cache_reading("vllm:num_requests_waiting 1\n"), None);
        assert_eq!(
            prefix_cache_reading("vllm:gpu_prefix_cache_hit_rate -1\n"),
            None,
            "prefix caching off"
        );
        let renamed =
            "vllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\n";
        assert_eq!(prefix_cache_reading(renamed).unwrap().hit_rate, 0.4);
    }

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_a_cap() {
        let policy = RetryPolicy::default();
        for attempt in 0..20 {
            let wait = policy.backoff(attempt);
            let full = policy
                .base_backoff
                .saturating_mul(1 << attempt.min(16))
                .min(policy.max_backoff);
            assert!(
                wait >= full / 2 && wait <= full,
                "attempt {attempt}: {wait:?} vs {full:?}"
            );
        }
    }
}
