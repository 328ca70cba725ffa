//! Accounts: users and their roles, what each role may do, usernames, stored password hashes
//! and personal API tokens as their owners see them.
//!
//! Pure: hashing itself (Argon2id, with a random salt) is the engine's. Callers check a
//! [`Permission`] on the server for every request — hiding a button is not security.

use crate::ids::UserId;
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub id: UserId,
    pub username: String,
    pub role: Role,
    /// Fair-share group for runs this user launches.
    pub team: String,
    /// False once a lead deactivated the account: it can neither sign in nor use a session.
    pub active: bool,
    /// The first password was someone else's choice (an invitation): nothing but choosing a
    /// new one is allowed until then.
    #[serde(default)]
    pub must_change_password: bool,
    /// Sessions are valid only while they carry this number; a password change moves it on.
    /// The server's own: never sent to a browser.
    #[serde(skip)]
    pub session_epoch: i64,
}

impl User {
    /// Leads and admins act for every team: they may change any team's suites, runs and
    /// checkpoints.
    pub fn oversees_every_team(&self) -> bool {
        matches!(self.role, Role::Lead | Role::Admin)
    }

    /// Whether this user may change what `team` owns: its own members may, and leads and
    /// admins override. (Reading stays open to every researcher.)
    pub fn acts_for_team(&self, team: &str) -> bool {
        self.team == team || self.oversees_every_team()
    }
}

/// A personal API token as its owner and the admins see it: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: UserId,
    pub username: String,
    pub name: String,
    /// The token's first characters (`arb_` and 8 more), to tell tokens apart.
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

impl ApiToken {
    /// Usable at `now`: neither revoked nor expired.
    pub fn is_live(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|expires| expires > now)
    }
}

/// Sessions end this long after sign-in, however active (besides ending after 12 idle
/// hours): OWASP's absolute timeout, so a stolen cookie does not live for ever.
pub const DEFAULT_SESSION_MAX_AGE_HOURS: i64 = 7 * 24;

/// What a session carries about its sign-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStamp {
    pub user_id: UserId,
    /// The user's session epoch at sign-in (or at their own latest password change).
    pub epoch: i64,
    pub signed_in_at: i64,
}

/// Why a session no longer signs its holder in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnded {
    /// Older than the absolute lifetime.
    Expired,
    /// The password changed since (or an operator reset it): every older session ends.
    PasswordChanged,
    /// The account is gone.
    Gone,
}

impl SessionStamp {
    pub fn new(user: &User, now: i64) -> SessionStamp {
        SessionStamp {
            user_id: user.id,
            epoch: user.session_epoch,
            signed_in_at: now,
        }
    }

    /// Whether this session still signs `user` (the account it names, as stored now) in. (A
    /// deactivated account's session stays, so that it is told why it may do nothing.)
    pub fn check(&self, user: &User, now: i64, max_age_ms: i64) -> Result<(), SessionEnded> {
        if self.epoch != user.session_epoch {
            Err(SessionEnded::PasswordChanged)
        } else if now.saturating_sub(self.signed_in_at) >= max_age_ms {
            Err(SessionEnded::Expired)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_end_at_their_absolute_age_or_when_the_password_changes() {
        let mut user = User {
            id: UserId(7),
            username: "ann".into(),
            role: Role::Annotator,
            team: "default".into(),
            active: true,
            must_change_password: false,
            session_epoch: 3,
        };
        let hour = 3_600_000;
        let stamp = SessionStamp::new(&user, 1_000);
        let max_age = DEFAULT_SESSION_MAX_AGE_HOURS * hour;
        assert_eq!(stamp.check(&user, 1_000 + max_age - 1, max_age), Ok(()));
        assert_eq!(
            stamp.check(&user, 1_000 + max_age, max_age),
            Err(SessionEnded::Expired)
        );
        user.session_epoch = 4;
        assert_eq!(
            stamp.check(&user, 2_000, max_age),
            Err(SessionEnded::PasswordChanged)
        );
    }

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
    fn usernames_are_validated() {
        assert_eq!(Username::parse(" alice ").unwrap().as_str(), "alice");
        assert!(Username::parse("").is_err());
        assert!(Username::parse("al ice").is_err());
        assert!(Username::parse("<script>").is_err());
    }
}
