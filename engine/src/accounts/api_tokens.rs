//! Personal API tokens for the REST API and the `arbiter` CI commands.
//!
//! A token is `arb_` plus 40 random letters and digits (about 238 bits). The store keeps only
//! its SHA-256 and a short prefix to tell tokens apart; the whole token is shown once, when it
//! is made. A token acts as its owner with the owner's role, until it is revoked, expires, or
//! the owner is deactivated.

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::{ApiToken, User};
use arbiter_store::Store;
use rand::distributions::{Alphanumeric, DistString};
use sha2::{Digest, Sha256};

/// Every token starts with this, so that secret scanners and people can recognise one.
pub const TOKEN_PREFIX: &str = "arb_";
/// Random characters after the prefix: 40 × log2(62) ≈ 238 bits.
const SECRET_CHARS: usize = 40;
/// Characters of a token kept in clear to tell a user's tokens apart (`arb_` + 8).
const SHOWN_CHARS: usize = 12;
/// Longest name a token may have.
const MAX_NAME_CHARS: usize = 100;
/// Longest lifetime a token may be given, in days (it may also never expire).
pub const MAX_LIFETIME_DAYS: i64 = 3650;
/// Live tokens one user may hold: enough for every CI system, few enough to audit.
pub const MAX_TOKENS_PER_USER: usize = 50;

/// A freshly made token: the text to hand to its owner once, and what the store keeps.
pub struct GeneratedToken {
    pub plaintext: String,
    pub hash: String,
    pub prefix: String,
}

pub fn generate() -> GeneratedToken {
    let secret = Alphanumeric.sample_string(&mut rand::rngs::OsRng, SECRET_CHARS);
    let plaintext = format!("{TOKEN_PREFIX}{secret}");
    GeneratedToken {
        hash: hash_token(&plaintext),
        prefix: plaintext[..SHOWN_CHARS].to_string(),
        plaintext,
    }
}

/// The SHA-256 of a token, as stored and looked up.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The token in an `Authorization: Bearer …` header value; `None` for any other scheme.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|token| !token.is_empty())
}

/// Whether text has the shape of an Arbiter token (checked before any lookup).
pub fn well_formed(token: &str) -> bool {
    token.len() == TOKEN_PREFIX.len() + SECRET_CHARS
        && token.starts_with(TOKEN_PREFIX)
        && token[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric())
}

/// Makes a token for `owner`. Returns the stored record and the token's text, which is never
/// available again.
pub async fn create_token(
    store: &dyn Store,
    owner: &User,
    name: &str,
    lifetime_days: Option<i64>,
    now: i64,
) -> ServiceResult<(ApiToken, String)> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ServiceError::Invalid(
            "give the token a name that says where it is used (e.g. `nightly-ci`)".into(),
        ));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(ServiceError::Invalid(format!(
            "a token's name has at most {MAX_NAME_CHARS} characters"
        )));
    }
    let expires_at = match lifetime_days {
        None => None,
        Some(days) if (1..=MAX_LIFETIME_DAYS).contains(&days) => Some(now + days * 86_400_000),
        Some(days) => {
            return Err(ServiceError::Invalid(format!(
                "a token lives from 1 to {MAX_LIFETIME_DAYS} days (or never expires), not {days}"
            )))
        }
    };
    let live = store
        .api_tokens(Some(owner.id))
        .await?
        .iter()
        .filter(|token| token.is_live(now))
        .count();
    if live >= MAX_TOKENS_PER_USER {
        return Err(ServiceError::Conflict(format!(
            "you already hold {live} live tokens; revoke unused ones first"
        )));
    }
    let generated = generate();
    let token = store
        .insert_api_token(
            owner.id,
            name,
            &generated.hash,
            &generated.prefix,
            expires_at,
            now,
        )
        .await?;
    tracing::info!(user = %owner.username, token = token.id, prefix = %token.prefix, "API token created");
    Ok((token, generated.plaintext))
}

/// The active user a presented token acts for. Every failure reads the same to the caller, so
/// that a probe learns nothing about which tokens exist.
pub async fn authenticate(store: &dyn Store, presented: &str, now: i64) -> ServiceResult<User> {
    const REFUSED: &str =
        "the API token is missing, unknown, revoked or expired; send `Authorization: Bearer arb_…`";
    if !well_formed(presented) {
        return Err(ServiceError::Unauthorized(REFUSED.into()));
    }
    match store.user_for_token(&hash_token(presented), now).await? {
        Some(user) if user.active => Ok(user),
        _ => Err(ServiceError::Unauthorized(REFUSED.into())),
    }
}

/// Revokes a token: its owner may revoke it, and so may a user who manages users.
pub async fn revoke_token(
    store: &dyn Store,
    actor: &User,
    token_id: i64,
    now: i64,
) -> ServiceResult<()> {
    let owner = (!actor
        .role
        .can(arbiter_domain::accounts::Permission::ManageUsers))
    .then_some(actor.id);
    if store.revoke_api_token(token_id, owner, now).await? {
        tracing::info!(user = %actor.username, token = token_id, "API token revoked");
        Ok(())
    } else {
        Err(ServiceError::NotFound(format!(
            "no live token {token_id} that you may revoke"
        )))
    }
}

/// The tokens `actor` may see: their own, or everyone's for those who manage users.
pub async fn visible_tokens(store: &dyn Store, actor: &User) -> ServiceResult<Vec<ApiToken>> {
    let owner = (!actor
        .role
        .can(arbiter_domain::accounts::Permission::ManageUsers))
    .then_some(actor.id);
    Ok(store.api_tokens(owner).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_well_formed_distinct_and_hashed() {
        let first = generate();
        let second = generate();
        assert!(well_formed(&first.plaintext), "{}", first.plaintext);
        assert_ne!(first.plaintext, second.plaintext);
        assert_eq!(first.hash, hash_token(&first.plaintext));
        assert_eq!(first.hash.len(), 64);
        assert!(!first.hash.contains(&first.plaintext[4..]));
        assert!(first.plaintext.starts_with(&first.prefix));
        assert_eq!(first.prefix.len(), 12);
    }

    #[test]
    fn malformed_tokens_are_refused_before_lookup() {
        let token = generate().plaintext;
        assert!(!well_formed(&token[..token.len() - 1]));
        assert!(!well_formed(&token.replacen("arb_", "abc_", 1)));
        assert!(!well_formed(&format!("{}!", &token[..token.len() - 1])));
        assert!(!well_formed(""));
    }

    #[test]
    fn bearer_headers_are_parsed_case_insensitively() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("abc"), None);
    }

    #[test]
    fn sha256_matches_a_published_vector() {
        // FIPS 180-2 example: SHA-256("abc").
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
