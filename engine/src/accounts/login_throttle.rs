//! Login rate limiting: failed sign-ins are counted per account and per client address over a
//! sliding window; past the limit, every attempt (even with the right password) is refused
//! until the oldest failure in the window ages out.
//!
//! An attempt is counted as a failure *before* its password is checked ([`LoginThrottle::
//! reserve`]) and taken back only when the password was right: otherwise a burst of
//! concurrent guesses would all pass the check before the first failure was recorded.
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

    /// Takes back one failure recorded at `at` (a reservation that was not a failure).
    fn take_back(&mut self, key: &K, at: Instant) {
        if let Some(times) = self.failures.get_mut(key) {
            if let Some(position) = times.iter().rposition(|&time| time == at) {
                times.remove(position);
            }
            if times.is_empty() {
                self.failures.remove(key);
            }
        }
    }
}

/// Why a sign-in was refused before its password was looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locked {
    /// The account has failed too often lately (whoever tries it, from wherever).
    Account(Duration),
    /// This client address has failed too often lately (on any accounts).
    Client(Duration),
}

impl Locked {
    pub fn wait(self) -> Duration {
        match self {
            Locked::Account(wait) | Locked::Client(wait) => wait,
        }
    }

    /// What the person signing in is told: which lock holds, so that one person's typos on a
    /// shared address are not mistaken for a locked account (README, "Sign-in limits").
    pub fn message(self) -> String {
        match self {
            Locked::Account(wait) => format!(
                "too many failed sign-ins for this account; try again in {}",
                wait_in_words(wait)
            ),
            Locked::Client(wait) => format!(
                "too many failed sign-ins from your network address (on any account); try again in {}, or from another address",
                wait_in_words(wait)
            ),
        }
    }
}

/// One sign-in attempt, counted as a failure until [`Reservation::succeeded`] or
/// [`Reservation::not_tried`] says otherwise (dropping it keeps the failure).
#[must_use = "a reservation that is dropped counts as a failed sign-in"]
pub struct Reservation<'a> {
    throttle: &'a LoginThrottle,
    account: String,
    client: Option<IpAddr>,
    at: Instant,
}

impl Reservation<'_> {
    /// The password was right: the account's failures are cleared and this attempt does not
    /// count against the client.
    pub fn succeeded(self) {
        lock(&self.throttle.accounts).forget(&self.account);
        self.take_back_client();
    }

    /// The password was never checked (the server was busy): nothing is counted.
    pub fn not_tried(self) {
        lock(&self.throttle.accounts).take_back(&self.account, self.at);
        self.take_back_client();
    }

    fn take_back_client(&self) {
        if let Some(ip) = self.client {
            lock(&self.throttle.clients).take_back(&ip, self.at);
        }
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

    /// Before checking a password: refused when the account or the client has failed too
    /// often lately; otherwise the attempt is counted as a failure now, in one step with the
    /// check, so concurrent attempts cannot all pass it.
    pub fn reserve(
        &self,
        username: &str,
        client: Option<IpAddr>,
        now: Instant,
    ) -> Result<Reservation<'_>, Locked> {
        let account = account_key(username);
        // Always the accounts' lock first, then the clients'.
        let mut accounts = lock(&self.accounts);
        let mut clients = lock(&self.clients);
        if let Some(wait) = accounts.wait(&account, now) {
            return Err(Locked::Account(wait));
        }
        if let Some(wait) = client.and_then(|ip| clients.wait(&ip, now)) {
            return Err(Locked::Client(wait));
        }
        accounts.record(account.clone(), now);
        if let Some(ip) = client {
            clients.record(ip, now);
        }
        Ok(Reservation {
            throttle: self,
            account,
            client,
            at: now,
        })
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
            drop(
                throttle
                    .reserve("ann", None, start + Duration::from_secs(i))
                    .unwrap(),
            );
        }
        let later = start + Duration::from_secs(10);
        let wait = throttle.reserve("ann", None, later).err().unwrap();
        assert_eq!(wait, Locked::Account(WINDOW - Duration::from_secs(10)));
        // Case and spaces do not make a fresh budget; another account is unaffected.
        assert!(throttle.reserve(" ANN", None, later).is_err());
        assert!(throttle.reserve("bob", None, later).is_ok());
        // Once the oldest failure is out of the window, one more try is allowed.
        assert!(throttle.reserve("ann", None, start + WINDOW).is_ok());
    }

    #[test]
    fn attempts_in_flight_count_before_their_passwords_are_checked() {
        // Ten guesses in flight at once use the whole budget: the eleventh is refused before
        // any of them has been answered.
        let throttle = LoginThrottle::new(10, 100);
        let now = Instant::now();
        let in_flight: Vec<_> = (0..10)
            .map(|_| throttle.reserve("ann", None, now).unwrap())
            .collect();
        assert!(matches!(
            throttle.reserve("ann", None, now),
            Err(Locked::Account(_))
        ));
        // One of them was the right password: the account's budget is whole again.
        let mut in_flight = in_flight.into_iter();
        in_flight.next().unwrap().succeeded();
        drop(in_flight);
        assert!(throttle.reserve("ann", None, now).is_ok());
        // Attempts never tried give their place back.
        let throttle = LoginThrottle::new(1, 100);
        throttle.reserve("bob", None, now).unwrap().not_tried();
        assert!(throttle.reserve("bob", None, now).is_ok());
        assert!(throttle.reserve("bob", None, now).is_err());
    }

    #[test]
    fn a_client_spraying_many_accounts_is_refused_and_success_clears_only_the_account() {
        let throttle = LoginThrottle::new(100, 5);
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let now = Instant::now();
        for account in ["a", "b", "c", "d", "e"] {
            drop(throttle.reserve(account, Some(ip), now).unwrap());
        }
        let locked = throttle.reserve("f", Some(ip), now).err().unwrap();
        assert!(matches!(locked, Locked::Client(_)));
        assert!(
            locked.message().contains("network address"),
            "{}",
            locked.message()
        );
        assert!(throttle
            .reserve("f", Some("10.0.0.8".parse().unwrap()), now)
            .is_ok());
        assert!(throttle.reserve("f", None, now).is_ok());

        let throttle = LoginThrottle::new(2, 100);
        drop(throttle.reserve("ann", Some(ip), now).unwrap());
        throttle.reserve("ann", Some(ip), now).unwrap().succeeded();
        // Success cleared the account, and its own attempt does not count against the
        // client; the earlier failure still does.
        assert!(throttle.reserve("ann", None, now).is_ok());
        assert_eq!(lock(&throttle.clients).failures[&ip].len(), 1);
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
