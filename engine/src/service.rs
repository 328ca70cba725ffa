//! The use cases the UI, the REST routes and the CLI share: validate input, call the store.
//!
//! Callers have already checked the session's role; this layer checks the input and maps store
//! failures into [`ServiceError`], whose `Display` is safe to show to the user.

use crate::auth::{hash_password, Role, Username};
use crate::compare::{compare_runs, Comparison};
use crate::dataset::{parse_dataset, DatasetFormat};
use crate::manifest::{EvalSpec, GenerationSettings, Manifest};
use crate::model_client::normalise_base_url;
use crate::store::{DatasetRevision, LaunchedRun, NewCheckpoint, RunProgress, Store, StoreError};

/// Failure of a use case. `Internal` hides its cause from the user; it is logged here.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
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

pub async fn register_checkpoint(
    store: &dyn Store,
    name: &str,
    endpoint_url: &str,
    model: &str,
    created_by: Option<i64>,
) -> ServiceResult<i64> {
    let new = NewCheckpoint {
        name: required(name, "a checkpoint name", 200)?,
        base_url: normalise_base_url(endpoint_url).map_err(ServiceError::Invalid)?,
        model: required(model, "the served model name", 200)?,
    };
    Ok(store.register_checkpoint(&new, created_by).await?)
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
}

pub async fn define_eval(
    store: &dyn Store,
    form: &EvalForm,
    created_by: Option<i64>,
) -> ServiceResult<i64> {
    let spec = EvalSpec {
        name: form.name.trim().to_string(),
        prompt_template: form.prompt_template.clone(),
        grader: crate::manifest::EXACT_MATCH_GRADER.to_string(),
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

/// Freezes the manifest for (eval, checkpoint) on the dataset's newest revision and enqueues its
/// result identities. Launching an unchanged manifest again returns the same run.
pub async fn launch_run(
    store: &dyn Store,
    eval_id: i64,
    checkpoint_id: i64,
    launched_by: Option<i64>,
) -> ServiceResult<LaunchedRun> {
    let inputs = store.manifest_inputs(eval_id, checkpoint_id).await?;
    let eval = &inputs.eval;
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
        checkpoint_id: inputs.checkpoint.id,
        checkpoint_name: inputs.checkpoint.name.clone(),
        endpoint_url: inputs.checkpoint.base_url.clone(),
        served_model: inputs.checkpoint.model.clone(),
    };
    Ok(store.create_run(&manifest, launched_by).await?)
}

pub async fn run_progress(store: &dyn Store, run_id: i64) -> ServiceResult<RunProgress> {
    store
        .run_progress(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))
}

/// Compares two runs of the same eval (on two checkpoints).
pub async fn compare(
    store: &dyn Store,
    baseline_run: i64,
    candidate_run: i64,
) -> ServiceResult<(RunProgress, RunProgress, Comparison)> {
    if baseline_run == candidate_run {
        return Err(ServiceError::Invalid(
            "pick two different runs to compare".into(),
        ));
    }
    let baseline = run_progress(store, baseline_run).await?;
    let candidate = run_progress(store, candidate_run).await?;
    if baseline.eval_id != candidate.eval_id {
        return Err(ServiceError::Invalid(format!(
            "run {} evaluates `{}` and run {} evaluates `{}`: only runs of the same eval can be compared",
            baseline.id, baseline.eval_name, candidate.id, candidate.eval_name
        )));
    }
    let comparison = compare_runs(
        &store.run_outcomes(baseline_run).await?,
        &store.run_outcomes(candidate_run).await?,
    );
    Ok((baseline, candidate, comparison))
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

/// Checks a login. Unknown users and wrong passwords are indistinguishable, in answer and time.
pub async fn authenticate(
    store: &dyn Store,
    username: &str,
    password: &str,
) -> ServiceResult<Option<crate::store::User>> {
    let credentials = store.find_user_credentials(username.trim()).await?;
    let password = password.to_string();
    let (hash, user) = match credentials {
        Some(credentials) => (Some(credentials.password_hash), Some(credentials.user)),
        None => (None, None),
    };
    let verified =
        tokio::task::spawn_blocking(move || crate::auth::verify_password(hash.as_ref(), &password))
            .await
            .map_err(|_| ServiceError::Internal)?;
    Ok(user.filter(|_| verified))
}
