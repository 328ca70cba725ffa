//! Identity and authorization rules: roles, what each role may do, and password hashing.
//!
//! Pure domain code plus Argon2id; it knows nothing of HTTP, cookies or SQL. Callers check a
//! [`Permission`] on the server for every request — hiding a button is not security.

use argon2::password_hash::{rand_core::OsRng, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, PasswordHash as PhcString};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A person's single role. Ordered loosely by reach; permissions are listed explicitly below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Annotator,
    Reviewer,
    Researcher,
    Lead,
    Admin,
}

/// Something a request wants to do. Every server function and route names exactly one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permission {
    /// Upload datasets, register checkpoints, define evals, launch runs.
    ManageEvals,
    /// Read datasets, runs, results and comparisons.
    ViewResults,
    /// Take items from the human annotation queue and label them.
    Annotate,
    /// Create users and reset passwords; manage the rater pool.
    ManageUsers,
    /// Review raters' labels: accept, correct or reject them.
    Review,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Annotator,
        Role::Reviewer,
        Role::Researcher,
        Role::Lead,
        Role::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Annotator => "annotator",
            Role::Reviewer => "reviewer",
            Role::Researcher => "researcher",
            Role::Lead => "lead",
            Role::Admin => "admin",
        }
    }

    /// Annotators and reviewers see no model identities or results, so that labelling stays blind.
    pub fn can(self, permission: Permission) -> bool {
        use Permission::*;
        use Role::*;
        match permission {
            ManageEvals | ViewResults => matches!(self, Researcher | Lead | Admin),
            Annotate => matches!(self, Annotator | Reviewer | Lead | Admin),
            ManageUsers => matches!(self, Lead | Admin),
            Review => matches!(self, Reviewer | Lead | Admin),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| {
                format!("unknown role `{s}`; expected one of annotator, reviewer, researcher, lead, admin")
            })
    }
}

/// A validated login name: 1–64 characters of letters, digits, `.`, `_`, `-`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Username(String);

impl Username {
    pub fn parse(raw: &str) -> Result<Username, String> {
        let name = raw.trim();
        if name.is_empty() || name.len() > 64 {
            return Err("a username has 1 to 64 characters".into());
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err("a username may contain only letters, digits, '.', '_' and '-'".into());
        }
        Ok(Username(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An Argon2id PHC string. Deliberately neither `Serialize` nor `Debug`: it must never be sent
/// to a browser or written to a log.
#[derive(Clone)]
pub struct PasswordHash(String);

impl PasswordHash {
    /// Wraps a PHC string read from the store.
    pub fn from_stored(phc: String) -> PasswordHash {
        PasswordHash(phc)
    }

    pub fn as_phc(&self) -> &str {
        &self.0
    }
}

/// Passwords shorter than this are refused at creation and reset.
pub const MIN_PASSWORD_LENGTH: usize = 8;

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
        .map(|phc| PasswordHash(phc.to_string()))
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
    fn roles_round_trip_and_reject_unknown() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
        }
        assert!("root".parse::<Role>().unwrap_err().contains("unknown role"));
    }

    #[test]
    fn annotators_cannot_see_results_and_researchers_cannot_label() {
        assert!(!Role::Annotator.can(Permission::ViewResults));
        assert!(!Role::Annotator.can(Permission::ManageEvals));
        assert!(Role::Annotator.can(Permission::Annotate));
        assert!(!Role::Researcher.can(Permission::Annotate));
        assert!(Role::Researcher.can(Permission::ManageEvals));
        assert!(!Role::Researcher.can(Permission::ManageUsers));
        assert!(Role::Admin.can(Permission::ManageUsers));
    }

    #[test]
    fn password_hash_verifies_only_the_right_password() {
        let hash = hash_password("correct horse").unwrap();
        assert!(hash.as_phc().starts_with("$argon2id$"));
        assert!(verify_password(Some(&hash), "correct horse"));
        assert!(!verify_password(Some(&hash), "wrong horse"));
        assert!(!verify_password(None, "correct horse"));
        assert!(hash_password("short").is_err());
    }

    #[test]
    fn usernames_are_validated() {
        assert_eq!(Username::parse(" alice ").unwrap().as_str(), "alice");
        assert!(Username::parse("").is_err());
        assert!(Username::parse("al ice").is_err());
        assert!(Username::parse("<script>").is_err());
    }
}
