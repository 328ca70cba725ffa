//! The use cases the UI, the REST routes and the CLI share: validate input, call the store.
//!
//! Callers have already checked the session's role; this layer checks the input and maps store
//! failures into [`ServiceError`], whose `Display` is safe to show to the user.

use crate::model_client::normalise_base_url;
use crate::passwords::hash_password;
use arbiter_domain::accounts::{Role, Username};
use arbiter_domain::checkpoint::{Checkpoint, NewCheckpoint, TokenPrices};
use arbiter_domain::dataset::{parse_dataset, DatasetFormat, DatasetRevision};
use arbiter_domain::expansion::{plan_identities, refined_cost};
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::{Grade, Grader, GraderSpec, Verdict};
use arbiter_domain::manifest::{
    EndpointFingerprint, EvalSpec, FallbackTarget, GenerationSettings, Manifest,
};
use arbiter_domain::run::{LaunchedRun, RunProgress, PRIORITY_ABLATION, PRIORITY_PROMOTION};
use arbiter_store::{CacheHit, NewIdentity, NewRun, Store, StoreError};
use std::time::Duration;

/// Failure of a use case. `Internal` hides its cause from the user; it is logged here.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Forbidden(String),
    /// No credentials, or ones that identify nobody (an API token that is unknown or revoked).
    #[error("{0}")]
    Unauthorized(String),
    #[error("something went wrong on the server; the details are in its log")]
    Internal,
}

impl ServiceError {
    /// The HTTP status that fits, for API routes and server functions.
    pub fn status_code(&self) -> u16 {
        match self {
            ServiceError::Invalid(_) => 400,
            ServiceError::NotFound(_) => 404,
            ServiceError::Conflict(_) => 409,
            ServiceError::Forbidden(_) => 403,
            ServiceError::Unauthorized(_) => 401,
            ServiceError::Internal => 500,
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> ServiceError {
        match err {
            StoreError::Conflict(message) => ServiceError::Conflict(message),
            StoreError::NotFound(message) => ServiceError::NotFound(message),
            other => {
                tracing::error!(error = %other, "store failure");
                ServiceError::Internal
            }
        }
    }
}

pub type ServiceResult<T> = Result<T, ServiceError>;

fn required(value: &str, what: &str, max_chars: usize) -> ServiceResult<String> {
    let value = value.trim();
    if value.is_empty() {
        return Err(ServiceError::Invalid(format!("{what} is required")));
    }
    if value.chars().count() > max_chars {
        return Err(ServiceError::Invalid(format!(
            "{what} is longer than {max_chars} characters"
        )));
    }
    Ok(value.to_string())
}

/// Parses an uploaded file and stores it as a revision of the named dataset; a bad file
/// stores nothing.
pub async fn upload_dataset(
    store: &dyn Store,
    name: &str,
    file_name: &str,
    bytes: &[u8],
    uploaded_by: Option<i64>,
) -> ServiceResult<DatasetRevision> {
    let name = required(name, "a dataset name", 200)?;
    let format = DatasetFormat::from_file_name(file_name);
    let parsed =
        parse_dataset(bytes, format).map_err(|err| ServiceError::Invalid(err.to_string()))?;
    Ok(store
        .store_dataset_revision(&name, file_name, &parsed, uploaded_by)
        .await?)
}

/// A checkpoint as typed into the form, before validation.
#[derive(Clone, Debug, Default)]
pub struct CheckpointForm {
    pub name: String,
    pub endpoint_url: String,
    pub model: String,
    /// Further endpoint URLs serving the same checkpoint, separated by commas or whitespace.
    pub replica_urls: String,
    pub engine_build: String,
    pub parallel_layout: String,
    /// Name of another checkpoint to try once when retries run out ('' for none).
    pub fallback_checkpoint: String,
    /// Requests in flight to each of its endpoints, from all workers together ('' = default).
    pub max_in_flight: String,
    /// USD per million prompt tokens for this checkpoint's model ('' = free).
    pub input_usd_per_mtok: String,
    /// USD per million completion tokens ('' = free).
    pub output_usd_per_mtok: String,
    /// The training run the checkpoint comes from ('' for none), for trends.
    pub training_run: String,
    /// Its step in that training run ('' for none): a whole number, 0 or more.
    pub training_step: String,
    /// The endpoints' API key: '' for none, `env:ARBITER_ENDPOINT_KEY_…` for a variable in the
    /// workers' environment, or the key itself (stored encrypted; needs `ARBITER_SECRET_KEY`).
    pub api_key: crate::secrets::SecretText,
}

/// Highest price accepted, in USD per million tokens: far above any real model's, low enough
/// to catch a price typed per token or per thousand by mistake.
const MAX_USD_PER_MTOK: f64 = 10_000.0;

/// A price typed into a form: '' is free, else US dollars per million tokens.
fn parse_price(text: &str, what: &str) -> ServiceResult<f64> {
    match text.trim() {
        "" => Ok(0.0),
        text => match text.parse::<f64>() {
            Ok(price) if (0.0..=MAX_USD_PER_MTOK).contains(&price) => Ok(price),
            _ => Err(ServiceError::Invalid(format!(
                "{what} must be US dollars per million tokens, from 0 to {MAX_USD_PER_MTOK}, not `{text}`"
            ))),
        },
    }
}

fn parse_prices(input: &str, output: &str) -> ServiceResult<TokenPrices> {
    Ok(TokenPrices {
        input_usd_per_mtok: parse_price(input, "the prompt token price")?,
        output_usd_per_mtok: parse_price(output, "the completion token price")?,
    })
}

/// Sets what a checkpoint's model costs; calls made from now on are charged at these prices
/// (workers read them when they first take work from a run).
pub async fn set_checkpoint_prices(
    store: &dyn Store,
    checkpoint_id: i64,
    input_usd_per_mtok: &str,
    output_usd_per_mtok: &str,
) -> ServiceResult<()> {
    let prices = parse_prices(input_usd_per_mtok, output_usd_per_mtok)?;
    Ok(store.set_checkpoint_prices(checkpoint_id, &prices).await?)
}

pub async fn register_checkpoint(
    store: &dyn Store,
    form: &CheckpointForm,
    created_by: Option<i64>,
) -> ServiceResult<i64> {
    let replica_urls = form
        .replica_urls
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|url| !url.is_empty())
        .map(|url| {
            normalise_base_url(url)
                .map_err(|err| ServiceError::Invalid(format!("replica `{url}`: {err}")))
        })
        .collect::<ServiceResult<Vec<_>>>()?;
    let max_in_flight = match form.max_in_flight.trim() {
        "" => None,
        text => match text.parse::<i64>() {
            Ok(limit) if (1..=100_000).contains(&limit) => Some(limit),
            _ => {
                return Err(ServiceError::Invalid(format!(
                    "max in flight must be a whole number from 1 to 100000, not `{text}`"
                )))
            }
        },
    };
    let fallback = form.fallback_checkpoint.trim();
    let prices = parse_prices(&form.input_usd_per_mtok, &form.output_usd_per_mtok)?;
    let training_step = match form.training_step.trim() {
        "" => None,
        text => match text.replace('_', "").parse::<i64>() {
            Ok(step) if step >= 0 => Some(step),
            _ => {
                return Err(ServiceError::Invalid(format!(
                    "the training step must be a whole number, 0 or more, not `{text}`"
                )))
            }
        },
    };
    let training_run = form.training_run.trim();
    if training_run.chars().count() > 200 {
        return Err(ServiceError::Invalid(
            "the training run's name is longer than 200 characters".into(),
        ));
    }
    let api_key_ref = crate::secrets::process()
        .to_stored(form.api_key.as_str())
        .map_err(|problem| ServiceError::Invalid(format!("the API key: {problem}")))?;
    let new = NewCheckpoint {
        api_key_ref,
        name: required(&form.name, "a checkpoint name", 200)?,
        base_url: normalise_base_url(&form.endpoint_url).map_err(ServiceError::Invalid)?,
        model: required(&form.model, "the served model name", 200)?,
        replica_urls,
        engine_build: form.engine_build.trim().chars().take(200).collect(),
        parallel_layout: form.parallel_layout.trim().chars().take(200).collect(),
        fallback_checkpoint: (!fallback.is_empty()).then(|| fallback.to_string()),
        max_in_flight,
        prices,
        training_run: training_run.to_string(),
        training_step,
    };
    Ok(store.register_checkpoint(&new, created_by).await?)
}

/// A simpler form of [`register_checkpoint`]: one endpoint, no extras.
pub async fn register_simple_checkpoint(
    store: &dyn Store,
    name: &str,
    endpoint_url: &str,
    model: &str,
    created_by: Option<i64>,
) -> ServiceResult<i64> {
    let form = CheckpointForm {
        name: name.into(),
        endpoint_url: endpoint_url.into(),
        model: model.into(),
        ..CheckpointForm::default()
    };
    register_checkpoint(store, &form, created_by).await
}

/// An eval as typed into the form, before validation.
#[derive(Clone, Debug)]
pub struct EvalForm {
    pub name: String,
    pub dataset_id: i64,
    pub prompt_template: String,
    pub max_tokens: u32,
    pub temperature: f64,
    pub repetitions: u32,
    pub seed: u64,
    /// The deterministic grader as JSON (`{"kind": "numeric", …}`); '' for exact match.
    pub grader: String,
}

/// The grader typed into the eval form: '' is exact match; a grader without settings may be
/// named by its id (`multiple_choice@1`); otherwise a JSON grader spec, refused here (with the
/// reason) if it does not parse or compile, e.g. an invalid regex.
pub fn parse_grader_form(text: &str) -> ServiceResult<GraderSpec> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(GraderSpec::ExactMatch {});
    }
    if let Some(spec) = GraderSpec::without_settings(text) {
        return Ok(spec);
    }
    let spec: GraderSpec = serde_json::from_str(text).map_err(|err| {
        ServiceError::Invalid(format!("the grader is not a valid grader spec: {err}"))
    })?;
    spec.validate()
        .map_err(|problem| ServiceError::Invalid(format!("the grader is invalid: {problem}")))?;
    Ok(spec)
}

pub async fn define_eval(
    store: &dyn Store,
    form: &EvalForm,
    created_by: Option<i64>,
) -> ServiceResult<i64> {
    let spec = EvalSpec {
        name: form.name.trim().to_string(),
        prompt_template: form.prompt_template.clone(),
        grader: parse_grader_form(&form.grader)?,
        generation: GenerationSettings {
            max_tokens: form.max_tokens,
            temperature: form.temperature,
            seed: form.seed,
        },
        repetitions: form.repetitions,
    };
    spec.validate().map_err(ServiceError::Invalid)?;
    Ok(store
        .create_eval(form.dataset_id, &spec, created_by)
        .await?)
}

/// How long the launch waits for an endpoint's `/v1/models` answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Dataset items planned per expansion step; bounds the launcher's memory on any dataset size.
const EXPANSION_CHUNK: i64 = 2000;

/// Asks the endpoint which model it serves under the checkpoint's model name.
pub(crate) async fn probe_fingerprint(checkpoint: &Checkpoint) -> EndpointFingerprint {
    let url = format!("{}/models", checkpoint.base_url.trim_end_matches('/'));
    let probe = async {
        let mut request = reqwest::Client::new().get(&url).timeout(PROBE_TIMEOUT);
        if let Some(key) = crate::secrets::process().resolve(checkpoint.api_key_ref.as_deref())? {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|err| format!("could not reach {url}: {err}"))?;
        if !response.status().is_success() {
            return Err(format!(
                "{url} answered HTTP {}",
                response.status().as_u16()
            ));
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|err| format!("unreadable answer from {url}: {err}"))?;
        let models = body["data"].as_array().cloned().unwrap_or_default();
        let served = models
            .iter()
            .find(|model| model["id"].as_str() == Some(checkpoint.model.as_str()))
            .ok_or_else(|| format!("{url} does not list the model `{}`", checkpoint.model))?;
        // vLLM reports the weights it loaded as `root`; other servers only the id.
        Ok(served["root"]
            .as_str()
            .or(served["id"].as_str())
            .unwrap_or_default()
            .to_string())
    };
    let (served_model, probe_error) = match probe.await {
        Ok(served) => (Some(served), None),
        Err(error) => (None, Some(error)),
    };
    EndpointFingerprint {
        served_model,
        engine_build: checkpoint.engine_build.clone(),
        parallel_layout: checkpoint.parallel_layout.clone(),
        probe_error,
    }
}

/// The scheduling class named in a form: `promotion`, `scheduled` or `ablation`.
pub fn parse_priority(text: &str) -> ServiceResult<i64> {
    match text.trim() {
        "" | "scheduled" => Ok(arbiter_domain::run::PRIORITY_SCHEDULED),
        "promotion" => Ok(PRIORITY_PROMOTION),
        "ablation" => Ok(PRIORITY_ABLATION),
        other => Err(ServiceError::Invalid(format!(
            "unknown priority `{other}`; use promotion, scheduled or ablation"
        ))),
    }
}

/// Freezes the manifest for (eval, checkpoint) on the dataset's newest revision, then streams
/// the dataset through the planner into result identities, answering from the generation
/// cache whatever it already holds. Launching an unchanged manifest again returns the same
/// run (and finishes its expansion if an earlier launch was interrupted).
pub async fn launch_run(
    store: &dyn Store,
    eval_id: i64,
    checkpoint_id: i64,
    priority: i64,
    team: &str,
    launched_by: Option<i64>,
) -> ServiceResult<LaunchedRun> {
    let inputs = store.manifest_inputs(eval_id, checkpoint_id).await?;
    let eval = &inputs.eval;
    let checkpoint = &inputs.checkpoint;
    let manifest = Manifest {
        eval_id: eval.id,
        eval: EvalSpec {
            name: eval.name.clone(),
            prompt_template: eval.prompt_template.clone(),
            grader: eval.grader.clone(),
            generation: GenerationSettings {
                max_tokens: u32::try_from(eval.max_tokens).unwrap_or(u32::MAX),
                temperature: eval.temperature,
                seed: eval.seed as u64,
            },
            repetitions: u32::try_from(eval.repetitions).unwrap_or(1),
        },
        dataset_id: eval.dataset_id,
        dataset_revision_id: inputs.revision.id,
        dataset_revision: inputs.revision.content_hash.clone(),
        case_count: inputs.revision.item_count as u64,
        checkpoint_id: checkpoint.id,
        checkpoint_name: checkpoint.name.clone(),
        endpoint_urls: std::iter::once(checkpoint.base_url.clone())
            .chain(checkpoint.replica_urls.iter().cloned())
            .collect(),
        served_model: checkpoint.model.clone(),
        fingerprint: probe_fingerprint(checkpoint).await,
        fallback: inputs.fallback.as_ref().map(|fallback| FallbackTarget {
            checkpoint_name: fallback.name.clone(),
            endpoint_url: fallback.base_url.clone(),
            served_model: fallback.model.clone(),
        }),
        triage: crate::policies::freeze_triage(store, eval.id).await?,
    };
    let launched = store
        .create_run(&NewRun {
            manifest: &manifest,
            priority,
            team,
            created_by: launched_by,
        })
        .await?;
    // A new (or interrupted) launch is expanded; a cancelled one is picked up where it
    // stopped. Either way it runs now, unless every identity is already answered.
    let status = match launched.status.as_str() {
        "expanding" | "cancelled" => {
            if launched.status == "expanding" {
                expand(store, launched.run_id, &manifest).await?;
            }
            store
                .set_run_status(launched.run_id, &[launched.status.as_str()], "running")
                .await?;
            if store.finish_run_if_done(launched.run_id).await? {
                "completed".to_string()
            } else {
                "running".to_string()
            }
        }
        _ => launched.status.clone(),
    };
    Ok(LaunchedRun { status, ..launched })
}

/// Writes a run's result identities chunk by chunk, repetition by repetition; cached
/// generations are graded and stored as finished right away. Each chunk is written while the
/// next one is read and planned, so the database's writer and its readers work side by side.
async fn expand(store: &dyn Store, run_id: i64, manifest: &Manifest) -> ServiceResult<()> {
    let mut cursor = ExpansionCursor {
        repetition: 0,
        after_position: -1,
    };
    // Checked when the eval was saved; a grader that no longer compiles grades nothing here,
    // and its workers report the problem on every item.
    let grader = manifest.eval.grader.compile().ok();
    let grader = grader.as_ref();
    let mut ready = plan_next_chunk(store, manifest, grader, &mut cursor).await?;
    while let Some(identities) = ready.take() {
        let (written, next) = tokio::join!(
            store.insert_identities(run_id, manifest, &identities),
            plan_next_chunk(store, manifest, grader, &mut cursor),
        );
        written?;
        ready = next?;
    }
    Ok(())
}

/// Where expansion has got to: the repetition, and the last dataset position planned in it.
struct ExpansionCursor {
    repetition: i64,
    after_position: i64,
}

/// Reads the next chunk of dataset items and plans their identities, with cache hits graded;
/// `None` once every repetition is planned. A cached answer its deterministic grader cannot
/// decide is queued instead when the eval has judges: a worker asks them (through the grade
/// cache, so an unchanged judge costs nothing).
async fn plan_next_chunk(
    store: &dyn Store,
    manifest: &Manifest,
    grader: Option<&Grader>,
    cursor: &mut ExpansionCursor,
) -> ServiceResult<Option<Vec<NewIdentity>>> {
    let chunk = loop {
        if cursor.repetition >= i64::from(manifest.eval.repetitions) {
            return Ok(None);
        }
        let chunk = store
            .items_after(
                manifest.dataset_revision_id,
                cursor.after_position,
                EXPANSION_CHUNK,
            )
            .await?;
        match chunk.last() {
            Some((last_position, _)) => {
                cursor.after_position = *last_position;
                break chunk;
            }
            None => {
                cursor.repetition += 1;
                cursor.after_position = -1;
            }
        }
    };
    let items: Vec<_> = chunk.into_iter().map(|(_, item)| item).collect();
    let mut planned = plan_identities(manifest, &items, cursor.repetition);
    let keys: Vec<String> = planned
        .iter()
        .map(|identity| identity.generation_key.clone())
        .collect();
    let mut cached: std::collections::HashMap<String, arbiter_store::CachedGeneration> =
        store.cached_generations(&keys).await?.into_iter().collect();
    let has_judges = manifest
        .triage
        .as_ref()
        .is_some_and(|triage| triage.cheap_judge.is_some());
    let graded: std::collections::HashMap<String, Grade> = match grader {
        Some(grader) => planned
            .iter()
            .zip(&items)
            .filter_map(|(identity, item)| {
                let hit = cached.get(&identity.generation_key)?;
                let grade =
                    (!hit.outcome.is_error()).then(|| grader.grade(&hit.output, &item.target))?;
                Some((identity.generation_key.clone(), grade))
            })
            .collect(),
        None => std::collections::HashMap::new(),
    };
    cached.retain(|key, _| {
        graded
            .get(key)
            .is_some_and(|grade| !has_judges || grade.verdict != Verdict::Uncertain)
    });
    // Only identities that will be queued need an order: refine their cost by the lengths
    // their cases were seen to take (a re-run answered from the cache skips this read).
    let to_queue: Vec<String> = planned
        .iter()
        .filter(|identity| !cached.contains_key(&identity.generation_key))
        .map(|identity| identity.case_id.clone())
        .collect();
    if !to_queue.is_empty() {
        let observed = store
            .observed_completion_tokens(manifest.dataset_revision_id, &to_queue)
            .await?;
        let max_tokens = manifest.eval.generation.max_tokens;
        for identity in &mut planned {
            if let Some(completion) = observed.get(&identity.case_id) {
                identity.cost = refined_cost(identity.cost, max_tokens, *completion);
            }
        }
    }
    Ok(Some(
        planned
            .into_iter()
            .map(|planned| {
                let cached = cached.get(&planned.generation_key).map(|hit| CacheHit {
                    source_work_item_id: hit.source_work_item_id,
                    generation: hit.to_generation(),
                    grading: Grading::deterministic_only(
                        graded.get(&planned.generation_key).cloned(),
                    )
                    .route(manifest.triage.as_ref()),
                });
                NewIdentity { planned, cached }
            })
            .collect(),
    ))
}

/// Pause (`paused`), resume (`running`) or cancel (`cancelled`) a run. Requests already in
/// flight finish and are recorded; nothing new is claimed while paused or cancelled.
pub async fn change_run_state(store: &dyn Store, run_id: i64, action: &str) -> ServiceResult<()> {
    let (from, to): (&[&str], &str) = match action {
        "pause" => (&["running"], "paused"),
        "resume" => (&["paused", "cancelled"], "running"),
        "cancel" => (&["running", "paused", "expanding"], "cancelled"),
        other => {
            return Err(ServiceError::Invalid(format!(
                "unknown action `{other}`; use pause, resume or cancel"
            )))
        }
    };
    if store.set_run_status(run_id, from, to).await? {
        if to == "running" {
            store.finish_run_if_done(run_id).await?;
        }
        Ok(())
    } else {
        // Only now read the run (a full count): to say it is missing, or what state it is in.
        let progress = run_progress(store, run_id).await?;
        Err(ServiceError::Conflict(format!(
            "run {run_id} is {}; it cannot be {}",
            progress.status,
            match action {
                "pause" => "paused",
                "resume" => "resumed",
                _ => "cancelled",
            }
        )))
    }
}

pub async fn run_progress(store: &dyn Store, run_id: i64) -> ServiceResult<RunProgress> {
    store
        .run_progress(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))
}

/// Creates a user (CLI and demo). Hashing runs on a blocking thread.
pub async fn create_user(
    store: &dyn Store,
    username: &str,
    password: &str,
    role: Role,
) -> ServiceResult<i64> {
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
        crate::passwords::verify_password(hash.as_ref(), &password)
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
