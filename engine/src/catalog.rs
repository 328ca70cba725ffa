//! Use cases of the catalog researchers build runs from: dataset uploads, checkpoints (with
//! their endpoints, replicas, prices, fallback and key), and evals.
//!
//! Callers have already checked the session's role; this layer checks the input, who owns a
//! shared object being changed (a checkpoint's prices, an endpoint's limit), and maps store
//! failures into [`ServiceError`], whose `Display` is safe to show to the user.

use crate::clients::model::normalise_base_url;
use crate::error::{ServiceError, ServiceResult};
use crate::secrets::BoundBy;
use arbiter_domain::accounts::User;
use arbiter_domain::checkpoint::{Checkpoint, Endpoint, KeyBinding, NewCheckpoint, TokenPrices};
use arbiter_domain::dataset::{
    DatasetBuilder, DatasetError, DatasetFormat, DatasetItem, DatasetRevision, ItemSink,
    UploadLimits,
};
use arbiter_domain::fields::FieldMapping;
use arbiter_domain::grading::GraderSpec;
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, RunId, UserId};
use arbiter_domain::manifest::{EvalSpec, GenerationSettings, SamplingOptions};
use arbiter_domain::prompt::few_shot::FewShotSpec;
use arbiter_domain::prompt::{Api, MessageTemplate, PromptSpec, TemplateSyntax};
use arbiter_store::Store;

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
    uploaded_by: Option<UserId>,
) -> ServiceResult<DatasetRevision> {
    let name = required(name, "a dataset name", 200)?;
    let format = DatasetFormat::from_file_name(file_name);
    let parsed = crate::dataset_files::parse_upload(bytes, format)
        .map_err(|err| ServiceError::Invalid(err.to_string()))?;
    Ok(store
        .store_dataset_revision(&name, file_name, &parsed, uploaded_by)
        .await?)
}

/// Items staged per store transaction while a file streams in.
const STAGE_CHUNK: usize = 5000;

/// Default largest upload (as sent, and as decoded) when `ARBITER_MAX_UPLOAD_MB` is unset.
const DEFAULT_MAX_UPLOAD_MB: usize = 1024;
/// Default most items per upload when `ARBITER_MAX_UPLOAD_ITEMS` is unset.
const DEFAULT_MAX_UPLOAD_ITEMS: usize = 5_000_000;

/// The operator's upload limits: `ARBITER_MAX_UPLOAD_MB` (the file as sent and as decoded,
/// 1024 by default) and `ARBITER_MAX_UPLOAD_ITEMS` (5,000,000). A value that is not a whole
/// number keeps the default, with a warning.
pub fn upload_limits() -> UploadLimits {
    let setting = |name: &str, default: usize| match std::env::var(name) {
        Err(_) => default,
        Ok(text) => text.trim().parse::<usize>().unwrap_or_else(|_| {
            tracing::warn!(%name, value = %text, "not a whole number; using the default {default}");
            default
        }),
    };
    UploadLimits {
        max_bytes: setting("ARBITER_MAX_UPLOAD_MB", DEFAULT_MAX_UPLOAD_MB)
            .saturating_mul(1024 * 1024),
        max_items: setting("ARBITER_MAX_UPLOAD_ITEMS", DEFAULT_MAX_UPLOAD_ITEMS),
    }
}

/// Uploads the file at `path` (named `file_name`, whose extension selects the parser) as a
/// revision of dataset `name`, streaming: the file is parsed as it is read, its items staged
/// in chunks, and the revision made visible in one transaction once the whole file has been
/// read and checked. A refused file stores nothing; memory stays bounded whatever its size.
pub async fn upload_dataset_file(
    store: &dyn Store,
    name: &str,
    file_name: &str,
    path: &std::path::Path,
    uploaded_by: Option<UserId>,
    limits: UploadLimits,
) -> ServiceResult<DatasetRevision> {
    let format = DatasetFormat::from_file_name(file_name);
    upload_dataset_file_as(store, name, file_name, path, format, uploaded_by, limits).await
}

/// [`upload_dataset_file`] in a format said by the caller (an imported task names it).
pub async fn upload_dataset_file_as(
    store: &dyn Store,
    name: &str,
    file_name: &str,
    path: &std::path::Path,
    format: DatasetFormat,
    uploaded_by: Option<UserId>,
    limits: UploadLimits,
) -> ServiceResult<DatasetRevision> {
    let name = required(name, "a dataset name", 200)?;
    // One upload is staged and made a revision at a time: on SQLite each holds the single
    // writer in turn, and many at once would starve everything else of it.
    static UPLOADS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let _turn = UPLOADS
        .acquire()
        .await
        .map_err(|_| ServiceError::Internal)?;
    let upload = store.begin_upload(file_name, uploaded_by).await?;
    let (chunks, mut staged) = tokio::sync::mpsc::channel::<Vec<DatasetItem>>(2);
    let path = path.to_path_buf();
    let parse = tokio::task::spawn_blocking(move || {
        let sink: ItemSink = Box::new(move |chunk| {
            chunks.blocking_send(chunk).map_err(|_| DatasetError::At {
                place: "the upload".into(),
                message: "was interrupted while its items were being stored".into(),
            })
        });
        crate::dataset_files::parse_file(
            &path,
            format,
            DatasetBuilder::streaming(limits, STAGE_CHUNK, sink),
        )
    });
    let mut position = 0i64;
    let mut staging_failed = None;
    while let Some(chunk) = staged.recv().await {
        match store.stage_items(upload, position, &chunk).await {
            Ok(()) => position += chunk.len() as i64,
            Err(err) => {
                // Dropping the receiver stops the parser at its next chunk.
                staging_failed = Some(err);
                break;
            }
        }
    }
    drop(staged);
    let parsed = parse.await.unwrap_or_else(|err| {
        // A parser that panicked (a malformed Parquet file can do that) refuses the file.
        tracing::error!(error = %err, "the upload's parser stopped unexpectedly");
        Err(DatasetError::At {
            place: "the file".into(),
            message: "could not be parsed (the parser failed on it)".into(),
        })
    });
    let outcome = match (staging_failed, parsed) {
        (Some(err), _) => Err(ServiceError::from(err)),
        (None, Err(err)) => Err(ServiceError::Invalid(err.to_string())),
        (None, Ok(content)) => store
            .finish_upload(upload, &name, &content, uploaded_by)
            .await
            .map_err(ServiceError::from),
    };
    if outcome.is_err() {
        if let Err(err) = store.abandon_upload(upload).await {
            tracing::warn!(error = %err, upload = upload.get(), "could not clear a refused upload's stage; the next upload a day later will");
        }
    }
    outcome
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
/// (workers read them when they first take work from a run). Prices decide what every team's
/// runs on it are charged, so only the registering team, leads and admins change them.
pub async fn set_checkpoint_prices(
    store: &dyn Store,
    user: &User,
    checkpoint_id: CheckpointId,
    input_usd_per_mtok: &str,
    output_usd_per_mtok: &str,
) -> ServiceResult<()> {
    let prices = parse_prices(input_usd_per_mtok, output_usd_per_mtok)?;
    changeable_checkpoint(store, user, checkpoint_id, "reprice").await?;
    Ok(store.set_checkpoint_prices(checkpoint_id, &prices).await?)
}

/// The checkpoint, if `user` may `verb` it: a member of its team, a lead or an admin.
async fn changeable_checkpoint(
    store: &dyn Store,
    user: &User,
    checkpoint_id: CheckpointId,
    verb: &str,
) -> ServiceResult<Checkpoint> {
    let checkpoint = store
        .list_checkpoints()
        .await?
        .into_iter()
        .find(|checkpoint| checkpoint.id == checkpoint_id)
        .ok_or_else(|| ServiceError::NotFound(format!("no checkpoint with id {checkpoint_id}")))?;
    if !checkpoint.changeable_by(user) {
        return Err(ServiceError::Forbidden(format!(
            "the checkpoint `{}` belongs to {}; only its members, leads and admins may {verb} it",
            checkpoint.name,
            match &checkpoint.owner_team {
                Some(team) => format!("team `{team}`"),
                None => "the operator".to_string(),
            }
        )));
    }
    Ok(checkpoint)
}

/// Retracts a checkpoint that was rolled back, with the reason shown on its runs: its
/// unfinished runs are cancelled (and cannot be resumed), no run is launched against it any
/// more, it leaves trends and is never a baseline; its results stay readable. Returns the
/// runs cancelled.
pub async fn retract_checkpoint(
    store: &dyn Store,
    user: &User,
    checkpoint_id: CheckpointId,
    reason: &str,
) -> ServiceResult<Vec<RunId>> {
    let reason =
        arbiter_domain::checkpoint::retraction_reason(reason).map_err(ServiceError::Invalid)?;
    let checkpoint = changeable_checkpoint(store, user, checkpoint_id, "retract").await?;
    let cancelled = store
        .retract_checkpoint(
            checkpoint_id,
            &reason,
            Some(user.id),
            arbiter_store::now_ms(),
        )
        .await?;
    tracing::info!(checkpoint = %checkpoint.name, by = %user.username, cancelled = cancelled.len(), %reason, "checkpoint retracted");
    Ok(cancelled)
}

/// Most requests in flight an endpoint may be given.
const MAX_ENDPOINT_IN_FLIGHT: i64 = 100_000;

fn parse_max_in_flight(text: &str) -> ServiceResult<i64> {
    match text.trim().parse::<i64>() {
        Ok(limit) if (1..=MAX_ENDPOINT_IN_FLIGHT).contains(&limit) => Ok(limit),
        _ => Err(ServiceError::Invalid(format!(
            "max in flight must be a whole number from 1 to {MAX_ENDPOINT_IN_FLIGHT}, not `{}`",
            text.trim()
        ))),
    }
}

/// The explicit edit of a shared endpoint's in-flight limit: by its owner, a lead or an admin.
/// Workers pick the new limit up at their next refresh.
pub async fn set_endpoint_max_in_flight(
    store: &dyn Store,
    user: &User,
    endpoint_id: i64,
    max_in_flight: &str,
) -> ServiceResult<Endpoint> {
    let limit = parse_max_in_flight(max_in_flight)?;
    let endpoint = store
        .list_endpoints()
        .await?
        .into_iter()
        .find(|endpoint| endpoint.id == endpoint_id)
        .ok_or_else(|| ServiceError::NotFound(format!("no endpoint with id {endpoint_id}")))?;
    if !endpoint.editable_by(user) {
        return Err(ServiceError::Forbidden(format!(
            "the endpoint {} is shared by every team's runs on it; only its owner ({}), leads and admins change its limit",
            endpoint.base_url,
            endpoint.owner.as_deref().unwrap_or("the operator")
        )));
    }
    store.set_endpoint_max_in_flight(endpoint_id, limit).await?;
    Ok(Endpoint {
        max_in_flight: limit,
        ..endpoint
    })
}

pub async fn register_checkpoint(
    store: &dyn Store,
    form: &CheckpointForm,
    created_by: Option<UserId>,
) -> ServiceResult<CheckpointId> {
    register_checkpoint_served(store, form, None, created_by).await
}

/// [`register_checkpoint`] for a checkpoint Arbiter serves (`serve`: its engine, weights and
/// plan) or one found at its URL (`None`). A served checkpoint's URLs come from the ports its
/// launcher reserves, its layout from the plan, and its first launch is requested with it.
pub async fn register_checkpoint_served(
    store: &dyn Store,
    form: &CheckpointForm,
    serve: Option<&crate::serving::ServeRequest>,
    created_by: Option<UserId>,
) -> ServiceResult<CheckpointId> {
    let serving = match serve {
        Some(request) => {
            if !form.endpoint_url.trim().is_empty() || !form.replica_urls.trim().is_empty() {
                return Err(ServiceError::Invalid(
                    "a served checkpoint's URLs come from its launcher: give `serve` or `endpoint_url`, not both".into(),
                ));
            }
            if !form.parallel_layout.trim().is_empty() {
                return Err(ServiceError::Invalid(
                    "a served checkpoint's layout comes from its serving plan: leave `parallel_layout` out".into(),
                ));
            }
            if !form.api_key.as_str().trim().is_empty() {
                return Err(ServiceError::Invalid(
                    "a served checkpoint's servers are started by its launcher without an API key: leave `api_key` out".into(),
                ));
            }
            crate::serving::check_served_model(&form.model)?;
            Some(crate::serving::plan_for(store, request).await?)
        }
        None => None,
    };
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
        text => Some(parse_max_in_flight(text)?),
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
    let base_url = if serving.is_some() {
        String::new()
    } else {
        normalise_base_url(&form.endpoint_url).map_err(ServiceError::Invalid)?
    };
    // The operator's keys go only where the operator or a lead bound them: refused here, with
    // the reason, rather than silently withheld from every request. The leads' bindings are
    // read from the store, so a binding made through another server process counts at once.
    let bindings = store_bindings(store).await?;
    for url in std::iter::once(&base_url)
        .chain(&replica_urls)
        .filter(|url| !url.is_empty())
    {
        crate::secrets::check_endpoint_key_binding_given(api_key_ref.as_deref(), url, |variable| {
            bindings.bound_hosts(variable)
        })
        .map_err(|problem| ServiceError::Invalid(format!("the API key: {problem}")))?;
    }
    let new = NewCheckpoint {
        api_key_ref,
        name: required(&form.name, "a checkpoint name", 200)?,
        base_url,
        model: required(&form.model, "the served model name", 200)?,
        replica_urls,
        engine_build: form.engine_build.trim().chars().take(200).collect(),
        parallel_layout: match &serving {
            Some(serving) => serving.plan.layout(),
            None => form.parallel_layout.trim().chars().take(200).collect(),
        },
        fallback_checkpoint: (!fallback.is_empty()).then(|| fallback.to_string()),
        max_in_flight,
        prices,
        training_run: training_run.to_string(),
        training_step,
        serving,
    };
    Ok(store.register_checkpoint(&new, created_by).await?)
}

/// A simpler form of [`register_checkpoint`]: one endpoint, no extras.
pub async fn register_simple_checkpoint(
    store: &dyn Store,
    name: &str,
    endpoint_url: &str,
    model: &str,
    created_by: Option<UserId>,
) -> ServiceResult<CheckpointId> {
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
    pub dataset_id: DatasetId,
    pub prompt_template: String,
    pub max_tokens: u32,
    pub temperature: f64,
    pub repetitions: u32,
    pub seed: u64,
    /// The deterministic grader as JSON (`{"kind": "numeric", …}`); '' for exact match.
    pub grader: String,
    /// Everything beyond the original form: syntax, system prompt, message list, API, field
    /// mapping, and sampling options.
    pub options: EvalOptions,
}

/// The eval form's optional parts; the defaults give an eval of the original shape.
#[derive(Clone, Debug, Default)]
pub struct EvalOptions {
    /// `None`: detected from the template (Jinja when it has a Jinja tag, else `{input}`).
    pub template_syntax: Option<TemplateSyntax>,
    pub system_prompt: String,
    pub messages: Vec<MessageTemplate>,
    pub api: Api,
    pub mapping: Option<FieldMapping>,
    pub few_shot: Option<FewShotSpec>,
    pub sampling: SamplingOptions,
    /// Score each choice by likelihood instead of generating an answer.
    pub likelihood: Option<arbiter_domain::likelihood::LikelihoodSpec>,
    /// Score each item's text by rolling likelihood (perplexity, bits per byte).
    pub rolling: Option<arbiter_domain::rolling::RollingSpec>,
    /// Check items against a training corpus's n-gram index.
    pub contamination: Option<arbiter_domain::contamination::ContaminationSpec>,
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

/// The prompt parts a form describes: its template with the options' parts, in the syntax
/// they say or (unsaid) the one their text shows.
pub fn prompt_spec(template: &str, options: &EvalOptions) -> PromptSpec {
    PromptSpec {
        template: template.to_string(),
        syntax: options.template_syntax.unwrap_or_else(|| {
            TemplateSyntax::detect_in(
                std::iter::once(template)
                    .chain(std::iter::once(options.system_prompt.as_str()))
                    .chain(
                        options
                            .messages
                            .iter()
                            .map(|message| message.content.as_str()),
                    ),
            )
        }),
        system_prompt: options.system_prompt.clone(),
        messages: options.messages.clone(),
        api: options.api,
        mapping: options.mapping.clone().unwrap_or_default(),
        few_shot: options.few_shot.clone(),
        likelihood: options.likelihood.clone(),
        rolling: options.rolling.clone(),
        contamination: options.contamination.clone(),
    }
}

/// The eval a form describes, validated alone (not yet against its dataset's items).
pub fn eval_spec(form: &EvalForm) -> ServiceResult<EvalSpec> {
    let options = &form.options;
    let spec = EvalSpec {
        name: form.name.trim().to_string(),
        prompt: prompt_spec(&form.prompt_template, options),
        grader: parse_grader_form(&form.grader)?,
        generation: GenerationSettings {
            sampling: options.sampling.clone(),
            ..GenerationSettings::basic(form.max_tokens, form.temperature, form.seed)
        },
        repetitions: form.repetitions,
    };
    spec.validate().map_err(ServiceError::Invalid)?;
    Ok(spec)
}

pub async fn define_eval(
    store: &dyn Store,
    form: &EvalForm,
    created_by: Option<UserId>,
) -> ServiceResult<EvalId> {
    let spec = eval_spec(form)?;
    // Every item of the dataset's newest revision is rendered now, and again at each launch
    // (whose revision may be newer): a field the template or mapping needs and an item lacks
    // is refused here, never rendered as an empty string at run time.
    let dataset = store
        .get_dataset(form.dataset_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no dataset with id {}", form.dataset_id)))?;
    let exemplars = crate::prompts::draw_exemplars(store, &spec.prompt).await?;
    let renderer = crate::prompts::renderer(&spec.prompt, exemplars.as_ref(), form.dataset_id)?;
    if let Some(revision) = &dataset.latest_revision {
        crate::prompts::check_every_item(store, &renderer, &spec.grader, revision.id).await?;
    }
    Ok(store
        .create_eval(form.dataset_id, &spec, created_by)
        .await?)
}

/// The operator keys in use (named by checkpoints) or bound, with the hosts each may go to.
pub async fn key_bindings(store: &dyn Store) -> ServiceResult<Vec<KeyBinding>> {
    let bindings = store_bindings(store).await?;
    let mut variables: std::collections::BTreeSet<String> =
        bindings.by_variable.keys().cloned().collect();
    for checkpoint in store.list_checkpoints().await? {
        if let Some(variable) = checkpoint
            .api_key_ref
            .as_deref()
            .and_then(|stored| stored.strip_prefix("env:"))
        {
            variables.insert(variable.to_string());
        }
    }
    Ok(variables
        .into_iter()
        .map(|variable| {
            let bound = bindings.bound_hosts(&variable);
            KeyBinding {
                set_by: bound
                    .as_ref()
                    .map_or_else(String::new, |(_, by)| by.describe().to_string()),
                editable: !matches!(bound, Some((_, BoundBy::Operator))),
                hosts: bound.map(|(hosts, _)| hosts).unwrap_or_default(),
                variable,
            }
        })
        .collect())
}

/// A lead's or admin's binding of an operator key to hosts (`hosts` '' removes it). The
/// operator's `…_HOSTS` variable, when set, wins and cannot be changed here.
pub async fn bind_endpoint_key(
    store: &dyn Store,
    user: &User,
    variable: &str,
    hosts: &str,
) -> ServiceResult<()> {
    if !matches!(
        user.role,
        arbiter_domain::accounts::Role::Lead | arbiter_domain::accounts::Role::Admin
    ) {
        return Err(ServiceError::Forbidden(
            "only leads and admins bind endpoint keys to hosts".into(),
        ));
    }
    let variable = variable.trim();
    if !crate::secrets::is_endpoint_key_variable(variable) {
        return Err(ServiceError::Invalid(format!(
            "`{variable}` is not an endpoint key variable (ARBITER_ENDPOINT_KEY_…)"
        )));
    }
    if let Some((_, BoundBy::Operator)) = crate::secrets::bound_hosts_given(variable, |_| None) {
        return Err(ServiceError::Conflict(format!(
            "the operator binds {variable} in {variable}_HOSTS; change it there"
        )));
    }
    let hosts = match hosts.trim() {
        "" => None,
        typed => Some(crate::secrets::parse_host_list(typed).map_err(ServiceError::Invalid)?),
    };
    store
        .set_key_binding(variable, hosts.as_deref(), Some(user.id))
        .await?;
    refresh_key_bindings(store).await
}

/// Reads the bindings leads and admins set into this process (at start, in workers'
/// heartbeats, and after every edit).
pub async fn refresh_key_bindings(store: &dyn Store) -> ServiceResult<()> {
    crate::secrets::set_ui_bindings(store.key_bindings().await?);
    Ok(())
}

/// The leads' bindings as the store holds them now. Pages and registrations read these rather
/// than this process's copy, which only workers' requests use (refreshed by heartbeats).
struct StoreBindings {
    by_variable: std::collections::BTreeMap<String, String>,
}

impl StoreBindings {
    fn bound_hosts(&self, variable: &str) -> Option<(String, BoundBy)> {
        crate::secrets::bound_hosts_given(variable, |variable| {
            self.by_variable.get(variable).cloned()
        })
    }
}

async fn store_bindings(store: &dyn Store) -> ServiceResult<StoreBindings> {
    Ok(StoreBindings {
        by_variable: store.key_bindings().await?.into_iter().collect(),
    })
}
