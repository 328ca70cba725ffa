//! Accounts: creating users, resetting passwords, teams and their fair-share weights, and
//! signing in; with password hashing, personal API tokens and the login throttle beside them.

use crate::accounts::passwords::hash_password;
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::{Role, Username};
use arbiter_domain::ids::UserId;
use arbiter_store::Store;

pub mod api_tokens;
pub mod login_throttle;
pub mod passwords;

/// Creates a user (CLI and demo). Hashing runs on a blocking thread.
pub async fn create_user(
    store: &dyn Store,
    username: &str,
    password: &str,
    role: Role,
) -> ServiceResult<UserId> {
    let username = Username::parse(username).map_err(ServiceError::Invalid)?;
    let password = password.to_string();
    let hash = passwords::bounded(move || hash_password(&password))
        .await?
        .map_err(ServiceError::Invalid)?;
    Ok(store.create_user(username.as_str(), &hash, role).await?)
}

/// An operator's reset: the new password, every session of the user ended, every API token
/// of theirs revoked (whoever knew the old password may have made one), and a change of
/// password required at the next sign-in (the operator knows this one). Returns how many
/// tokens were revoked.
pub async fn reset_password(
    store: &dyn Store,
    username: &str,
    password: &str,
    now: i64,
) -> ServiceResult<u64> {
    let password = password.to_string();
    let hash = passwords::bounded(move || hash_password(&password))
        .await?
        .map_err(ServiceError::Invalid)?;
    store
        .reset_password(username, &hash, now)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no user named `{username}`")))
}

/// A user's own change: the current password must be right (checked under the same bound as
/// sign-ins), the new one must differ and be confirmed. Every other session of the user ends;
/// returns the epoch the caller's own session must carry to stay valid.
/// Wrong current passwords count against the account in `throttle`, as failed sign-ins do,
/// so a stolen session cannot guess its way to the password.
pub async fn change_password(
    store: &dyn Store,
    throttle: &login_throttle::LoginThrottle,
    user: &arbiter_domain::accounts::User,
    current: &str,
    new: &str,
    confirmation: &str,
) -> ServiceResult<i64> {
    if new != confirmation {
        return Err(ServiceError::Invalid(
            "the new password and its confirmation differ".into(),
        ));
    }
    if new == current {
        return Err(ServiceError::Invalid(
            "choose a password other than the current one".into(),
        ));
    }
    let credentials = store
        .find_user_credentials(&user.username)
        .await?
        .filter(|credentials| credentials.user.id == user.id)
        .ok_or_else(|| ServiceError::NotFound("your account is gone".into()))?;
    let attempt = throttle
        .reserve(&user.username, None, std::time::Instant::now())
        .map_err(|locked| ServiceError::Throttled(locked.message()))?;
    let current = current.to_string();
    let checked = passwords::bounded(move || {
        passwords::verify_password(Some(&credentials.password_hash), &current)
    })
    .await;
    let right = match checked {
        Ok(right) => right,
        Err(busy) => {
            attempt.not_tried();
            return Err(busy);
        }
    };
    if right {
        attempt.succeeded();
    } else {
        // The reservation stays: a failure.
        drop(attempt);
        return Err(ServiceError::Forbidden(
            "the current password is not right".into(),
        ));
    }
    let new = new.to_string();
    let hash = passwords::bounded(move || hash_password(&new))
        .await?
        .map_err(ServiceError::Invalid)?;
    store
        .change_password(user.id, &hash)
        .await?
        .ok_or_else(|| ServiceError::NotFound("your account is gone".into()))
}

/// A team name, trimmed, or why it is not one.
pub(crate) fn valid_team(team: &str) -> ServiceResult<&str> {
    let team = team.trim();
    let valid = !team.is_empty()
        && team.len() <= 64
        && team
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(team)
    } else {
        Err(ServiceError::Invalid(
            "a team name has 1 to 64 letters, digits, '.', '_' or '-'".into(),
        ))
    }
}

/// Weights between 1/100 and 100: a team's share of a shared endpoint relative to others.
pub const TEAM_WEIGHT_RANGE: std::ops::RangeInclusive<f64> = 0.01..=100.0;

/// Sets a team's fair-share weight: with weights 2 and 1, the first team gets two thirds of a
/// contended endpoint within a priority class.
pub async fn set_team_weight(store: &dyn Store, team: &str, weight: f64) -> ServiceResult<()> {
    let team = valid_team(team)?;
    if !weight.is_finite() || !TEAM_WEIGHT_RANGE.contains(&weight) {
        return Err(ServiceError::Invalid(format!(
            "a team weight is a number from {} to {}",
            TEAM_WEIGHT_RANGE.start(),
            TEAM_WEIGHT_RANGE.end()
        )));
    }
    Ok(store.set_team_weight(team, weight).await?)
}

/// Moves a user to a team: runs they launch share endpoints fairly with other teams' runs.
pub async fn set_team(store: &dyn Store, username: &str, team: &str) -> ServiceResult<()> {
    let team = valid_team(team)?;
    if store.set_team(username, team).await? {
        Ok(())
    } else {
        Err(ServiceError::NotFound(format!(
            "no user named `{username}`"
        )))
    }
}

/// Checks a login. Unknown users and wrong passwords are indistinguishable, in answer and time.
pub async fn authenticate(
    store: &dyn Store,
    username: &str,
    password: &str,
) -> ServiceResult<Option<arbiter_domain::accounts::User>> {
    let credentials = store.find_user_credentials(username.trim()).await?;
    let password = password.to_string();
    let (hash, user) = match credentials {
        Some(credentials) => (Some(credentials.password_hash), Some(credentials.user)),
        None => (None, None),
    };
    let verified =
        passwords::bounded(move || passwords::verify_password(hash.as_ref(), &password)).await?;
    match user.filter(|_| verified) {
        // Said only to someone who knows the password, so it reveals nothing to a guesser.
        Some(user) if !user.active => Err(ServiceError::Forbidden(
            "this account is deactivated; ask a lead to reactivate it".into(),
        )),
        user => Ok(user),
    }
}
