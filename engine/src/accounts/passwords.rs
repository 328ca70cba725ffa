//! Password hashing with Argon2id: new passwords hashed with a fresh salt, sign-ins checked
//! in constant work whether or not the account exists.
//!
//! CPU-heavy (about 19 MiB and tens of milliseconds per hash): callers run these on a blocking
//! thread.

use arbiter_domain::accounts::{PasswordHash, MIN_PASSWORD_LENGTH};
use argon2::password_hash::{rand_core::OsRng, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, PasswordHash as PhcString};

/// Hashes a new password with Argon2id (default parameters). CPU-heavy: call from a blocking task.
pub fn hash_password(password: &str) -> Result<PasswordHash, String> {
    if password.chars().count() < MIN_PASSWORD_LENGTH {
        return Err(format!(
            "a password needs at least {MIN_PASSWORD_LENGTH} characters"
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
