//! Login rate limiting: failed sign-ins are counted per account and per client address over a
//! sliding window; past the limit, every attempt (even with the right password) is refused
//! until the oldest failure in the window ages out.
//!
//! Only failures count, so a team that signs in often (or a browser test suite) is never
//! slowed. A token-bucket crate such as `governor` limits every attempt and cannot look
//! without consuming, which is why this small window is written out here.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed sign-ins allowed per account within [`WINDOW`].
pub const ACCOUNT_FAILURES: usize = 10;
/// Failed sign-ins allowed per client address within [`WINDOW`] (password spraying across
/// many accounts from one place).
pub const CLIENT_FAILURES: usize = 30;
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Keys remembered at most; past it, keys whose failures all aged out are dropped first.
const MAX_KEYS: usize = 100_000;

/// Failures per key within the window, oldest first.
struct FailureWindow<K> {
    limit: usize,
    failures: HashMap<K, VecDeque<Instant>>,
}

impl<K: Eq + Hash + Clone> FailureWindow<K> {
    fn new(limit: usize) -> Self {
        FailureWindow {
            limit,
            failures: HashMap::new(),
        }
    }

    /// How long until `key` may try again; `None` when it may now.
    fn wait(&mut self, key: &K, now: Instant) -> Option<Duration> {
        let times = self.failures.get_mut(key)?;
        while times
            .front()
            .is_some_and(|&oldest| now.duration_since(oldest) >= WINDOW)
        {
            times.pop_front();
        }
        if times.len() < self.limit {
            return None;
        }
        let oldest = *times.front()?;
        Some(WINDOW.saturating_sub(now.duration_since(oldest)))
    }

    fn record(&mut self, key: K, now: Instant) {
        if self.failures.len() >= MAX_KEYS && !self.failures.contains_key(&key) {
            self.failures.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|&latest| now.duration_since(latest) < WINDOW)
            });
            if self.failures.len() >= MAX_KEYS {
                return;
            }
        }
        let times = self.failures.entry(key).or_default();
        times.push_back(now);
        while times.len() > self.limit {
            times.pop_front();
        }
    }

    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }
}

/// Shared by every login request of one server process.
pub struct LoginThrottle {
    accounts: Mutex<FailureWindow<String>>,
    clients: Mutex<FailureWindow<IpAddr>>,
    /// Reverse proxies whose `X-Forwarded-For` names the real client.
    trusted_proxies: Vec<IpAddr>,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        LoginThrottle::new(ACCOUNT_FAILURES, CLIENT_FAILURES)
    }
}

impl LoginThrottle {
    pub fn new(account_failures: usize, client_failures: usize) -> LoginThrottle {
        LoginThrottle {
            accounts: Mutex::new(FailureWindow::new(account_failures)),
            clients: Mutex::new(FailureWindow::new(client_failures)),
            trusted_proxies: Vec::new(),
        }
    }

    /// Trusts these proxies' `X-Forwarded-For` (see [`client_address`]).
    pub fn with_trusted_proxies(mut self, proxies: Vec<IpAddr>) -> LoginThrottle {
        self.trusted_proxies = proxies;
        self
    }

    pub fn trusted_proxies(&self) -> &[IpAddr] {
        &self.trusted_proxies
    }

    /// Before checking a password: `Err(wait)` when the account or the client has failed too
    /// often lately.
    pub fn check(
        &self,
        username: &str,
        client: Option<IpAddr>,
        now: Instant,
    ) -> Result<(), Duration> {
        let account = lock(&self.accounts).wait(&account_key(username), now);
        let client = client.and_then(|ip| lock(&self.clients).wait(&ip, now));
        match account.into_iter().chain(client).max() {
            Some(wait) => Err(wait),
            None => Ok(()),
        }
    }

    pub fn record_failure(&self, username: &str, client: Option<IpAddr>, now: Instant) {
        lock(&self.accounts).record(account_key(username), now);
        if let Some(ip) = client {
            lock(&self.clients).record(ip, now);
        }
    }

    /// A successful sign-in clears the account's failures (not the client's).
    pub fn record_success(&self, username: &str) {
        lock(&self.accounts).forget(&account_key(username));
    }
}

/// Usernames are matched as typed, less surrounding space, in lower case: "Alice " and
/// "alice" share a budget whatever the store's own matching.
fn account_key(username: &str) -> String {
    username.trim().to_lowercase()
}

/// A poisoned lock only means another request panicked mid-update; the counts stay usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// "try again in 3 minutes" and the like, rounded up.
pub fn wait_in_words(wait: Duration) -> String {
    let seconds = wait.as_secs().max(1);
    if seconds == 1 {
        "1 second".to_string()
    } else if seconds < 90 {
        format!("{seconds} seconds")
    } else {
        format!("{} minutes", seconds.div_ceil(60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_is_refused_after_its_failures_until_the_oldest_ages_out() {
        let throttle = LoginThrottle::new(3, 100);
        let start = Instant::now();
        for i in 0..3 {
            assert_eq!(throttle.check("ann", None, start), Ok(()));
            throttle.record_failure("ann", None, start + Duration::from_secs(i));
        }
        let later = start + Duration::from_secs(10);
        let wait = throttle.check("ann", None, later).unwrap_err();
        assert_eq!(wait, WINDOW - Duration::from_secs(10));
        // Case and spaces do not make a fresh budget; another account is unaffected.
        assert!(throttle.check(" ANN", None, later).is_err());
        assert_eq!(throttle.check("bob", None, later), Ok(()));
        // Once the oldest failure is out of the window, one more try is allowed.
        assert_eq!(throttle.check("ann", None, start + WINDOW), Ok(()));
    }

    #[test]
    fn a_client_spraying_many_accounts_is_refused_and_success_clears_only_the_account() {
        let throttle = LoginThrottle::new(100, 5);
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let now = Instant::now();
        for account in ["a", "b", "c", "d", "e"] {
            throttle.record_failure(account, Some(ip), now);
        }
        assert!(throttle.check("f", Some(ip), now).is_err());
        assert_eq!(
            throttle.check("f", Some("10.0.0.8".parse().unwrap()), now),
            Ok(())
        );
        assert_eq!(throttle.check("f", None, now), Ok(()));

        let throttle = LoginThrottle::new(2, 100);
        throttle.record_failure("ann", None, now);
        throttle.record_failure("ann", None, now);
        assert!(throttle.check("ann", None, now).is_err());
        throttle.record_success("ann");
        assert_eq!(throttle.check("ann", None, now), Ok(()));
    }

    #[test]
    fn waits_read_in_words() {
        assert_eq!(wait_in_words(Duration::from_millis(10)), "1 second");
        assert_eq!(wait_in_words(Duration::from_secs(45)), "45 seconds");
        assert_eq!(
            wait_in_words(Duration::from_secs(14 * 60 + 1)),
            "15 minutes"
        );
    }
}

/// The client's address behind trusted reverse proxies: when the connection comes from one of
/// `trusted_proxies`, the right-most address in `X-Forwarded-For` that is not itself a trusted
/// proxy (proxies append, so addresses to its left could be forged by the client); otherwise
/// the connection's own address.
pub fn client_address(
    peer: IpAddr,
    forwarded_for: Option<&str>,
    trusted_proxies: &[IpAddr],
) -> IpAddr {
    if !trusted_proxies.contains(&peer) {
        return peer;
    }
    // From the right: skip our own proxies; the first other entry is the client as the
    // outermost trusted proxy saw it. An entry that is not an address ends the walk (falling
    // back to the proxy), so a client cannot smuggle a forged address past a malformed one.
    for entry in forwarded_for
        .into_iter()
        .flat_map(|header| header.rsplit(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        match entry.parse::<IpAddr>() {
            Ok(address) if trusted_proxies.contains(&address) => continue,
            Ok(address) => return address,
            Err(_) => return peer,
        }
    }
    peer
}

/// The proxies named in `ARBITER_TRUSTED_PROXIES` (comma-separated addresses); entries that
/// are not addresses are reported and skipped.
pub fn trusted_proxies_from_env() -> Vec<IpAddr> {
    std::env::var("ARBITER_TRUSTED_PROXIES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| match entry.parse::<IpAddr>() {
            Ok(address) => Some(address),
            Err(_) => {
                tracing::warn!(entry, "ARBITER_TRUSTED_PROXIES: not an IP address; ignored");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod forwarded_tests {
    use super::*;

    #[test]
    fn forwarded_addresses_count_only_behind_a_trusted_proxy() {
        let proxy: IpAddr = "10.0.0.2".parse().unwrap();
        let client: IpAddr = "203.0.113.7".parse().unwrap();
        let trusted = [proxy];
        // Directly connected clients cannot claim another address.
        assert_eq!(
            client_address(client, Some("198.51.100.1"), &trusted),
            client
        );
        // Behind the proxy: the address it appended.
        assert_eq!(client_address(proxy, Some("203.0.113.7"), &trusted), client);
        // A forged left-most entry is ignored; the proxy's own entry is the truth.
        assert_eq!(
            client_address(proxy, Some("1.2.3.4, 203.0.113.7"), &trusted),
            client
        );
        // Chains of trusted proxies are skipped from the right.
        let inner: IpAddr = "10.0.0.3".parse().unwrap();
        assert_eq!(
            client_address(proxy, Some("203.0.113.7, 10.0.0.3"), &[proxy, inner]),
            client
        );
        // Garbage or nothing: the proxy itself; a malformed entry stops the walk.
        assert_eq!(client_address(proxy, Some("garbage"), &trusted), proxy);
        assert_eq!(
            client_address(proxy, Some("1.2.3.4, 203.0.113.7:443"), &trusted),
            proxy
        );
        assert_eq!(client_address(proxy, None, &trusted), proxy);
    }
}
