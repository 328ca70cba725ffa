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
    let hash = tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|_| ServiceError::Internal)?
        .map_err(ServiceError::Invalid)?;
    Ok(store.create_user(username.as_str(), &hash, role).await?)
}

pub async fn reset_password(
    store: &dyn Store,
    username: &str,
    password: &str,
) -> ServiceResult<()> {
    let password = password.to_string();
    let hash = tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|_| ServiceError::Internal)?
        .map_err(ServiceError::Invalid)?;
    if store.set_password(username, &hash).await? {
        Ok(())
    } else {
        Err(ServiceError::NotFound(format!(
            "no user named `{username}`"
        )))
    }
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
    let verified = tokio::task::spawn_blocking(move || {
        crate::accounts::passwords::verify_password(hash.as_ref(), &password)
    })
    .await
    .map_err(|_| ServiceError::Internal)?;
    match user.filter(|_| verified) {
        // Said only to someone who knows the password, so it reveals nothing to a guesser.
        Some(user) if !user.active => Err(ServiceError::Forbidden(
            "this account is deactivated; ask a lead to reactivate it".into(),
        )),
        user => Ok(user),
    }
}
