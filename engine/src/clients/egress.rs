//! The egress policy: which addresses Arbiter's own HTTP requests may reach.
//!
//! Researchers name the URLs Arbiter calls (checkpoints, replicas, webhooks), so without a
//! policy anyone who can register a checkpoint could make the server fetch its own API, the
//! cloud's metadata service or a database on the private network. Following OWASP's SSRF
//! prevention sheet, every outbound request goes through a [`GuardedClient`]:
//! - the URL is http(s), with a host, and no credentials, query or fragment (a `?` or `#` in a
//!   base URL would choose the exact path that Arbiter appends to);
//! - the host must be public, unless the operator allows it by name, address or network
//!   (`ARBITER_EGRESS_ALLOW`); loopback, private, link-local (the metadata service at
//!   169.254.169.254 among them), shared, reserved and multicast addresses are refused;
//! - names are checked after DNS resolution, by the client's own resolver, so the address
//!   checked is the address connected to (a name that later resolves elsewhere, DNS rebinding,
//!   is checked again at each new connection);
//! - redirects are never followed and no proxy is used (either would reach an address the
//!   check did not see).
//!
//! Response bodies are read through [`read_capped`], so no endpoint can make Arbiter hold an
//! unbounded answer in memory.

use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

/// Where the operator lists what may be reached besides public addresses.
pub const EGRESS_ALLOW_VARIABLE: &str = "ARBITER_EGRESS_ALLOW";

/// Networks that are not the public internet (RFC 6890 and its successors), refused unless
/// the operator allows them. IPv4-mapped IPv6 addresses are checked as the IPv4 they carry.
const NON_PUBLIC_NETWORKS: &[&str] = &[
    "0.0.0.0/8",       // "this network"
    "10.0.0.0/8",      // private
    "100.64.0.0/10",   // shared address space (carrier-grade NAT)
    "127.0.0.0/8",     // loopback
    "169.254.0.0/16",  // link-local, cloud metadata services
    "172.16.0.0/12",   // private
    "192.0.0.0/24",    // IETF protocol assignments
    "192.0.2.0/24",    // documentation
    "192.88.99.0/24",  // 6to4 relay anycast
    "192.168.0.0/16",  // private
    "198.18.0.0/15",   // benchmarking
    "198.51.100.0/24", // documentation
    "203.0.113.0/24",  // documentation
    "224.0.0.0/4",     // multicast
    "240.0.0.0/4",     // reserved, broadcast
    "::/128",          // unspecified
    "::/96",           // IPv4-compatible (deprecated): embeds any IPv4 address
    "::1/128",         // loopback
    "64:ff9b::/96",    // NAT64: reaches IPv4 addresses, private ones too
    "64:ff9b:1::/48",  // local-use NAT64
    "100::/64",        // discard
    "2001::/32",       // Teredo: tunnels to any IPv4 address
    "2001:db8::/32",   // documentation
    "2002::/16",       // 6to4: embeds any IPv4 address
    "fc00::/7",        // unique local (AWS's metadata at fd00:ec2::254 among them)
    "fe80::/10",       // link-local
    "ff00::/8",        // multicast
];

fn non_public_networks() -> &'static [IpNet] {
    static NETWORKS: OnceLock<Vec<IpNet>> = OnceLock::new();
    NETWORKS.get_or_init(|| {
        NON_PUBLIC_NETWORKS
            .iter()
            .map(|network| network.parse().expect("the table's networks are valid"))
            .collect()
    })
}

/// Whether `address` is on the public internet.
pub fn is_public(address: IpAddr) -> bool {
    let address = address.to_canonical();
    !non_public_networks()
        .iter()
        .any(|network| network.contains(&address))
}

/// One entry of the operator's allow list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Allowed {
    /// A network (or one address) on any port.
    Network(IpNet),
    /// One address on one port: `127.0.0.1:8001`, `[::1]:8001`.
    Socket(SocketAddr),
    /// A host name, optionally on one port; `*.example.internal` covers its subdomains.
    Name { name: String, port: Option<u16> },
}

impl Allowed {
    fn parse(entry: &str) -> Result<Allowed, String> {
        if let Ok(network) = entry.parse::<IpNet>() {
            return Ok(Allowed::Network(network.trunc()));
        }
        if let Ok(address) = entry.parse::<IpAddr>() {
            return Ok(Allowed::Network(IpNet::from(address.to_canonical())));
        }
        if let Ok(socket) = entry.parse::<SocketAddr>() {
            return Ok(Allowed::Socket(SocketAddr::new(
                socket.ip().to_canonical(),
                socket.port(),
            )));
        }
        let (name, port) = match entry.rsplit_once(':') {
            Some((name, port)) => {
                let port = port.parse::<u16>().map_err(|_| {
                    format!("`{entry}` is not a host, host:port, address or network")
                })?;
                (name, Some(port))
            }
            None => (entry, None),
        };
        let name = name.to_ascii_lowercase();
        let bare = name.strip_prefix("*.").unwrap_or(&name);
        let valid = !bare.is_empty()
            && bare.len() <= 253
            && bare.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
            })
            // `300.1.1.1` is a mistyped address, not a name.
            && !bare
                .rsplit('.')
                .next()
                .is_some_and(|last| last.bytes().all(|byte| byte.is_ascii_digit()));
        if !valid {
            return Err(format!(
                "`{entry}` is not a host, host:port, address or network"
            ));
        }
        Ok(Allowed::Name { name, port })
    }

    /// Whether this entry names `host` (lower case), whatever the port.
    fn names_host(&self, host: &str) -> bool {
        match self {
            Allowed::Name { name, .. } => match name.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|subdomain| subdomain.ends_with('.') && subdomain.len() > 1),
                None => host == name,
            },
            _ => false,
        }
    }

    /// Whether this entry names `host` on `port` (any port when the entry has none).
    fn names(&self, host: &str, port: Option<u16>) -> bool {
        self.names_host(host)
            && match self {
                Allowed::Name {
                    port: Some(allowed),
                    ..
                } => Some(*allowed) == port,
                _ => true,
            }
    }
}

/// Why a request was not sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// What may be reached: public addresses, and what the operator allows besides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allowed: Vec<Allowed>,
}

impl EgressPolicy {
    /// Public addresses only: the default.
    pub fn public_only() -> EgressPolicy {
        EgressPolicy::default()
    }

    /// From a list separated by commas or spaces: networks (`10.1.0.0/16`), addresses
    /// (`10.1.2.3`, or `127.0.0.1:8001` for one port), host names (`vllm.internal`,
    /// `vllm.internal:8000`, `*.models.internal`).
    pub fn parse(list: &str) -> Result<EgressPolicy, String> {
        let allowed = list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|entry| !entry.is_empty())
            .map(Allowed::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|problem| format!("{EGRESS_ALLOW_VARIABLE}: {problem}"))?;
        Ok(EgressPolicy { allowed })
    }

    /// From `ARBITER_EGRESS_ALLOW` (unset: public addresses only).
    pub fn from_env() -> Result<EgressPolicy, String> {
        EgressPolicy::parse(&std::env::var(EGRESS_ALLOW_VARIABLE).unwrap_or_default())
    }

    /// This policy with `entry` allowed too (the demo allows its own simulator this way).
    pub fn allowing(mut self, entry: &str) -> Result<EgressPolicy, String> {
        self.allowed.push(Allowed::parse(entry)?);
        Ok(self)
    }

    fn allows_name(&self, host: &str, port: Option<u16>) -> bool {
        self.allowed.iter().any(|entry| entry.names(host, port))
    }

    /// Whether `address` may be reached on `port` (`None`: a resolved name, whose port the
    /// URL check has seen; only port-less entries then apply).
    fn allows_address(&self, address: IpAddr, port: Option<u16>) -> bool {
        let address = address.to_canonical();
        is_public(address)
            || self.allowed.iter().any(|entry| match entry {
                Allowed::Network(network) => network.contains(&address),
                Allowed::Socket(socket) => Some(socket.port()) == port && socket.ip() == address,
                Allowed::Name { .. } => false,
            })
    }

    /// Checks a URL before any request: scheme, no credentials, query or fragment, and an
    /// address literal against the policy (names are checked when resolved).
    pub fn check_url(&self, url: &str) -> Result<reqwest::Url, Refusal> {
        self.check(url, false)
    }

    /// [`EgressPolicy::check_url`] for a webhook receiver's URL, which is called as given and
    /// may carry a query (a receiver's token, say), never a fragment.
    pub fn check_webhook_url(&self, url: &str) -> Result<reqwest::Url, Refusal> {
        self.check(url, true)
    }

    fn check(&self, url: &str, query_allowed: bool) -> Result<reqwest::Url, Refusal> {
        let parsed =
            reqwest::Url::parse(url).map_err(|_| Refusal(format!("`{url}` is not a URL")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Refusal(format!(
                "{url}: only http:// and https:// are used"
            )));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Refusal(format!(
                "{url}: credentials do not belong in the URL (give an API key instead)"
            )));
        }
        if parsed.fragment().is_some() || (parsed.query().is_some() && !query_allowed) {
            return Err(Refusal(format!(
                "{url}: a URL Arbiter calls may not have a query (?) or fragment (#)"
            )));
        }
        let port = parsed.port_or_known_default();
        match parsed.host() {
            None => Err(Refusal(format!("{url}: no host"))),
            Some(url::Host::Domain(name)) => {
                let name = name.to_ascii_lowercase();
                // A name the operator allows on some ports only is refused on the others
                // (the resolver, which sees no port, would let it through).
                let named = self.allowed.iter().any(|entry| entry.names_host(&name));
                if named && !self.allows_name(&name, port) {
                    return Err(Refusal(format!(
                        "{url}: {name} is allowed only on the ports {EGRESS_ALLOW_VARIABLE} names"
                    )));
                }
                Ok(parsed)
            }
            Some(url::Host::Ipv4(address)) => self.check_literal(url, address.into(), port, parsed),
            Some(url::Host::Ipv6(address)) => self.check_literal(url, address.into(), port, parsed),
        }
    }

    fn check_literal(
        &self,
        url: &str,
        address: IpAddr,
        port: Option<u16>,
        parsed: reqwest::Url,
    ) -> Result<reqwest::Url, Refusal> {
        if self.allows_address(address, port) {
            Ok(parsed)
        } else {
            Err(refused_address(url, address))
        }
    }

    /// The resolver's check: a name the operator allows may resolve anywhere; otherwise every
    /// address it resolves to must be allowed (one bad address refuses the name, so a server
    /// cannot be steered to it by connection order).
    fn check_resolved(&self, name: &str, addresses: &[SocketAddr]) -> Result<(), Refusal> {
        let name = name.to_ascii_lowercase();
        if self.allowed.iter().any(|entry| entry.names_host(&name)) {
            return Ok(());
        }
        match addresses
            .iter()
            .find(|address| !self.allows_address(address.ip(), None))
        {
            Some(address) => Err(refused_address(&name, address.ip())),
            None => Ok(()),
        }
    }
}

fn refused_address(target: &str, address: IpAddr) -> Refusal {
    Refusal(format!(
        "{target}: {address} is not a public address, and {EGRESS_ALLOW_VARIABLE} does not allow it"
    ))
}

/// The policy of this process: the one installed at start-up, else `ARBITER_EGRESS_ALLOW`.
pub fn process() -> Arc<EgressPolicy> {
    installed()
        .get_or_init(|| {
            Arc::new(EgressPolicy::from_env().unwrap_or_else(|problem| {
                // Servers check the setting at start-up; a bad one here allows nothing extra.
                tracing::error!(%problem, "egress policy unreadable: only public addresses");
                EgressPolicy::public_only()
            }))
        })
        .clone()
}

fn installed() -> &'static OnceLock<Arc<EgressPolicy>> {
    static POLICY: OnceLock<Arc<EgressPolicy>> = OnceLock::new();
    &POLICY
}

/// Sets this process's policy; the first call wins (a later one is refused with the policy in
/// force, so two parts of one process cannot disagree silently).
pub fn install(policy: EgressPolicy) -> Result<(), Arc<EgressPolicy>> {
    let policy = Arc::new(policy);
    installed().set(policy.clone()).or_else(|_| {
        let current = process();
        if *current == *policy {
            Ok(())
        } else {
            Err(current)
        }
    })
}

/// Resolves names with the system resolver and checks every address against the policy.
struct CheckingResolver {
    policy: Arc<EgressPolicy>,
}

impl reqwest::dns::Resolve for CheckingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addresses: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            policy.check_resolved(&host, &addresses)?;
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An HTTP client that reaches only what its policy allows, never follows a redirect and
/// uses no proxy. Build requests with [`GuardedClient::get`] and [`GuardedClient::post`],
/// which check the URL first.
#[derive(Clone)]
pub struct GuardedClient {
    http: reqwest::Client,
    policy: Arc<EgressPolicy>,
}

impl GuardedClient {
    /// A client under `policy`, with `configure` adding timeouts and pool settings.
    pub fn new(
        policy: Arc<EgressPolicy>,
        configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
    ) -> GuardedClient {
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(CheckingResolver {
                policy: policy.clone(),
            }));
        let http = configure(builder)
            .build()
            .expect("the HTTP client's static configuration is valid");
        GuardedClient { http, policy }
    }

    /// A client under this process's policy.
    pub fn for_process(
        configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
    ) -> GuardedClient {
        GuardedClient::new(process(), configure)
    }

    pub fn get(&self, url: &str) -> Result<reqwest::RequestBuilder, Refusal> {
        Ok(self.http.get(self.policy.check_url(url)?))
    }

    pub fn post(&self, url: &str) -> Result<reqwest::RequestBuilder, Refusal> {
        Ok(self.http.post(self.policy.check_url(url)?))
    }

    /// A POST to a webhook receiver ([`EgressPolicy::check_webhook_url`]).
    pub fn post_webhook(&self, url: &str) -> Result<reqwest::RequestBuilder, Refusal> {
        Ok(self.http.post(self.policy.check_webhook_url(url)?))
    }
}

/// Whether a failed request was refused by the policy (at resolution) rather than failing on
/// the network.
pub fn refusal_in(err: &reqwest::Error) -> Option<String> {
    let mut cause: Option<&dyn std::error::Error> = Some(err);
    while let Some(current) = cause {
        if let Some(refusal) = current.downcast_ref::<Refusal>() {
            return Some(refusal.0.clone());
        }
        cause = current.source();
    }
    None
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the response is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the response could not be read: {0}")]
    Read(#[from] reqwest::Error),
}

/// A response's body, refused once it passes `limit` bytes (a declared Content-Length over
/// the limit is refused before any of it is read).
pub async fn read_capped(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(BodyError::TooLarge { limit });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_public_addresses_pass_by_default() {
        for internal in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
        ] {
            assert!(!is_public(address(internal)), "{internal}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "1.1.1.1", "2606:4700::1111"] {
            assert!(is_public(address(public)), "{public}");
        }
    }

    #[test]
    fn urls_with_internal_literals_queries_fragments_or_credentials_are_refused() {
        let policy = EgressPolicy::public_only();
        for refused in [
            "http://127.0.0.1:3000/v1",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]:8000/v1",
            "http://[::ffff:10.0.0.1]/v1",
            "http://10.0.0.7:8000/v1",
            "http://0x7f000001/v1",
            "http://2130706433/v1",
            "https://api.example.com/v1?path=/admin",
            "https://api.example.com/v1#",
            "https://user:pass@api.example.com/v1",
            "ftp://api.example.com/v1",
            "file:///etc/passwd",
        ] {
            assert!(policy.check_url(refused).is_err(), "{refused}");
        }
        let refusal = policy
            .check_url("http://127.0.0.1:3000/api/v1/nothing#")
            .unwrap_err();
        assert!(refusal.0.contains("fragment"), "{refusal}");
        let refusal = policy.check_url("http://169.254.169.254/").unwrap_err();
        assert!(refusal.0.contains("ARBITER_EGRESS_ALLOW"), "{refusal}");
        assert!(policy.check_url("https://api.example.com/v1").is_ok());
        // A webhook receiver may take a token in its query, never a fragment or an inside address.
        assert!(policy
            .check_webhook_url("https://hooks.example.com/in?token=abc")
            .is_ok());
        assert!(policy
            .check_webhook_url("https://hooks.example.com/in#x")
            .is_err());
        assert!(policy
            .check_webhook_url("http://169.254.169.254/?a=b")
            .is_err());
        assert!(policy.check_url("http://8.8.8.8:8000/v1").is_ok());
    }

    #[test]
    fn the_operator_allows_networks_addresses_ports_and_names() {
        let policy = EgressPolicy::parse(
            "10.1.0.0/16, 127.0.0.1:8001 vllm.internal:8000,*.models.internal,[::1]:9000",
        )
        .unwrap();
        assert!(policy.check_url("http://10.1.2.3:8000/v1").is_ok());
        assert!(policy.check_url("http://10.2.0.1/v1").is_err());
        // An address allowed on one port is refused on the others: the demo's simulator is
        // allowed, Arbiter's own API on the same address is not.
        assert!(policy.check_url("http://127.0.0.1:8001/v1").is_ok());
        assert!(policy.check_url("http://127.0.0.1:3000/v1").is_err());
        assert!(policy.check_url("http://[::1]:9000/v1").is_ok());
        assert!(policy.check_url("http://[::1]:9001/v1").is_err());
        assert!(policy.check_url("http://vllm.internal:8000/v1").is_ok());
        assert!(policy.check_url("http://vllm.internal:22/").is_err());
        assert!(policy.check_url("http://VLLM.internal:8000/v1").is_ok());
        // Names the operator allows may resolve to private addresses; others may not.
        let private = [SocketAddr::new(address("10.9.9.9"), 0)];
        assert!(policy.check_resolved("vllm.internal", &private).is_ok());
        assert!(policy.check_resolved("a.models.internal", &private).is_ok());
        assert!(policy.check_resolved("models.internal", &private).is_err());
        assert!(policy.check_resolved("evil.example", &private).is_err());
        // A port-bound address does not admit names resolving to it (the port is unknown).
        let loopback = [SocketAddr::new(address("127.0.0.1"), 0)];
        assert!(policy.check_resolved("rebound.example", &loopback).is_err());
        // One internal address among public ones refuses the name.
        let mixed = [
            SocketAddr::new(address("8.8.8.8"), 0),
            SocketAddr::new(address("169.254.169.254"), 0),
        ];
        let refusal = policy.check_resolved("mixed.example", &mixed).unwrap_err();
        assert!(refusal.0.contains("169.254.169.254"), "{refusal}");
        assert!(policy.check_resolved("mixed.example", &mixed[..1]).is_ok());
        for bad in [
            "a b:c",
            "300.1.1.1/8",
            "300.1.1.1",
            "host:99999",
            "-:1",
            "*.",
            "a..b",
        ] {
            assert!(EgressPolicy::parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_inside_and_never_follows_redirects() {
        let client = GuardedClient::new(Arc::new(EgressPolicy::public_only()), |builder| builder);
        // `localhost` resolves to loopback: refused at resolution, with the policy's reason.
        let err = client
            .get("http://localhost:9/")
            .unwrap()
            .send()
            .await
            .unwrap_err();
        let refusal = refusal_in(&err).expect("refused by the policy");
        assert!(refusal.contains("not a public address"), "{refusal}");
        assert!(client.get("http://127.0.0.1:9/").is_err());

        // A server that redirects: the 3xx is the answer, the target is never fetched.
        let port = crate::clients::test_server::answer_once(
            "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\ncontent-length: 0\r\n\r\n"
                .into(),
        )
        .await;
        let allowed = GuardedClient::new(
            Arc::new(EgressPolicy::parse(&format!("127.0.0.1:{port}")).unwrap()),
            |builder| builder,
        );
        let response = allowed
            .get(&format!("http://127.0.0.1:{port}/v1/models"))
            .unwrap()
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 302);
    }
}
