//! Items pushed from outside into a labelling queue, and read back with their labels: how
//! teams route production traces or another tool's outputs to raters.
//!
//! A queue belongs to the team of whoever first pushed to it; only that team's members, leads
//! and admins push to it or read it back (the items may be production data).

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::User;
use arbiter_domain::annotation::adjudication::check_skill;
use arbiter_domain::annotation::preference::MAX_RATERS_PER_PAIR;
use arbiter_domain::annotation::pushed::{
    check_queue_name, PushReceipt, PushedItem, PushedRecord, MAX_ITEMS_PER_PUSH,
};
use arbiter_domain::run::Priority;
use arbiter_store::pushed::NewPush;
use arbiter_store::Store;
use serde::Deserialize;

/// Most items one read returns.
pub const MAX_ITEMS_PER_READ: i64 = 500;

/// A push as the API receives it.
#[derive(Clone, Debug, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    /// The queue's name; made on the first push.
    pub queue: String,
    /// A rubric's name: single outputs are labelled by its newest version (which must say
    /// which answer passes). Without one, raters answer pass or fail.
    #[serde(default)]
    pub rubric: Option<String>,
    /// Raters per item, 1 to 5 (default 1).
    #[serde(default = "one")]
    pub raters: i64,
    /// `promotion`, `scheduled` (the default) or `ablation`: the order raters are served in
    /// and the SLA the items are due by.
    #[serde(default)]
    pub priority: String,
    /// Only raters with this skill are offered the items.
    #[serde(default)]
    pub skill: Option<String>,
    pub items: Vec<PushedItem>,
}

fn one() -> i64 {
    1
}

/// Checks the push and queues its new items (all of them, or none on any error).
pub async fn push_items(
    store: &dyn Store,
    user: &User,
    request: PushRequest,
) -> ServiceResult<Vec<PushReceipt>> {
    let invalid = |message: String| Err(ServiceError::Invalid(message));
    check_queue_name(&request.queue).map_err(ServiceError::Invalid)?;
    if request.items.is_empty() {
        return invalid("the push holds no items".into());
    }
    if request.items.len() > MAX_ITEMS_PER_PUSH {
        return invalid(format!(
            "the push holds {} items; send at most {MAX_ITEMS_PER_PUSH} at a time",
            request.items.len()
        ));
    }
    if !(1..=MAX_RATERS_PER_PAIR).contains(&request.raters) {
        return invalid(format!(
            "raters per item is a whole number from 1 to {MAX_RATERS_PER_PAIR}, not {}",
            request.raters
        ));
    }
    let priority = Priority::from_form(&request.priority).map_err(ServiceError::Invalid)?;
    let skill = match request.skill.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(skill) => {
            check_skill(skill).map_err(ServiceError::Invalid)?;
            Some(skill.to_string())
        }
    };
    for (index, item) in request.items.iter().enumerate() {
        item.check()
            .map_err(|why| ServiceError::Invalid(format!("item {index} {why}")))?;
    }
    let rubric_id = match request.rubric.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(name) => {
            if let Some(index) = request.items.iter().position(PushedItem::is_pair) {
                return invalid(format!(
                    "item {index} has two outputs: a pair is answered A, B, tie or both bad, not by a rubric; push pairs without `rubric`"
                ));
            }
            let rubric = store
                .latest_rubric(name)
                .await?
                .ok_or_else(|| ServiceError::NotFound(format!("no rubric is named `{name}`")))?;
            crate::rubrics::check_decides(&rubric)?;
            Some(rubric.id)
        }
    };
    require_queue_team(store, user, &request.queue, "push to").await?;
    let push = NewPush {
        queue: request.queue,
        team: user.team.clone(),
        rubric_id,
        labels_needed: request.raters,
        priority,
        skill,
        pushed_by: user.id,
        items: request.items,
    };
    Ok(store.push_items(&push).await?)
}

/// The queue's items after task id `after`, in push order, with their outcomes and labels.
pub async fn pushed_items(
    store: &dyn Store,
    user: &User,
    queue: &str,
    after: i64,
    limit: i64,
) -> ServiceResult<Vec<PushedRecord>> {
    if !(1..=MAX_ITEMS_PER_READ).contains(&limit) {
        return Err(ServiceError::Invalid(format!(
            "limit is a whole number from 1 to {MAX_ITEMS_PER_READ}, not {limit}"
        )));
    }
    if store.pushed_queue_team(queue).await?.is_none() {
        return Err(ServiceError::NotFound(format!(
            "no queue of pushed items is named `{queue}`"
        )));
    }
    require_queue_team(store, user, queue, "read").await?;
    Ok(store.pushed_items(queue, after, limit).await?)
}

/// Refuses a caller outside the queue's team (a queue not made yet is anyone's to make).
async fn require_queue_team(
    store: &dyn Store,
    user: &User,
    queue: &str,
    action: &str,
) -> ServiceResult<()> {
    match store.pushed_queue_team(queue).await? {
        Some(team) if !user.acts_for_team(&team) => Err(ServiceError::Forbidden(format!(
            "queue `{queue}` belongs to team `{team}`; only its members, leads and admins may {action} it"
        ))),
        _ => Ok(()),
    }
}
