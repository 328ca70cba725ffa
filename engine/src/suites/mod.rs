//! Checkpoints in: a training job announces a checkpoint (through the API or a watched
//! directory) and tiered suites launch on it — every smoke suite on every checkpoint, each full
//! suite on every Nth checkpoint of its training run or on demand — at the priority its
//! decision value calls for.

pub mod announcements;

use arbiter_domain::accounts::User;
use arbiter_domain::ids::{CheckpointId, EvalId, RunId, UserId};
use arbiter_domain::run::Priority;
use serde::{Deserialize, Serialize};

use crate::catalog::CheckpointForm;
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::suites::{suites_due, NewSuite, Suite, TIER_FULL, TIER_SMOKE};
use arbiter_store::Store;

/// Most evals one suite may hold.
const MAX_SUITE_EVALS: usize = 200;

/// A suite as typed into the form or posted to the API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuiteForm {
    pub name: String,
    /// `smoke` or `full`.
    pub tier: String,
    /// Full suites: every Nth checkpoint of a training run (0: on demand only). Ignored for
    /// smoke suites, which run on every checkpoint.
    #[serde(default)]
    pub every_nth: Option<i64>,
    /// Only checkpoints of this training run (empty: any).
    #[serde(default)]
    pub training_run: String,
    /// The fair-share team its runs are charged to (empty: the creator's).
    #[serde(default)]
    pub team: String,
    pub eval_ids: Vec<EvalId>,
}

/// Creates a suite. Its runs are charged to `default_team` (the creator's), or to the team the
/// form names when `may_choose_team` (leads and admins): a researcher may not bill another
/// team or invent one for a larger fair share.
pub async fn create_suite(
    store: &dyn Store,
    form: &SuiteForm,
    default_team: &str,
    may_choose_team: bool,
    created_by: Option<UserId>,
) -> ServiceResult<i64> {
    let name = form.name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(ServiceError::Invalid(
            "a suite needs a name of 1 to 100 characters".into(),
        ));
    }
    let tier = form.tier.trim();
    let every_nth = match (tier, form.every_nth) {
        (TIER_SMOKE, _) => 1,
        (TIER_FULL, None) => 1,
        (TIER_FULL, Some(n)) if (0..=10_000).contains(&n) => n,
        (TIER_FULL, Some(n)) => {
            return Err(ServiceError::Invalid(format!(
                "a full suite runs every 1 to 10000 checkpoints (or 0: on demand only), not every {n}"
            )))
        }
        (other, _) => {
            return Err(ServiceError::Invalid(format!(
                "a suite's tier is `smoke` (every checkpoint) or `full` (every Nth, or on demand), not `{other}`"
            )))
        }
    };
    let mut eval_ids = form.eval_ids.clone();
    eval_ids.sort_unstable();
    eval_ids.dedup();
    if eval_ids.is_empty() || eval_ids.len() > MAX_SUITE_EVALS {
        return Err(ServiceError::Invalid(format!(
            "a suite holds 1 to {MAX_SUITE_EVALS} evals"
        )));
    }
    let team = match form.team.trim() {
        "" => default_team,
        team if team == default_team => team,
        team if may_choose_team => crate::accounts::valid_team(team)?,
        team => {
            return Err(ServiceError::Forbidden(format!(
                "a suite's runs are charged to your team (`{default_team}`); only leads and admins may name `{team}`"
            )))
        }
    };
    Ok(store
        .create_suite(
            &NewSuite {
                name: name.to_string(),
                tier: tier.to_string(),
                every_nth,
                training_run: form.training_run.trim().to_string(),
                team: team.to_string(),
                eval_ids,
            },
            created_by,
            arbiter_store::now_ms(),
        )
        .await?)
}

/// One run a trigger launched (or tried to).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TriggeredRun {
    pub suite: String,
    pub eval_id: EvalId,
    pub eval: String,
    /// The run; `None` when the launch was refused (see `error`).
    pub run_id: Option<RunId>,
    /// False when an identical manifest had run before (that run is reused).
    pub created: bool,
    pub reason: String,
    pub error: Option<String>,
}

/// Launches `suites` (with their reasons) on a checkpoint. One eval's failure does not stop
/// the others; each is reported.
async fn launch_suites(
    store: &dyn Store,
    checkpoint_id: CheckpointId,
    suites: &[(&Suite, String)],
    priority: Priority,
    launched_by: Option<UserId>,
) -> ServiceResult<Vec<TriggeredRun>> {
    let mut launched = Vec::new();
    for (suite, reason) in suites {
        for (eval_id, eval_name) in &suite.evals {
            let outcome = crate::runs::launch_run(
                store,
                *eval_id,
                checkpoint_id,
                priority,
                &suite.team,
                launched_by,
            )
            .await;
            let mut triggered = TriggeredRun {
                suite: suite.name.clone(),
                eval_id: *eval_id,
                eval: eval_name.clone(),
                run_id: None,
                created: false,
                reason: reason.clone(),
                error: None,
            };
            match outcome {
                Ok(run) => {
                    store
                        .record_suite_launch(
                            suite.id,
                            checkpoint_id,
                            run.run_id,
                            reason,
                            arbiter_store::now_ms(),
                        )
                        .await?;
                    triggered.run_id = Some(run.run_id);
                    triggered.created = run.created;
                }
                Err(ServiceError::Internal) => return Err(ServiceError::Internal),
                Err(refused) => {
                    tracing::warn!(suite = %suite.name, eval = %eval_name, checkpoint = checkpoint_id.get(), error = %refused, "suite launch refused");
                    triggered.error = Some(refused.to_string());
                }
            }
            launched.push(triggered);
        }
    }
    Ok(launched)
}

/// Runs what a newly registered checkpoint is due: its smoke suites and the full suites whose
/// turn it is. A person's registration starts only the suites of teams they act for (a suite's
/// runs are charged to its team, at the priority the registrant picks); the operator's
/// announcements (`registrant` `None`: a watched folder) start every team's.
pub async fn trigger_new_checkpoint(
    store: &dyn Store,
    checkpoint_id: CheckpointId,
    priority: Priority,
    registrant: Option<&User>,
) -> ServiceResult<Vec<TriggeredRun>> {
    let (training_run, position) = store
        .checkpoint_position(checkpoint_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no checkpoint with id {checkpoint_id}")))?;
    let suites = store.suites().await?;
    let mut due = suites_due(&suites, &training_run, position);
    if let Some(user) = registrant {
        due.retain(|(suite, _)| user.acts_for_team(&suite.team));
    }
    launch_suites(
        store,
        checkpoint_id,
        &due,
        priority,
        registrant.map(|user| user.id),
    )
    .await
}

/// Runs one suite on a checkpoint now, whatever its tier and turn. Its runs are charged to the
/// suite's team, so only that team's members (and leads and admins) may start them.
pub async fn run_suite_on_demand(
    store: &dyn Store,
    user: &User,
    checkpoint_id: CheckpointId,
    suite_name: &str,
    priority: Priority,
) -> ServiceResult<Vec<TriggeredRun>> {
    store
        .checkpoint_position(checkpoint_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no checkpoint with id {checkpoint_id}")))?;
    let suites = store.suites().await?;
    let suite = suites
        .iter()
        .find(|suite| suite.name == suite_name.trim())
        .ok_or_else(|| ServiceError::NotFound(format!("no suite named `{suite_name}`")))?;
    require_team(user, suite, "run it on demand")?;
    launch_suites(
        store,
        checkpoint_id,
        &[(suite, "on demand".to_string())],
        priority,
        Some(user.id),
    )
    .await
}

/// Deletes a suite (its past runs stay), if `user` acts for its team.
pub async fn delete_suite(store: &dyn Store, user: &User, suite_id: i64) -> ServiceResult<()> {
    let suites = store.suites().await?;
    let suite = suites
        .iter()
        .find(|suite| suite.id == suite_id)
        .ok_or_else(|| ServiceError::NotFound(format!("no suite with id {suite_id}")))?;
    require_team(user, suite, "delete it")?;
    if store.delete_suite(suite_id).await? {
        Ok(())
    } else {
        Err(ServiceError::NotFound(format!(
            "no suite with id {suite_id}"
        )))
    }
}

fn require_team(user: &User, suite: &Suite, action: &str) -> ServiceResult<()> {
    if user.acts_for_team(&suite.team) {
        Ok(())
    } else {
        Err(ServiceError::Forbidden(format!(
            "the suite `{}` belongs to team `{}`; only its members, leads and admins may {action}",
            suite.name, suite.team
        )))
    }
}

/// A checkpoint as a training job announces it: through `POST /api/v1/checkpoints` or as a
/// JSON file in a watched directory (or a line of a watched JSON Lines manifest).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Announcement {
    /// Unique name, e.g. `sft-v3-step-12000`.
    pub name: String,
    /// The OpenAI-compatible base URL, e.g. `http://vllm:8000/v1`; left out when Arbiter
    /// serves the checkpoint (`serve`).
    #[serde(default)]
    pub endpoint_url: String,
    /// The model name the endpoint serves it under.
    pub model: String,
    /// Further replicas serving the same weights.
    #[serde(default)]
    pub replica_urls: Vec<String>,
    #[serde(default)]
    pub engine_build: String,
    #[serde(default)]
    pub parallel_layout: String,
    /// Another checkpoint to try once when retries run out.
    #[serde(default)]
    pub fallback_checkpoint: Option<String>,
    /// Requests in flight to each endpoint, from all workers together.
    #[serde(default)]
    pub max_in_flight: Option<i64>,
    #[serde(default)]
    pub input_usd_per_mtok: Option<f64>,
    #[serde(default)]
    pub output_usd_per_mtok: Option<f64>,
    /// The training run it comes from: trends and every-Nth suites follow it.
    #[serde(default)]
    pub training_run: Option<String>,
    #[serde(default)]
    pub training_step: Option<i64>,
    /// What rides on this checkpoint, which sets its runs' priority: `promotion` (a release
    /// candidate), `scheduled` (the default) or `ablation`.
    #[serde(default)]
    pub decision: Option<String>,
    /// The endpoints' API key: `env:NAME` (a variable in the workers' environment) or the key
    /// itself (stored encrypted; needs `ARBITER_SECRET_KEY`). Never returned.
    #[serde(default, skip_serializing)]
    #[schema(value_type = Option<String>)]
    pub api_key: Option<crate::secrets::SecretText>,
    /// Have Arbiter start the checkpoint's servers (engine, weights and what the serving
    /// plan needs) instead of finding them at `endpoint_url`; its suites run once they are
    /// healthy, and they retire when its runs are done.
    #[serde(default)]
    pub serve: Option<crate::serving::ServeRequest>,
    /// Set false to register without launching its suites.
    #[serde(default)]
    pub trigger_suites: Option<bool>,
}

fn text<T: ToString>(value: Option<T>) -> String {
    value.map(|value| value.to_string()).unwrap_or_default()
}

impl Announcement {
    pub fn form(&self) -> CheckpointForm {
        CheckpointForm {
            name: self.name.clone(),
            endpoint_url: self.endpoint_url.clone(),
            model: self.model.clone(),
            replica_urls: self.replica_urls.join(","),
            engine_build: self.engine_build.clone(),
            parallel_layout: self.parallel_layout.clone(),
            fallback_checkpoint: self.fallback_checkpoint.clone().unwrap_or_default(),
            max_in_flight: text(self.max_in_flight),
            input_usd_per_mtok: text(self.input_usd_per_mtok),
            output_usd_per_mtok: text(self.output_usd_per_mtok),
            training_run: self.training_run.clone().unwrap_or_default(),
            training_step: text(self.training_step),
            api_key: self.api_key.clone().unwrap_or_default(),
        }
    }
}

/// What an announcement did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Registered {
    pub checkpoint_id: CheckpointId,
    pub runs: Vec<TriggeredRun>,
    /// Why its suites could not be launched (the checkpoint is registered all the same; run
    /// them on demand).
    pub trigger_error: Option<String>,
}

/// Registers the announced checkpoint and launches the suites it is due. The priority is
/// checked before anything is stored, so a bad announcement stores nothing.
pub async fn register_announced(
    store: &dyn Store,
    announcement: &Announcement,
    registrant: Option<&User>,
) -> ServiceResult<Registered> {
    let created_by = registrant.map(|user| user.id);
    let priority = crate::runs::parse_priority(
        announcement.decision.as_deref().unwrap_or_default(),
    )
    .map_err(|_| {
        ServiceError::Invalid(format!(
            "the decision value is `promotion`, `scheduled` or `ablation`, not `{}`",
            announcement.decision.as_deref().unwrap_or_default()
        ))
    })?;
    let checkpoint_id = crate::catalog::register_checkpoint_served(
        store,
        &announcement.form(),
        announcement.serve.as_ref(),
        created_by,
    )
    .await?;
    if !announcement.trigger_suites.unwrap_or(true) {
        return Ok(Registered {
            checkpoint_id,
            runs: Vec::new(),
            trigger_error: None,
        });
    }
    // The checkpoint is stored: a failure to launch its suites is reported, not turned into a
    // failed registration that a retry would then find taken.
    Ok(
        match trigger_new_checkpoint(store, checkpoint_id, priority, registrant).await {
            Ok(runs) => Registered {
                checkpoint_id,
                runs,
                trigger_error: None,
            },
            Err(err) => {
                tracing::error!(checkpoint = checkpoint_id.get(), error = %err, "suites not launched for a new checkpoint");
                Registered {
                    checkpoint_id,
                    runs: Vec::new(),
                    trigger_error: Some(format!("{err}; run its suites on demand")),
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_refuse_unknown_fields() {
        let good: Announcement = serde_json::from_str(
            r#"{"name": "s-100", "endpoint_url": "http://h/v1", "model": "m", "training_run": "r", "training_step": 100, "decision": "promotion"}"#,
        )
        .unwrap();
        assert_eq!(good.form().training_step, "100");
        assert!(serde_json::from_str::<Announcement>(
            r#"{"name": "s", "endpoint_url": "http://h/v1", "model": "m", "stepp": 1}"#
        )
        .is_err());
    }
}
