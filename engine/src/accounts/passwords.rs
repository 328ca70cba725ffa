//! Password hashing with Argon2id: new passwords hashed with a fresh salt, sign-ins checked
//! in constant work whether or not the account exists.
//!
//! CPU-heavy (about 19 MiB and tens of milliseconds per hash): callers run them through
//! [`bounded`], which runs a few at a time on blocking threads and turns a crowd away, so a
//! burst of anonymous sign-ins can exhaust neither memory nor the blocking pool.

use arbiter_domain::accounts::{PasswordHash, MIN_PASSWORD_LENGTH};
use argon2::password_hash::{rand_core::OsRng, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, PasswordHash as PhcString};

/// Longest password accepted: more is no stronger, only more work to hash.
pub const MAX_PASSWORD_LENGTH: usize = 1024;

/// Password checks running at once: one per core (at least two). With 19 MiB each, the peak
/// is a few tens of MiB whatever arrives.
fn concurrent_checks() -> usize {
    std::thread::available_parallelism().map_or(2, |cores| cores.get().max(2))
}

/// Checks waiting for a turn before more are turned away (each waits with only its request).
const MAX_WAITING: usize = 64;

/// Runs one hashing or verification job on a blocking thread when a slot is free: `Err` when
/// too many are already waiting.
pub async fn bounded<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, crate::error::ServiceError> {
    use crate::error::ServiceError;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    static QUEUED: AtomicUsize = AtomicUsize::new(0);
    let slots = SLOTS.get_or_init(|| tokio::sync::Semaphore::new(concurrent_checks()));
    // Counted from arrival until the job ends, so the bound covers the running ones too.
    struct Queued;
    impl Drop for Queued {
        fn drop(&mut self) {
            QUEUED.fetch_sub(1, Ordering::AcqRel);
        }
    }
    if QUEUED.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING + concurrent_checks() {
        QUEUED.fetch_sub(1, Ordering::AcqRel);
        return Err(ServiceError::Busy(
            "the server is checking many passwords at once; try again in a moment".into(),
        ));
    }
    let queued = Queued;
    let slot = slots.acquire().await.map_err(|_| ServiceError::Internal)?;
    // The slot and the count go with the job: a request dropped mid-check (its client went
    // away) must not free them while Argon2 still runs on the blocking pool.
    tokio::task::spawn_blocking(move || {
        let _held = (queued, slot);
        job()
    })
    .await
    .map_err(|_| ServiceError::Internal)
}

/// Hashes a new password with Argon2id (default parameters). CPU-heavy: call from a blocking task.
pub fn hash_password(password: &str) -> Result<PasswordHash, String> {
    if password.chars().count() < MIN_PASSWORD_LENGTH {
        return Err(format!(
            "a password needs at least {MIN_PASSWORD_LENGTH} characters"
        ));
    }
    if password.len() > MAX_PASSWORD_LENGTH {
        return Err(format!(
            "a password has at most {MAX_PASSWORD_LENGTH} characters"
        ));
    }
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|phc| PasswordHash::from_stored(phc.to_string()))
        .map_err(|err| format!("could not hash the password: {err}"))
}

/// Checks a password against a stored hash, or against a fixed dummy hash when the user is
/// unknown, so that the response time does not reveal whether an account exists.
/// CPU-heavy: call from a blocking task.
pub fn verify_password(stored: Option<&PasswordHash>, password: &str) -> bool {
    // Hashed once per process from a random string, so verifying it costs the same as
    // verifying a real user's hash and can never succeed.
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dummy = DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut OsRng);
        Argon2::default()
            .hash_password(salt.as_str().as_bytes(), &salt)
            .map(|phc| phc.to_string())
            .unwrap_or_default()
    });
    // Too long to be a password of ours (hash_password refuses it): no work for it.
    if password.len() > MAX_PASSWORD_LENGTH {
        return false;
    }
    let (phc, is_real) = match stored {
        Some(hash) => (hash.as_phc(), true),
        None => (dummy.as_str(), false),
    };
    let Ok(parsed) = PhcString::new(phc) else {
        return false;
    };
    let matches = Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok();
    matches && is_real
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_hash_verifies_only_the_right_password() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.as_phc().starts_with("$argon2id$"));
        assert!(verify_password(Some(&hash), "correct horse"));
        assert!(!verify_password(Some(&hash), "wrong horse"));
        assert!(!verify_password(None, "correct horse"));
        assert!(hash_password("short").is_err());
    }
}
