//! Load control for one endpoint: how many requests (and tokens) this worker may have in
//! flight there right now.
//!
//! Slow start, then additive increase and multiplicative decrease, as in TCP: the limit
//! doubles every round of successes until the first sign of overload, then grows by about one
//! request per round and halves on overload (a 429, or a queue building up on the server as
//! its `/metrics` report), and new requests wait out a `Retry-After`. The ceiling is this
//! worker's share of the endpoint's configured limit, so all workers together stay under it.

use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The limit a fresh endpoint starts at: low enough not to flood a small server (the bundled
/// model runs two requests at once) and not to claim far ahead of it, since a worker claims
/// two rounds of the limit. Slow start doubles it every round, and at once on every empty
/// server queue, so a large server is filled within a few rounds.
const INITIAL_LIMIT: f64 = 8.0;
/// Decreases closer together than this are one overload event, not several.
const DECREASE_SPACING: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct State {
    limit: f64,
    ceiling: f64,
    in_flight: usize,
    tokens_in_flight: u64,
    token_budget: Option<u64>,
    paused_until: Option<Instant>,
    last_decrease: Option<Instant>,
    /// Set while the server reports requests waiting: hold the limit instead of growing.
    server_queue_building: bool,
    /// Until the first overload signal, each success adds a whole slot (doubling per round).
    slow_start: bool,
}

impl State {
    /// Still finding the server's capacity: doubling, and below the ceiling.
    fn probing(&self) -> bool {
        self.slow_start && self.limit < self.ceiling
    }

    /// Every permitted request is out.
    fn limit_bound(&self) -> bool {
        self.in_flight as f64 >= self.limit.floor()
    }
}

/// Shared by every request this worker sends to one endpoint.
#[derive(Debug)]
pub struct Limiter {
    state: Mutex<State>,
    released: Notify,
    /// Fired in slow start when every permitted request is out: the moment to ask the server
    /// whether it has room for more.
    limit_reached: Notify,
}

/// A request slot; dropping it frees the slot and its tokens.
#[derive(Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    tokens: u64,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        {
            let mut state = self.limiter.lock();
            state.in_flight -= 1;
            state.tokens_in_flight -= self.tokens;
        }
        self.limiter.released.notify_one();
    }
}

impl Limiter {
    pub fn new(ceiling: usize, token_budget: Option<u64>) -> Limiter {
        let ceiling = ceiling.max(1) as f64;
        Limiter {
            state: Mutex::new(State {
                limit: INITIAL_LIMIT.min(ceiling),
                ceiling,
                in_flight: 0,
                tokens_in_flight: 0,
                token_budget,
                paused_until: None,
                last_decrease: None,
                server_queue_building: false,
                slow_start: true,
            }),
            released: Notify::new(),
            limit_reached: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves counters that are still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for a slot for a request expected to use `tokens` (prompt + completion budget).
    pub async fn acquire(&self, tokens: u64) -> Permit<'_> {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Register interest before checking, so a release between the check and the wait
            // is not missed.
            released.as_mut().enable();
            let wait_until = {
                let mut state = self.lock();
                let now = Instant::now();
                match state.paused_until {
                    Some(until) if until > now => Some(until),
                    _ => {
                        state.paused_until = None;
                        let fits_budget = state.token_budget.is_none_or(|budget| {
                            state.in_flight == 0 || state.tokens_in_flight + tokens <= budget
                        });
                        if (state.in_flight as f64) < state.limit.floor().max(1.0) && fits_budget {
                            state.in_flight += 1;
                            state.tokens_in_flight += tokens;
                            if state.probing() && state.limit_bound() {
                                self.limit_reached.notify_one();
                            }
                            return Permit {
                                limiter: self,
                                tokens,
                            };
                        }
                        None
                    }
                }
            };
            match wait_until {
                Some(until) => tokio::time::sleep_until(until.into()).await,
                None => released.await,
            }
        }
    }

    /// A request succeeded: grow by about one slot per `limit` successes, up to the ceiling.
    pub fn on_success(&self) {
        let grew = {
            let mut state = self.lock();
            if state.server_queue_building || state.limit >= state.ceiling {
                false
            } else {
                let before = state.limit.floor();
                let step = if state.slow_start {
                    1.0
                } else {
                    1.0 / state.limit
                };
                state.limit = (state.limit + step).min(state.ceiling);
                state.limit.floor() > before
            }
        };
        if grew {
            self.released.notify_one();
        }
    }

    /// The endpoint said it is overloaded: halve the limit and pause for `retry_after`.
    pub fn on_overload(&self, retry_after: Option<Duration>) {
        let mut state = self.lock();
        let now = Instant::now();
        state.slow_start = false;
        if state
            .last_decrease
            .is_none_or(|last| now - last >= DECREASE_SPACING)
        {
            state.limit = (state.limit / 2.0).max(1.0);
            state.last_decrease = Some(now);
        }
        if let Some(wait) = retry_after {
            let until = now + wait;
            state.paused_until = Some(
                state
                    .paused_until
                    .map_or(until, |current| current.max(until)),
            );
        }
    }

    /// The server's own queue (requests waiting, from `/metrics`): shrink while it builds,
    /// hold while anything waits, grow again once it is empty.
    ///
    /// A queue beyond the tolerated one shrinks the limit by a tenth, and at once to this
    /// worker's share of what the server holds (`running` plus the tolerated queue, of the
    /// `running + waiting` it was sent) when that is lower: a server flooded at the start
    /// (slow start, a restart) is back to a short queue at the next reading, not after tens
    /// of them.
    ///
    /// In slow start an empty queue while every permitted request is out is direct evidence
    /// of idle capacity, so the limit doubles then and there. Growing only per completed
    /// request would leave the server half idle for a whole request duration, and
    /// longest-first claiming makes the first requests the longest ones.
    pub fn on_server_queue(&self, waiting: f64, running: f64) {
        let grew = {
            let mut state = self.lock();
            let tolerated = (running * 0.05).max(2.0);
            state.server_queue_building = waiting > 0.0;
            if waiting > 0.0 {
                state.slow_start = false;
            }
            if waiting > tolerated {
                let mut limit = state.limit * 0.9;
                if state.in_flight > 0 {
                    let share =
                        state.in_flight as f64 * (running + tolerated) / (running + waiting);
                    limit = limit.min(share);
                }
                state.limit = limit.max(1.0);
            }
            if state.probing() && waiting == 0.0 && state.limit_bound() {
                state.limit = (state.limit * 2.0).min(state.ceiling);
                true
            } else {
                false
            }
        };
        if grew {
            self.released.notify_waiters();
        }
    }

    /// Whether the limit is still doubling (no overload or server queue seen yet, and the
    /// ceiling not reached).
    pub fn in_slow_start(&self) -> bool {
        self.lock().probing()
    }

    /// Resolves when, in slow start, every permitted request has gone out.
    pub async fn limit_reached(&self) {
        self.limit_reached.notified().await;
    }

    /// This worker's share of the endpoint changed (workers joined or left).
    pub fn set_ceiling(&self, ceiling: usize) {
        let grew = {
            let mut state = self.lock();
            let ceiling = ceiling.max(1) as f64;
            let grew = ceiling > state.ceiling;
            state.ceiling = ceiling;
            state.limit = state.limit.min(ceiling);
            grew
        };
        if grew {
            self.released.notify_waiters();
        }
    }

    pub fn set_token_budget(&self, budget: Option<u64>) {
        self.lock().token_budget = budget;
        self.released.notify_waiters();
    }

    /// How long new requests still wait out a `Retry-After` (zero when they need not).
    pub fn paused_for(&self) -> Duration {
        self.lock().paused_until.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        })
    }

    pub fn limit(&self) -> usize {
        self.lock().limit.floor() as usize
    }

    pub fn in_flight(&self) -> usize {
        self.lock().in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn never_exceeds_the_limit_and_wakes_waiters_on_release() {
        let limiter = Arc::new(Limiter::new(2, None));
        assert_eq!(limiter.limit(), 2);
        let first = limiter.acquire(1).await;
        let _second = limiter.acquire(1).await;
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let _third = limiter.acquire(1).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a third request must wait");
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn doubles_per_round_until_overload_then_grows_by_one_per_round() {
        let limiter = Limiter::new(1000, None);
        assert_eq!(limiter.limit(), 8);
        for _ in 0..8 + 16 {
            limiter.on_success();
        }
        assert_eq!(limiter.limit(), 32, "slow start doubles per round");
        limiter.on_overload(None);
        assert_eq!(limiter.limit(), 16);
        for _ in 0..16 * 10 {
            limiter.on_success();
        }
        let grown = limiter.limit();
        assert!(
            (22..=27).contains(&grown),
            "about +1 per round after overload: {grown}"
        );
        tokio::time::sleep(DECREASE_SPACING).await;
        let before = limiter.limit();
        limiter.on_overload(None);
        assert_eq!(limiter.limit(), before / 2);
        // A burst of 429s in the same moment is one event.
        limiter.on_overload(None);
        assert_eq!(limiter.limit(), before / 2);
    }

    #[tokio::test]
    async fn retry_after_pauses_new_requests() {
        let limiter = Limiter::new(10, None);
        limiter.on_overload(Some(Duration::from_millis(150)));
        let started = Instant::now();
        let _permit = limiter.acquire(1).await;
        assert!(started.elapsed() >= Duration::from_millis(140));
    }

    #[tokio::test]
    async fn the_token_budget_bounds_tokens_in_flight() {
        let limiter = Arc::new(Limiter::new(100, Some(1000)));
        let _big = limiter.acquire(800).await;
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let _more = limiter.acquire(300).await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiter.is_finished(),
            "800 + 300 exceeds the budget of 1000"
        );
        let _small = limiter.acquire(200).await;
        // A request larger than the whole budget still runs alone rather than never.
        drop(_small);
        drop(_big);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        let _huge = tokio::time::timeout(Duration::from_secs(1), limiter.acquire(5000))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_server_queue_stops_growth_and_shrinks_the_limit() {
        let limiter = Limiter::new(100, None);
        for _ in 0..8 + 16 {
            limiter.on_success();
        }
        assert_eq!(limiter.limit(), 32);
        limiter.on_server_queue(20.0, 32.0);
        assert_eq!(
            limiter.limit(),
            28,
            "a tenth off (none of its requests out, so no share of the server to shrink to)"
        );
        for _ in 0..100 {
            limiter.on_success();
        }
        assert_eq!(
            limiter.limit(),
            28,
            "no growth while requests wait on the server"
        );
        limiter.on_server_queue(0.0, 28.0);
        for _ in 0..100 {
            limiter.on_success();
        }
        assert!(limiter.limit() > 28);
    }

    #[tokio::test]
    async fn a_flooded_server_brings_the_limit_to_this_workers_share_at_once() {
        let limiter = Limiter::new(100, None);
        let _out: Vec<_> = futures::future::join_all((0..8).map(|_| limiter.acquire(1))).await;
        // A server running two at a time: all 8 sent, 6 waiting; it holds 2 + 2 tolerated.
        limiter.on_server_queue(6.0, 2.0);
        assert_eq!(limiter.limit(), 4, "8 out x (2 + 2) / (2 + 6)");
        limiter.on_server_queue(3.0, 2.0);
        assert_eq!(
            limiter.limit(),
            3,
            "a tenth off 4, as the share 6.4 is higher"
        );
        limiter.on_server_queue(2.0, 2.0);
        assert_eq!(limiter.limit(), 3, "the tolerated queue holds the limit");
    }

    #[tokio::test]
    async fn slow_start_doubles_at_once_while_the_server_has_no_queue() {
        let limiter = Limiter::new(100, None);
        let held: Vec<_> = futures::future::join_all((0..8).map(|_| limiter.acquire(1))).await;
        limiter.on_server_queue(0.0, 8.0);
        assert_eq!(limiter.limit(), 16, "all 8 out and nothing waiting: double");
        limiter.on_server_queue(0.0, 8.0);
        assert_eq!(limiter.limit(), 16, "not limit-bound (8 of 16 out): hold");
        let more: Vec<_> = futures::future::join_all((0..8).map(|_| limiter.acquire(1))).await;
        limiter.on_server_queue(0.0, 16.0);
        assert_eq!(limiter.limit(), 32);
        let most: Vec<_> = futures::future::join_all((0..16).map(|_| limiter.acquire(1))).await;
        limiter.on_server_queue(0.0, 32.0);
        limiter.on_server_queue(0.0, 32.0);
        assert_eq!(limiter.limit(), 64, "doubles once per limit-bound reading");
        let last: Vec<_> = futures::future::join_all((0..32).map(|_| limiter.acquire(1))).await;
        limiter.on_server_queue(0.0, 64.0);
        assert_eq!(limiter.limit(), 100, "capped by the ceiling");
        drop((held, more, most, last));
        let limiter = Limiter::new(100, None);
        let _held: Vec<_> = futures::future::join_all((0..8).map(|_| limiter.acquire(1))).await;
        limiter.on_server_queue(1.0, 7.0);
        assert!(
            !limiter.in_slow_start(),
            "a request waiting ends slow start"
        );
        limiter.on_server_queue(0.0, 8.0);
        assert_eq!(
            limiter.limit(),
            8,
            "after slow start the queue no longer doubles"
        );
    }

    #[test]
    fn the_ceiling_caps_the_limit() {
        let limiter = Limiter::new(100, None);
        limiter.set_ceiling(10);
        assert_eq!(limiter.limit(), 8, "below the ceiling: unchanged");
        limiter.set_ceiling(4);
        assert_eq!(limiter.limit(), 4, "above it: brought down");
        limiter.set_ceiling(10);
        for _ in 0..1000 {
            limiter.on_success();
        }
        assert_eq!(limiter.limit(), 10);
    }
}
