//! The eval preview: the exact request body a worker would send for one item of the eval's
//! newest dataset revision, and (given a checkpoint) its generation cache key, before anything
//! is launched; and the eval form's live check of a template against a sample item.

use crate::clients::model::{probe_fingerprint, request_json, GenerationRequest};
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::expansion::{first_request_key, seed_for, FirstRequest};
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId};
use arbiter_domain::prompt::request::rolled_text;
use arbiter_domain::prompt::request::{PromptSample, RequestPreview};
use arbiter_domain::prompt::{PromptBody, PromptSpec};
use arbiter_store::Store;

/// Renders one item (`case_id`, or the first item) of the eval's dataset as a worker would,
/// at `repetition` (which picks the seed). With a checkpoint, its endpoint is probed as a
/// launch would, so the generation key shown is the one a launch now would use.
pub async fn preview_request(
    store: &dyn Store,
    eval_id: EvalId,
    case_id: Option<&str>,
    checkpoint_id: Option<CheckpointId>,
    repetition: u32,
) -> ServiceResult<RequestPreview> {
    let eval = store
        .get_eval(eval_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no eval with id {eval_id}")))?;
    if i64::from(repetition) >= eval.repetitions {
        return Err(ServiceError::Invalid(format!(
            "repetition {repetition} does not exist: the eval has {} (numbered from 0)",
            eval.repetitions
        )));
    }
    let revision = store
        .get_dataset(eval.dataset_id)
        .await?
        .and_then(|dataset| dataset.latest_revision)
        .ok_or_else(|| {
            ServiceError::Invalid(format!("dataset `{}` has no items yet", eval.dataset_name))
        })?;
    let item = match case_id.map(str::trim).filter(|id| !id.is_empty()) {
        Some(case_id) => store
            .dataset_item(revision.id, case_id)
            .await?
            .ok_or_else(|| {
                ServiceError::NotFound(format!(
                    "dataset `{}` has no item `{case_id}` in its newest revision",
                    eval.dataset_name
                ))
            })?,
        None => store
            .list_items(revision.id, 1, 0)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| ServiceError::Invalid("the dataset has no items".into()))?,
    };
    let exemplars = crate::prompts::draw_exemplars(store, &eval.prompt).await?;
    let renderer = crate::prompts::renderer(&eval.prompt, exemplars.as_ref(), eval.dataset_id)?;
    let rendered = renderer
        .render(&item)
        .map_err(|problem| ServiceError::Invalid(format!("item `{}` {problem}", item.case_id)))?;
    let settings = eval.generation();
    let checkpoint = match checkpoint_id {
        Some(id) => Some(store.manifest_inputs(eval_id, id).await?.checkpoint),
        None => None,
    };
    let model = checkpoint
        .as_ref()
        .map_or_else(String::new, |checkpoint| checkpoint.model.clone());
    // A likelihood eval sends one scoring request per choice: the first is shown.
    let scoring = match &eval.prompt.likelihood {
        Some(likelihood) => Some(likelihood.item_scoring(&rendered).map_err(|problem| {
            ServiceError::Invalid(format!("item `{}` {problem}", item.case_id))
        })?),
        None => None,
    };
    let rolled = match &eval.prompt.rolling {
        Some(rolling) => Some((
            rolling,
            rolled_text(&rendered).map_err(|problem| {
                ServiceError::Invalid(format!("item `{}` {problem}", item.case_id))
            })?,
        )),
        None => None,
    };
    let request = match (&scoring, rolled) {
        (Some(scoring), _) => {
            let first = &scoring.requests[0];
            GenerationRequest::scoring(&model, first.text.clone(), first.continuation_chars)
        }
        // The windows' token ids are the server's: the tokenisation is what is sent first.
        (None, Some((_, text))) => GenerationRequest::tokenize(&model, text.to_string()),
        (None, None) => GenerationRequest {
            model,
            body: rendered.body.clone(),
            max_tokens: settings.max_tokens,
            temperature: settings.temperature,
            seed: seed_for(&settings, i64::from(repetition)),
            sampling: settings.sampling.clone(),
            scoring: crate::clients::model::Scoring::Generate,
            top_logprobs: None,
        },
    };
    let (generation_key, note) = match &checkpoint {
        None => (
            None,
            Some("choose a checkpoint to see the model and the generation key".to_string()),
        ),
        // The key holds the prefix token, which the launch reads from the server.
        Some(_) if rolled.is_some_and(|(rolling, _)| rolling.prefix_token.is_none()) => (
            None,
            Some(
                "the generation key holds the prefix token, which the launch reads from the \
                 server's /tokenizer_info"
                    .to_string(),
            ),
        ),
        Some(checkpoint) => {
            let fingerprint = recent_fingerprint(checkpoint).await;
            let note = fingerprint.probe_error.as_ref().map(|problem| {
                format!("the endpoint's probe failed ({problem}); a launch now would key answers without its model id")
            });
            let first_request = match (&scoring, rolled) {
                (Some(scoring), _) => FirstRequest::Choices(scoring),
                (None, Some((rolling, text))) => FirstRequest::Rolling(rolling, text),
                (None, None) => FirstRequest::Generated,
            };
            let key = first_request_key(
                &fingerprint,
                &first_request,
                &rendered.body,
                &settings,
                i64::from(repetition),
            );
            (Some(key), note)
        }
    };
    // A conversation's later turns carry answers not given yet: the preview is its first.
    let turns = rendered.item.input.turn_count();
    let note = joined((turns > 1).then(|| turn_note(turns)), note);
    let note = joined(
        scoring.as_ref().map(|scoring| {
            format!(
                "scored by likelihood: one request per choice ({}), each echoing the prompt's \
                 logprobs; this is the first",
                scoring.requests.len()
            )
        }),
        note,
    );
    let note = joined(
        rolled.map(|(rolling, _)| {
            format!(
                "scored by rolling likelihood: the text is tokenised by the server (/tokenize, \
                 shown here), then sent in windows of at most {} token ids with their logprobs \
                 echoed, the first scoring up to {} tokens and each later one up to {}",
                rolling.max_length - 1,
                rolling.context(),
                rolling.stride()
            )
        }),
        note,
    );
    Ok(RequestPreview {
        case_id: item.case_id,
        dataset_revision: revision.content_hash,
        route: match (&rendered.body, rolled) {
            (_, Some(_)) => "/tokenize (at the server root)".into(),
            (PromptBody::Chat(_), None) => "chat/completions".into(),
            (PromptBody::Completion(_), None) => "completions".into(),
        },
        body: request_json(&request),
        generation_key,
        checkpoint: checkpoint.map(|checkpoint| checkpoint.name),
        repetition,
        targets: rendered.item.targets,
        category: rendered.item.category,
        note,
    })
}

/// Notes joined with "; ", the first first.
fn joined(first: Option<String>, rest: Option<String>) -> Option<String> {
    match (first, rest) {
        (Some(first), Some(rest)) => Some(format!("{first}; {rest}")),
        (first, rest) => first.or(rest),
    }
}

/// How long a preview reuses a checkpoint's probe: previews are clicked again and again, and
/// each must not be a request to the endpoint (a launch always probes afresh).
const PROBE_REUSE: std::time::Duration = std::time::Duration::from_secs(60);

/// The checkpoint's fingerprint, probed at most once a minute for previews (per endpoint URL,
/// model and key reference, so an edited checkpoint is probed anew).
async fn recent_fingerprint(
    checkpoint: &arbiter_domain::checkpoint::Checkpoint,
) -> arbiter_domain::manifest::EndpointFingerprint {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Instant;
    type Probes = HashMap<String, (Instant, arbiter_domain::manifest::EndpointFingerprint)>;
    static PROBES: Mutex<Option<Probes>> = Mutex::new(None);
    let key = format!(
        "{}\u{0}{}\u{0}{}\u{0}{}",
        checkpoint.base_url,
        checkpoint.model,
        checkpoint.api_key_ref.as_deref().unwrap_or_default(),
        serde_json::to_string(&(&checkpoint.engine_build, &checkpoint.parallel_layout))
            .unwrap_or_default()
    );
    let now = Instant::now();
    if let Ok(mut probes) = PROBES.lock() {
        let probes = probes.get_or_insert_with(HashMap::new);
        probes.retain(|_, (at, _)| now.duration_since(*at) < PROBE_REUSE);
        if let Some((_, fingerprint)) = probes.get(&key) {
            return fingerprint.clone();
        }
    }
    let fingerprint = probe_fingerprint(checkpoint).await;
    if let Ok(mut probes) = PROBES.lock() {
        probes
            .get_or_insert_with(HashMap::new)
            .insert(key, (now, fingerprint.clone()));
    }
    fingerprint
}

/// What a preview of a conversation's first turn says about the rest.
fn turn_note(turns: usize) -> String {
    format!(
        "this is turn 1 of {turns}: each later turn is sent, with its own generation key, \
         once the turn before it is answered, carrying the model's own earlier answers"
    )
}

/// Items whose field names the eval form lists.
const FIELD_SAMPLE: i64 = 50;

/// The eval form's live check: the dataset's field names, and its first item rendered under
/// `prompt` (a problem with the prompt or the item is reported in the sample, not as an
/// error, since the researcher is still typing).
pub async fn sample_prompt(
    store: &dyn Store,
    dataset_id: DatasetId,
    prompt: &PromptSpec,
) -> ServiceResult<PromptSample> {
    let dataset = store
        .get_dataset(dataset_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no dataset with id {dataset_id}")))?;
    let Some(revision) = dataset.latest_revision else {
        return Ok(PromptSample::default());
    };
    let items = store.list_items(revision.id, FIELD_SAMPLE, 0).await?;
    let mut fields: Vec<String> = Vec::new();
    for item in &items {
        for name in item.fields().keys() {
            if !fields.contains(name) {
                fields.push(name.clone());
            }
        }
    }
    let Some(first) = items.first() else {
        return Ok(PromptSample::default());
    };
    let mut sample = PromptSample {
        fields,
        case_id: first.case_id.clone(),
        item_text: arbiter_domain::dataset::readable(&first.fields()),
        ..PromptSample::default()
    };
    let rendered = match crate::prompts::draw_exemplars(store, prompt).await {
        Ok(exemplars) => crate::prompts::renderer(prompt, exemplars.as_ref(), dataset_id)
            .and_then(|renderer| renderer.render(first).map_err(ServiceError::Invalid)),
        Err(err) => Err(err),
    };
    match rendered {
        Ok(rendered) => {
            let turns = rendered.item.input.turn_count();
            let mut prompt = rendered.body.as_text();
            if turns > 1 {
                prompt.push_str(&format!("\n\n({})", turn_note(turns)));
            }
            sample.prompt = Some(prompt);
            sample.targets = rendered.item.targets;
        }
        Err(err) => sample.problem = Some(err.to_string()),
    }
    Ok(sample)
}
