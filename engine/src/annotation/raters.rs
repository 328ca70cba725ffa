//! The rater pool: invitations (an account, its place in the pool, a first password and an
//! email), the pool's figures, and a lead's changes (role, pause, deactivation, training,
//! skills, capacity).

use crate::accounts::passwords::hash_password;
use crate::annotation::quality::quality_threshold;
use crate::clients::mail::{parse_address, Mailer};
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::{Role, Username};
use arbiter_domain::annotation::adjudication::parse_skills;
use arbiter_domain::annotation::pool::{rater_stats, NewRater, RaterStats, RaterUpdate};
use arbiter_domain::ids::UserId;
use arbiter_store::{now_ms, Store};
use serde::Serialize;

/// A rater a lead invites, as typed.
#[derive(Clone, Debug, Default)]
pub struct Invitation {
    pub username: String,
    pub role: String,
    pub email: String,
    pub skills: String,
    pub weekly_capacity_hours: String,
    /// Start in training (gold items with feedback until they pass).
    pub training: bool,
}

/// The invited rater's first password, shown once to the lead and emailed to the rater when
/// they have an address.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Invited {
    pub user_id: UserId,
    pub username: String,
    pub password: String,
    /// What happened to the invitation email, in words.
    pub emailed: String,
}

/// Roles a lead may give in the rater pool; making admins is left to the admin command.
fn pool_role(text: &str) -> ServiceResult<Role> {
    match text.trim() {
        "" => Ok(Role::Annotator),
        other => match other.parse::<Role>() {
            Ok(Role::Admin) => Err(ServiceError::Invalid(
                "admins are made with `arbiter user`, not from the rater pool".into(),
            )),
            Ok(role) => Ok(role),
            Err(_) => Err(ServiceError::Invalid(format!(
                "unknown role `{other}`; use annotator, reviewer, researcher or lead"
            ))),
        },
    }
}

fn capacity_hours(text: &str) -> ServiceResult<f64> {
    if text.trim().is_empty() {
        return Ok(0.0);
    }
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|hours| (0.0..=168.0).contains(hours))
        .ok_or_else(|| {
            ServiceError::Invalid(format!(
                "weekly capacity is hours from 0 to 168, not `{text}`"
            ))
        })
}

fn optional_email(text: &str) -> ServiceResult<Option<String>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse_address(text).map(Some).map_err(ServiceError::Invalid)
}

/// Creates a rater's account with a random first password. Everything is checked before
/// anything is stored; the account is one row.
pub async fn invite_rater(
    store: &dyn Store,
    mailer: &Mailer,
    invitation: &Invitation,
) -> ServiceResult<Invited> {
    let username = Username::parse(&invitation.username).map_err(ServiceError::Invalid)?;
    let new = NewRater {
        username: username.as_str().to_string(),
        role: pool_role(&invitation.role)?,
        email: optional_email(&invitation.email)?,
        skills: parse_skills(&invitation.skills).map_err(ServiceError::Invalid)?,
        weekly_capacity_hours: capacity_hours(&invitation.weekly_capacity_hours)?,
        training: invitation.training,
    };
    let password = first_password();
    let to_hash = password.clone();
    let hash = crate::accounts::passwords::bounded(move || hash_password(&to_hash))
        .await?
        .map_err(ServiceError::Invalid)?;
    let user_id = store.invite_rater(&new, &hash).await?;
    let emailed = match &new.email {
        None => "no email address given: pass the password on yourself".to_string(),
        Some(address) => {
            let training_note = if new.training {
                "\nYou start with training items: you see the right answer after each one."
            } else {
                ""
            };
            let body = format!(
                "You have been invited to label items in Arbiter as `{}` ({}).\n\n\
                 Your first password is: {password}\n\nAsk your lead to change it after you sign in.{training_note}",
                new.username,
                new.role.as_str(),
            );
            match mailer
                .send(
                    std::slice::from_ref(address),
                    "Your Arbiter rater account",
                    &body,
                )
                .await
            {
                Ok(()) => format!("invitation sent to {address} via {}", mailer.describe()),
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), "invitation email not sent");
                    format!(
                        "the invitation email to {address} could not be sent; pass the password on yourself"
                    )
                }
            }
        }
    };
    Ok(Invited {
        user_id,
        username: new.username,
        password,
        emailed,
    })
}

/// A first password: 16 characters from an alphabet without look-alikes.
fn first_password() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::thread_rng();
    (0..16)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Every rater's figures, flagged against the lead's threshold.
pub async fn rater_table(store: &dyn Store) -> ServiceResult<(Vec<RaterStats>, f64)> {
    let threshold = quality_threshold(store).await?;
    let records = store.raters().await?;
    Ok((rater_stats(&records, now_ms(), threshold), threshold))
}

/// A lead's change to a rater, as typed ('' leaves a field as it is).
#[derive(Clone, Debug, Default)]
pub struct RaterForm {
    /// `pause`, `resume`, `deactivate`, `activate`, `train` (back to training items),
    /// `end-training` or ''.
    pub action: String,
    pub skills: Option<String>,
    pub weekly_capacity_hours: Option<String>,
    pub role: Option<String>,
    /// '' removes the address.
    pub email: Option<String>,
}

/// Applies a lead's (or an admin's) change to one account of the pool. Leads never act on
/// admins: an admin's account is changed by another admin or with `arbiter user`.
pub async fn update_rater(
    store: &dyn Store,
    actor_id: UserId,
    rater_id: UserId,
    form: &RaterForm,
) -> ServiceResult<()> {
    let target = store
        .get_user(rater_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no user with id {rater_id}")))?;
    let actor_is_admin = store
        .get_user(actor_id)
        .await?
        .is_some_and(|actor| actor.role == Role::Admin);
    if target.role == Role::Admin && !actor_is_admin {
        return Err(ServiceError::Forbidden(format!(
            "`{}` is an admin: only an admin changes an admin's account",
            target.username
        )));
    }
    let mut update = RaterUpdate::default();
    match form.action.trim() {
        "" => {}
        "pause" => update.paused = Some(true),
        "resume" => update.paused = Some(false),
        "deactivate" if rater_id == actor_id => {
            return Err(ServiceError::Invalid(
                "you cannot deactivate your own account".into(),
            ))
        }
        "deactivate" => update.active = Some(false),
        "activate" => update.active = Some(true),
        "train" => update.training = Some(true),
        "end-training" => update.training = Some(false),
        other => {
            return Err(ServiceError::Invalid(format!(
                "unknown action `{other}`; use pause, resume, deactivate, activate, train or end-training"
            )))
        }
    }
    if let Some(role) = form.role.as_deref().filter(|role| !role.trim().is_empty()) {
        let role = pool_role(role)?;
        // The row form always sends the role shown; only a change is one.
        if target.role != role {
            if rater_id == actor_id {
                return Err(ServiceError::Invalid(
                    "you cannot change your own role".into(),
                ));
            }
            update.role = Some(role);
        }
    }
    if let Some(email) = &form.email {
        update.email = Some(optional_email(email)?);
    }
    if let Some(skills) = &form.skills {
        update.skills = Some(parse_skills(skills).map_err(ServiceError::Invalid)?);
    }
    if let Some(hours) = &form.weekly_capacity_hours {
        update.weekly_capacity_hours = Some(capacity_hours(hours)?);
    }
    if target.role == Role::Admin && update.role.is_some() {
        return Err(ServiceError::Invalid(
            "an admin's role is changed with `arbiter user`, not from the rater pool".into(),
        ));
    }
    if update == RaterUpdate::default() {
        return Err(ServiceError::Invalid("nothing to change".into()));
    }
    Ok(store.update_rater(rater_id, &update).await?)
}
