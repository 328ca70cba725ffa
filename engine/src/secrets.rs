//! Secrets Arbiter must be able to use but never show: model endpoints' API keys and webhook
//! signing secrets.
//!
//! The store never holds one in clear. A secret is either a reference to the environment of
//! the processes that use it (`env:VLLM_API_KEY`, for Kubernetes secrets and the like) or
//! sealed with AES-256-GCM under the deployment's `ARBITER_SECRET_KEY` (`sealed:v1:…`), which
//! lives only in the servers' and workers' environment. Secrets are never sent to a browser:
//! pages and the API only say whether one is set and what kind it is.

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Key, Nonce};

/// The environment variable holding the 32-byte sealing key, as 64 hex digits.
pub const SECRET_KEY_VARIABLE: &str = "ARBITER_SECRET_KEY";
const SEALED_PREFIX: &str = "sealed:v1:";
const ENV_PREFIX: &str = "env:";
/// Only variables named like this may be referenced: a checkpoint's key is sent to the
/// endpoint its author names, so a free choice would let anyone who registers a checkpoint
/// send `DATABASE_URL` or `ARBITER_SECRET_KEY` to a server of their own.
pub const ENDPOINT_KEY_VARIABLE_PREFIX: &str = "ARBITER_ENDPOINT_KEY_";

/// Beside each key variable, the hosts it may be sent to: `ARBITER_ENDPOINT_KEY_VLLM_HOSTS`
/// lists `host` or `host:port` entries, separated by commas. A key without the list is sent
/// nowhere, so a researcher who names the variable on a checkpoint of their own cannot have
/// the operator's key sent to their server.
pub const KEY_HOSTS_SUFFIX: &str = "_HOSTS";

/// Whether `variable` may hold an endpoint key.
fn allowed_variable(variable: &str) -> bool {
    variable.len() > ENDPOINT_KEY_VARIABLE_PREFIX.len()
        && variable.len() <= 128
        && variable.starts_with(ENDPOINT_KEY_VARIABLE_PREFIX)
        && !variable.ends_with(KEY_HOSTS_SUFFIX)
        && variable
            .bytes()
            .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b'_')
}
const NONCE_BYTES: usize = 12;

/// A secret as a person typed it (an endpoint's API key), on its way to [`SecretBox::to_stored`].
/// Its `Debug` never shows the text, so a logged form or a failed test cannot leak it.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct SecretText(String);

impl SecretText {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("SecretText(none)")
        } else {
            f.write_str("SecretText(redacted)")
        }
    }
}

impl From<&str> for SecretText {
    fn from(text: &str) -> SecretText {
        SecretText(text.to_string())
    }
}

impl From<String> for SecretText {
    fn from(text: String) -> SecretText {
        SecretText(text)
    }
}

/// Seals and opens secrets with the deployment's key, when it has one.
#[derive(Clone)]
pub struct SecretBox {
    cipher: Option<Aes256Gcm>,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        write!(
            f,
            "SecretBox {{ key: {} }}",
            if self.cipher.is_some() { "set" } else { "none" }
        )
    }
}

impl SecretBox {
    /// No key: references to the environment work, sealing does not.
    pub fn without_key() -> SecretBox {
        SecretBox { cipher: None }
    }

    /// From 64 hex digits.
    pub fn from_hex(key: &str) -> Result<SecretBox, String> {
        let bytes = hex::decode(key.trim())
            .ok()
            .filter(|bytes| bytes.len() == 32)
            .ok_or_else(|| {
                format!("{SECRET_KEY_VARIABLE} must be 64 hex digits (32 random bytes); `arbiter keygen` makes one")
            })?;
        Ok(SecretBox {
            cipher: Some(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes))),
        })
    }

    /// From `ARBITER_SECRET_KEY` when set (an invalid key is an error, not a silent fallback).
    pub fn from_env() -> Result<SecretBox, String> {
        match std::env::var(SECRET_KEY_VARIABLE) {
            Ok(key) if !key.trim().is_empty() => SecretBox::from_hex(&key),
            _ => Ok(SecretBox::without_key()),
        }
    }

    /// A fresh key as 64 hex digits.
    pub fn generate_key() -> String {
        hex::encode(Aes256Gcm::generate_key(OsRng))
    }

    pub fn can_seal(&self) -> bool {
        self.cipher.is_some()
    }

    /// `sealed:v1:` and the hex of a random nonce followed by the ciphertext.
    pub fn seal(&self, secret: &str) -> Result<String, String> {
        let cipher = self.cipher.as_ref().ok_or_else(|| {
            format!("secrets can only be stored encrypted: set {SECRET_KEY_VARIABLE} on the servers and workers, or give the secret as env:VARIABLE")
        })?;
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = cipher
            .encrypt(&nonce, secret.as_bytes())
            .map_err(|_| "the secret could not be encrypted".to_string())?;
        let mut bytes = nonce.to_vec();
        bytes.extend(sealed);
        Ok(format!("{SEALED_PREFIX}{}", hex::encode(bytes)))
    }

    fn open(&self, sealed: &str) -> Result<String, String> {
        let cipher = self.cipher.as_ref().ok_or_else(|| {
            format!("this secret is encrypted but {SECRET_KEY_VARIABLE} is not set in this process")
        })?;
        let bytes = hex::decode(sealed).map_err(|_| "a sealed secret is corrupt".to_string())?;
        if bytes.len() <= NONCE_BYTES {
            return Err("a sealed secret is corrupt".into());
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_BYTES);
        let plain = cipher
            .decrypt(Nonce::from_slice(nonce), ciphertext)
            .map_err(|_| {
                format!("a sealed secret does not open with this {SECRET_KEY_VARIABLE} (was the key changed?)")
            })?;
        String::from_utf8(plain).map_err(|_| "a sealed secret is corrupt".to_string())
    }

    /// A sealed secret (`sealed:v1:…`) opened with this key and sealed again with `new`.
    pub fn reseal_into(&self, new: &SecretBox, stored: &str) -> Result<String, String> {
        let sealed = stored
            .strip_prefix(SEALED_PREFIX)
            .ok_or_else(|| "it is not a sealed secret".to_string())?;
        new.seal(&self.open(sealed)?)
    }

    /// What a stored reference stands for: `None` for no secret.
    pub fn resolve(&self, stored: Option<&str>) -> Result<Option<String>, String> {
        let Some(stored) = stored.filter(|stored| !stored.is_empty()) else {
            return Ok(None);
        };
        if let Some(variable) = stored.strip_prefix(ENV_PREFIX) {
            if !allowed_variable(variable) {
                return Err(format!(
                    "only variables named {ENDPOINT_KEY_VARIABLE_PREFIX}… may hold endpoint keys"
                ));
            }
            return std::env::var(variable).map(Some).map_err(|_| {
                format!("the environment variable {variable} holding this secret is not set in this process")
            });
        }
        if let Some(sealed) = stored.strip_prefix(SEALED_PREFIX) {
            return self.open(sealed).map(Some);
        }
        Err("a stored secret has an unknown form".into())
    }

    /// The key to send to `url`: [`SecretBox::resolve`], refused when it is the operator's
    /// key from the environment and its `…_HOSTS` list does not name the URL's host. (A key
    /// typed into a checkpoint's form is sealed for that endpoint alone: an endpoint's URL
    /// never changes, and another checkpoint on it may not replace its key.)
    pub fn resolve_endpoint_key(
        &self,
        stored: Option<&str>,
        url: &str,
    ) -> Result<Option<String>, String> {
        Ok(self.resolve_endpoint_keys(stored, url)?.into_iter().next())
    }

    /// Every key to spread `url`'s requests over: the secret [`resolve_endpoint_key`] reads may
    /// hold several, separated by commas or white space (a provider's rate limits are per key,
    /// so several keys on one endpoint multiply what it lets through). Empty for none.
    ///
    /// [`resolve_endpoint_key`]: SecretBox::resolve_endpoint_key
    pub fn resolve_endpoint_keys(
        &self,
        stored: Option<&str>,
        url: &str,
    ) -> Result<Vec<String>, String> {
        check_endpoint_key_binding(stored, url)?;
        Ok(self
            .resolve(stored)?
            .map(|secret| split_keys(&secret))
            .unwrap_or_default())
    }

    /// Turns what a person typed into what may be stored: '' for none, `env:NAME` kept as a
    /// reference (the name checked), anything else sealed.
    pub fn to_stored(&self, typed: &str) -> Result<Option<String>, String> {
        let typed = typed.trim();
        if typed.is_empty() {
            return Ok(None);
        }
        if let Some(variable) = typed.strip_prefix(ENV_PREFIX) {
            return if allowed_variable(variable) {
                Ok(Some(typed.to_string()))
            } else {
                Err(format!(
                    "`{variable}` cannot hold an endpoint key: use a variable named {ENDPOINT_KEY_VARIABLE_PREFIX}… (upper case, digits and _), e.g. {ENDPOINT_KEY_VARIABLE_PREFIX}VLLM"
                ))
            };
        }
        self.seal(typed).map(Some)
    }
}

/// The keys a secret holds, in order and each once: API keys never contain commas or white
/// space, so those separate them.
fn split_keys(secret: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for key in secret.split(|c: char| c == ',' || c.is_whitespace()) {
        if !key.is_empty() && !keys.iter().any(|kept| kept == key) {
            keys.push(key.to_string());
        }
    }
    keys
}

/// Host lists leads and admins bound operator keys to in the UI, by variable: this process's
/// copy of the store's table (refreshed at start, by workers' heartbeats, and on every edit).
fn ui_bindings() -> &'static HostLists {
    static BINDINGS: std::sync::OnceLock<HostLists> = std::sync::OnceLock::new();
    BINDINGS.get_or_init(Default::default)
}

/// Host lists by key variable.
type HostLists = std::sync::RwLock<std::collections::HashMap<String, String>>;

/// Replaces this process's copy of the UI bindings.
pub fn set_ui_bindings(bindings: impl IntoIterator<Item = (String, String)>) {
    if let Ok(mut map) = ui_bindings().write() {
        *map = bindings.into_iter().collect();
    }
}

/// Who bound an operator key to its hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundBy {
    /// Its `…_HOSTS` variable: it always wins, and only the operator changes it.
    Operator,
    /// A lead's or admin's binding under Checkpoints.
    Lead,
}

impl BoundBy {
    pub fn describe(self) -> &'static str {
        match self {
            BoundBy::Operator => "the operator",
            BoundBy::Lead => "a lead",
        }
    }
}

/// The hosts an operator key may go to, and who set them: the operator's `…_HOSTS` variable
/// when set (it always wins), else a lead's or admin's binding; `None` when unbound.
pub fn bound_hosts(variable: &str) -> Option<(String, BoundBy)> {
    bound_hosts_given(variable, |variable| {
        ui_bindings()
            .read()
            .ok()
            .and_then(|map| map.get(variable).cloned())
    })
}

/// [`bound_hosts`] with the leads' bindings read from `leads_binding` (the store's table,
/// where a request handler has it at hand, rather than this process's copy of it).
pub fn bound_hosts_given(
    variable: &str,
    leads_binding: impl FnOnce(&str) -> Option<String>,
) -> Option<(String, BoundBy)> {
    if let Ok(hosts) = std::env::var(host_list_variable(variable)) {
        if !hosts.trim().is_empty() {
            return Some((hosts, BoundBy::Operator));
        }
    }
    leads_binding(variable).map(|hosts| (hosts, BoundBy::Lead))
}

/// Whether the stored key may be sent to `url`: a key from the environment only to the hosts
/// it is bound to ([`bound_hosts`]); a sealed key (typed for its endpoint) or none always.
pub fn check_endpoint_key_binding(stored: Option<&str>, url: &str) -> Result<(), String> {
    check_endpoint_key_binding_given(stored, url, bound_hosts)
}

/// [`check_endpoint_key_binding`] with the bindings looked up by `bound` (see
/// [`bound_hosts_given`]).
pub fn check_endpoint_key_binding_given(
    stored: Option<&str>,
    url: &str,
    bound: impl FnOnce(&str) -> Option<(String, BoundBy)>,
) -> Result<(), String> {
    match stored.and_then(|stored| stored.strip_prefix(ENV_PREFIX)) {
        Some(variable) => check_key_binding(variable, url, bound(variable).map(|(hosts, _)| hosts)),
        None => Ok(()),
    }
}

/// Checks a host list as a lead types it: host or host:port entries, separated by commas or
/// spaces, each a valid URL authority. Returns the list tidied (one comma between entries).
pub fn parse_host_list(hosts: &str) -> Result<String, String> {
    let entries: Vec<&str> = hosts
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|entry| !entry.is_empty())
        .collect();
    if entries.is_empty() {
        return Err("name at least one host (host or host:port)".into());
    }
    for entry in &entries {
        let parsed = reqwest::Url::parse(&format!("http://{entry}"))
            .ok()
            .filter(|url| url.path() == "/" && url.username().is_empty() && url.query().is_none());
        if parsed.is_none() || entry.contains('/') {
            return Err(format!("`{entry}` is not a host or host:port"));
        }
    }
    Ok(entries.join(","))
}

/// Whether a variable may name an operator's endpoint key (for bindings typed in the UI).
pub fn is_endpoint_key_variable(variable: &str) -> bool {
    allowed_variable(variable)
}

fn host_list_variable(variable: &str) -> String {
    format!("{variable}{KEY_HOSTS_SUFFIX}")
}

/// Whether the key in `variable` may go to `url`, given its host list (`None`: unset).
fn check_key_binding(variable: &str, url: &str, hosts: Option<String>) -> Result<(), String> {
    let list_variable = host_list_variable(variable);
    let parsed = reqwest::Url::parse(url).map_err(|_| format!("`{url}` is not a URL"))?;
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    let port = parsed.port_or_known_default();
    let Some(hosts) = hosts.filter(|hosts| !hosts.trim().is_empty()) else {
        return Err(format!(
            "the key in {variable} is bound to no host: the operator lists the hosts it may be sent to in {list_variable}, or a lead or admin binds it under Checkpoints"
        ));
    };
    // Each entry is read as a URL's authority, so case, IPv6 brackets and ports compare as
    // the URL's own.
    let bound = hosts
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let parsed = reqwest::Url::parse(&format!("http://{entry}")).ok()?;
            // `host:80` names port 80, though a URL drops it as http's default.
            let has_port = entry.rsplit_once(':').is_some_and(|(head, tail)| {
                tail.parse::<u16>().is_ok() && (!head.contains(':') || head.ends_with(']'))
            });
            let entry_port = has_port.then(|| parsed.port_or_known_default()).flatten();
            Some((parsed.host_str()?.to_ascii_lowercase(), entry_port))
        })
        // A bare host takes the key over https only (any port), so that a researcher cannot
        // send it in clear text to `http://` on the same name; `host:port` is the operator's
        // own choice of server, in either scheme.
        .any(|(entry_host, entry_port)| {
            entry_host == host
                && match entry_port {
                    Some(entry_port) => Some(entry_port) == port,
                    None => parsed.scheme() == "https",
                }
        });
    if bound {
        Ok(())
    } else {
        Err(format!(
            "the key in {variable} may not be sent to {host}: {list_variable} does not list it"
        ))
    }
}

/// `arbiter rekey`: every sealed endpoint key and webhook secret opened with `old` and sealed
/// with `new`, in one transaction (a secret that does not open leaves everything as it was).
/// Returns how many endpoint keys and webhook secrets were re-sealed.
pub async fn rekey(
    store: &dyn arbiter_store::Store,
    old: &SecretBox,
    new: &SecretBox,
) -> Result<(u64, u64), String> {
    store
        .reseal_secrets(&|stored| old.reseal_into(new, stored))
        .await
        .map_err(|err| err.to_string())
}

/// This process's box, from `ARBITER_SECRET_KEY` (servers check the key at start-up with
/// [`SecretBox::from_env`], so a bad key stops them there rather than here).
pub fn process() -> &'static SecretBox {
    static BOX: std::sync::OnceLock<SecretBox> = std::sync::OnceLock::new();
    BOX.get_or_init(|| {
        SecretBox::from_env().unwrap_or_else(|problem| {
            tracing::error!(%problem, "secrets cannot be opened in this process");
            SecretBox::without_key()
        })
    })
}

/// How a stored secret is described to people: never its value.
pub fn describe(stored: Option<&str>) -> String {
    match stored {
        None | Some("") => "none".into(),
        Some(stored) if stored.starts_with(ENV_PREFIX) => {
            format!("from the environment ({})", &stored[ENV_PREFIX.len()..])
        }
        Some(_) => "stored encrypted".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_their_key_and_never_show() {
        let key = SecretBox::generate_key();
        assert_eq!(key.len(), 64);
        let secrets = SecretBox::from_hex(&key).unwrap();
        let stored = secrets.to_stored("sk-live-abc123").unwrap().unwrap();
        assert!(stored.starts_with("sealed:v1:"));
        assert!(!stored.contains("sk-live-abc123"));
        // A fresh nonce each time.
        assert_ne!(
            stored,
            secrets.to_stored("sk-live-abc123").unwrap().unwrap()
        );
        assert_eq!(
            secrets.resolve(Some(&stored)).unwrap().as_deref(),
            Some("sk-live-abc123")
        );
        let other = SecretBox::from_hex(&SecretBox::generate_key()).unwrap();
        assert!(other
            .resolve(Some(&stored))
            .unwrap_err()
            .contains("does not open"));
        assert!(SecretBox::without_key()
            .resolve(Some(&stored))
            .unwrap_err()
            .contains("not set"));
        // Tampering is detected.
        let mut tampered = stored.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == '0' { '1' } else { '0' });
        assert!(secrets.resolve(Some(&tampered)).is_err());
        assert_eq!(describe(Some(&stored)), "stored encrypted");
        assert!(!format!("{secrets:?}").contains(&key));
        let typed = SecretText::from("sk-live-abc123");
        assert_eq!(format!("{typed:?}"), "SecretText(redacted)");
        assert_eq!(typed.as_str(), "sk-live-abc123");
    }

    #[test]
    fn a_sealed_secret_may_hold_several_keys() {
        let secrets = SecretBox::from_hex(&SecretBox::generate_key()).unwrap();
        let stored = secrets
            .to_stored(" sk-one, sk-two\nsk-three sk-one ")
            .unwrap();
        assert_eq!(
            secrets
                .resolve_endpoint_keys(stored.as_deref(), "http://api.example/v1")
                .unwrap(),
            ["sk-one", "sk-two", "sk-three"],
            "split at commas and white space, each once, in order"
        );
        assert_eq!(
            secrets
                .resolve_endpoint_key(stored.as_deref(), "http://api.example/v1")
                .unwrap()
                .as_deref(),
            Some("sk-one"),
            "probes send the first"
        );
        assert!(secrets
            .resolve_endpoint_keys(None, "http://api.example/v1")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn operator_keys_go_only_to_the_hosts_bound_to_them() {
        let variable = "ARBITER_ENDPOINT_KEY_VLLM";
        let hosts =
            || Some("vllm.internal:8000, 10.0.0.5 [::1]:9000 plain.internal:80".to_string());
        assert!(check_key_binding(variable, "http://vllm.internal:8000/v1", hosts()).is_ok());
        assert!(check_key_binding(variable, "http://VLLM.internal:8000/v1", hosts()).is_ok());
        assert!(check_key_binding(variable, "https://10.0.0.5:9999/v1", hosts()).is_ok());
        // A bare host is bound over https only: never in clear text.
        assert!(check_key_binding(variable, "http://10.0.0.5:9999/v1", hosts()).is_err());
        assert!(check_key_binding(variable, "http://10.0.0.5/v1", hosts()).is_err());
        let elsewhere =
            check_key_binding(variable, "https://evil.example/v1", hosts()).unwrap_err();
        assert!(elsewhere.contains("evil.example"), "{elsewhere}");
        assert!(
            elsewhere.contains("ARBITER_ENDPOINT_KEY_VLLM_HOSTS"),
            "{elsewhere}"
        );
        assert!(check_key_binding(variable, "http://[::1]:9000/v1", hosts()).is_ok());
        assert!(check_key_binding(variable, "http://plain.internal/v1", hosts()).is_ok());
        assert!(check_key_binding(variable, "http://plain.internal:8080/v1", hosts()).is_err());
        assert!(check_key_binding(variable, "http://[::1]:9001/v1", hosts()).is_err());
        // Another port of a host bound with a port is another server.
        assert!(check_key_binding(variable, "http://vllm.internal:8001/v1", hosts()).is_err());
        // A suffix or prefix of a bound name is not that name.
        assert!(check_key_binding(
            variable,
            "http://vllm.internal.evil.example:8000/v1",
            hosts()
        )
        .is_err());
        // Unbound keys are sent nowhere.
        let unbound =
            check_key_binding(variable, "http://vllm.internal:8000/v1", None).unwrap_err();
        assert!(unbound.contains("bound to no host"), "{unbound}");
        // The host list is not a key.
        assert!(SecretBox::without_key()
            .to_stored("env:ARBITER_ENDPOINT_KEY_VLLM_HOSTS")
            .is_err());
    }

    #[test]
    fn environment_references_are_kept_and_checked() {
        let secrets = SecretBox::without_key();
        assert_eq!(secrets.to_stored("").unwrap(), None);
        assert_eq!(
            secrets
                .to_stored(" env:ARBITER_ENDPOINT_KEY_VLLM ")
                .unwrap()
                .as_deref(),
            Some("env:ARBITER_ENDPOINT_KEY_VLLM")
        );
        // Other variables could be sent to any endpoint a researcher names: refused.
        for refused in [
            "env:DATABASE_URL",
            "env:ARBITER_SECRET_KEY",
            "env:VLLM_KEY",
            "env:ARBITER_ENDPOINT_KEY_",
            "env:ARBITER_ENDPOINT_KEY_A-B",
        ] {
            let problem = secrets.to_stored(refused).unwrap_err();
            assert!(
                problem.contains("ARBITER_ENDPOINT_KEY_"),
                "{refused}: {problem}"
            );
        }
        assert!(secrets
            .resolve(Some("env:DATABASE_URL"))
            .unwrap_err()
            .contains("only variables"));
        // Without a key, a literal secret is refused rather than stored in clear.
        assert!(secrets
            .to_stored("sk-123")
            .unwrap_err()
            .contains("ARBITER_SECRET_KEY"));
        assert_eq!(
            describe(Some("env:ARBITER_ENDPOINT_KEY_VLLM")),
            "from the environment (ARBITER_ENDPOINT_KEY_VLLM)"
        );
        assert!(secrets
            .resolve(Some("env:ARBITER_ENDPOINT_KEY_SURELY_UNSET"))
            .unwrap_err()
            .contains("not set"));
        assert_eq!(secrets.resolve(None).unwrap(), None);
        assert!(SecretBox::from_hex("abc").is_err());
    }
}
