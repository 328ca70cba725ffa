//! Use cases of runs: launching one (freezing the manifest, probing the endpoint, streaming the
//! dataset into result identities, answering from the generation cache, or copying a finished
//! run of the same requests whole), pausing, resuming and cancelling it, and reading its
//! progress.

use crate::clients::model::probe_fingerprint;
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::accounts::User;
use arbiter_domain::annotation::task::AnnotationTask;
use arbiter_domain::contamination::{FrozenContamination, NgramIndex};
use arbiter_domain::dataset::DatasetItem;
use arbiter_domain::expansion::{plan_identities, refined_cost};
use arbiter_domain::fields::MappedInput;
use arbiter_domain::grading::code_tests::SandboxRuntime;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::{Grader, GraderSpec, Verdict};
use arbiter_domain::ids::{CheckpointId, EvalId, RunId, UserId};
use arbiter_domain::manifest::{EvalSpec, FallbackTarget, Manifest};
use arbiter_domain::prompt::{PromptBody, PromptRenderer};
use arbiter_domain::run::{IdentityResult, LaunchedRun, Priority, RunProgress, RunStatus};
use arbiter_domain::serving::launch::LaunchState;
use arbiter_store::{CacheHit, NewIdentity, NewRun, Store};

/// Dataset items planned per expansion step; bounds the launcher's memory on any dataset size.
pub(crate) const EXPANSION_CHUNK: i64 = 2000;
/// Bytes of inputs and targets read per expansion step: a chunk of long items is cut short,
/// so a page never holds 2,000 one-megabyte inputs at once.
pub(crate) const EXPANSION_CHUNK_BYTES: i64 = 64 * 1024 * 1024;

/// The scheduling class named in a form: `promotion`, `scheduled` or `ablation`.
pub fn parse_priority(text: &str) -> ServiceResult<Priority> {
    Priority::from_form(text).map_err(ServiceError::Invalid)
}

/// Freezes the manifest for (eval, checkpoint) on the dataset's newest revision, then streams
/// the dataset through the planner into result identities, answering from the generation
/// cache whatever it already holds. Launching an unchanged manifest again returns the same
/// run, and finishes its expansion if an earlier launch was interrupted and the run is
/// expanding or cancelled (a run paused meanwhile stays paused: resuming it finishes it).
pub async fn launch_run(
    store: &dyn Store,
    eval_id: EvalId,
    checkpoint_id: CheckpointId,
    priority: Priority,
    team: &str,
    launched_by: Option<UserId>,
) -> ServiceResult<LaunchedRun> {
    let inputs = store.manifest_inputs(eval_id, checkpoint_id).await?;
    let eval = &inputs.eval;
    let checkpoint = &inputs.checkpoint;
    if let Some(retraction) = &checkpoint.retraction {
        return Err(ServiceError::Invalid(format!(
            "checkpoint `{}` was retracted ({}); no run is launched against it",
            checkpoint.name, retraction.reason
        )));
    }
    let serving = store.serving_of(checkpoint.id).await?;
    if serving.is_some() {
        // A checkpoint the serving canary held runs only when a person resumes one of its
        // paused runs: a new run would start its servers past the hold.
        let latest = store.list_launches(Some(checkpoint.id), 1).await?;
        if let Some(held) = latest
            .first()
            .filter(|launch| launch.state == LaunchState::Held)
        {
            return Err(ServiceError::Conflict(format!(
                "checkpoint `{}` is held by the serving canary ({}); resume one of its paused runs to run it anyway",
                checkpoint.name,
                held.failure.as_deref().unwrap_or("no reason kept")
            )));
        }
    }
    // Every prompt is rendered one at a time as the run expands and again by a worker; every
    // item of the revision (which may be newer than the one the eval was checked against when
    // saved) is rendered once first, so a bad item is refused before anything is stored.
    let exemplars = crate::prompts::draw_exemplars(store, &eval.prompt).await?;
    let renderer = crate::prompts::renderer(&eval.prompt, exemplars.as_ref(), eval.dataset_id)?;
    let checked =
        crate::prompts::check_every_item(store, &renderer, &eval.grader, inputs.revision.id)
            .await?;
    let sandbox = code_sandbox(&eval.grader).await?;
    // The corpus index is read (and its hash taken) now: a missing or damaged file refuses
    // the launch, and the manifest says exactly which corpus the items were checked against.
    let contamination = match &eval.prompt.contamination {
        Some(check) => {
            let index = load_contamination_index(&check.index).await?;
            Some((
                FrozenContamination {
                    index: check.index.clone(),
                    content_hash: index.content_hash.clone(),
                    n: index.n,
                    check_target: check.check_target,
                },
                index,
            ))
        }
        None => None,
    };
    if eval.prompt.likelihood.is_some() {
        require_prompt_logprobs(checkpoint).await?;
    }
    let rolling_prefix_token = match &eval.prompt.rolling {
        Some(rolling) => Some(require_rolling_support(checkpoint, rolling).await?),
        None => None,
    };
    let manifest = Manifest {
        eval_id: eval.id,
        eval: EvalSpec {
            name: eval.name.clone(),
            prompt: eval.prompt.clone(),
            grader: eval.grader.clone(),
            generation: eval.generation(),
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
        fingerprint: match &serving {
            Some(serving) => crate::serving::served_fingerprint(checkpoint, serving),
            None => probe_fingerprint(checkpoint).await,
        },
        fallback: inputs.fallback.as_ref().map(|fallback| FallbackTarget {
            checkpoint_name: fallback.name.clone(),
            endpoint_url: fallback.base_url.clone(),
            served_model: fallback.model.clone(),
        }),
        triage: crate::grading::freeze_triage(store, eval.id).await?,
        exemplars,
        conversation_turns: checked.conversation_turns(),
        sandbox,
        contamination: contamination.as_ref().map(|(frozen, _)| frozen.clone()),
        rolling_prefix_token,
        serving,
    };
    let launched = store
        .create_run(&NewRun {
            manifest: &manifest,
            priority,
            team,
            created_by: launched_by,
        })
        .await?;
    // A cancelled run of another team stays cancelled: relaunching its manifest must not undo
    // that team's decision (its members, leads and admins resume it on its page).
    if launched.status == RunStatus::Cancelled {
        let owner = store.run_team(launched.run_id).await?.unwrap_or_default();
        if owner != team {
            return Err(ServiceError::Forbidden(format!(
                "run {} of this eval and checkpoint was cancelled by team `{owner}`; its members, \
                 leads and admins may resume it on its page",
                launched.run_id
            )));
        }
    }
    // A new (or interrupted) launch is expanded; a cancelled one is picked up where it
    // stopped, its planning finished first if it was cancelled while it expanded. Either way
    // it runs now, unless every identity is already answered.
    let status = match launched.status {
        RunStatus::Expanding | RunStatus::Cancelled => {
            // An unchanged manifest's run (under another eval, say) is copied inside the
            // database from the run that answered it, when that run's answers all stand.
            let reused = launched.status == RunStatus::Expanding
                && store
                    .reuse_finished_run(launched.run_id, &manifest)
                    .await?
                    .is_some();
            let plan = match launched.status {
                RunStatus::Expanding => !reused,
                // Stopped while it expanded, after (or while) its launch died part-way: such a
                // run would never complete if set running as it is.
                _ => !store.planned_in_full(launched.run_id).await?,
            };
            if plan {
                let index = contamination.map(|(_, index)| index);
                expand(store, launched.run_id, &manifest, renderer, index.as_ref()).await?;
            }
            let running = store
                .set_run_status(launched.run_id, &[launched.status], RunStatus::Running)
                .await?;
            if !running {
                // Paused by a serving canary's hold, or cancelled, while it was planned: it
                // stays so, and its servers are not woken past the hold.
                let (status, _) = store.run_state(launched.run_id).await?.ok_or_else(|| {
                    ServiceError::NotFound(format!("no run with id {}", launched.run_id))
                })?;
                return Ok(LaunchedRun { status, ..launched });
            }
            // A run answered wholly at launch (copied, or from the cache) needs no servers.
            if store.finish_run_if_done(launched.run_id).await? {
                RunStatus::Completed
            } else {
                crate::serving::wake_servers(store, checkpoint.id).await?;
                RunStatus::Running
            }
        }
        other => other,
    };
    Ok(LaunchedRun { status, ..launched })
}

/// The n-gram index of a contamination check, read off the async threads.
async fn load_contamination_index(path: &str) -> ServiceResult<NgramIndex> {
    let path = std::path::PathBuf::from(path);
    tokio::task::spawn_blocking(move || crate::contamination::load_index(&path))
        .await
        .map_err(|_| ServiceError::Internal)?
}

/// Plans the identities a stopped run's launch never wrote, from its frozen manifest (the
/// prompt with its frozen exemplars, the corpus index the launch checked against), so that
/// resuming it runs every identity. Identities already written are skipped.
async fn finish_planning(store: &dyn Store, run_id: RunId) -> ServiceResult<()> {
    if store.planned_in_full(run_id).await? {
        return Ok(());
    }
    let manifest = store
        .run_manifest(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))?;
    let renderer = crate::prompts::renderer(
        &manifest.eval.prompt,
        manifest.exemplars.as_ref(),
        manifest.dataset_id,
    )?;
    let index = match &manifest.contamination {
        Some(frozen) => {
            let index = load_contamination_index(&frozen.index).await?;
            if index.content_hash != frozen.content_hash {
                return Err(ServiceError::Conflict(format!(
                    "run {run_id} was stopped before its launch planned all its identities, and \
                     the contamination index {} has changed since it was launched; cancel this \
                     run and launch the eval again",
                    frozen.index
                )));
            }
            Some(index)
        }
        None => None,
    };
    expand(store, run_id, &manifest, renderer, index.as_ref()).await
}

/// The sandbox a `code_tests` grader's run is frozen with; `None` for other graders. Refused
/// where no sandbox runs: model-written code is never run unsandboxed.
async fn code_sandbox(grader: &GraderSpec) -> ServiceResult<Option<SandboxRuntime>> {
    if !matches!(grader, GraderSpec::CodeTests { .. }) {
        return Ok(None);
    }
    let available = crate::sandbox::Sandbox::shared()
        .await
        .map(|sandbox| sandbox.runtime().clone());
    frozen_sandbox(available).map(Some)
}

/// Refuses a likelihood eval on a checkpoint any of whose endpoints returns no prompt
/// logprobs: its scores would be chance, not the model's.
async fn require_prompt_logprobs(
    checkpoint: &arbiter_domain::checkpoint::Checkpoint,
) -> ServiceResult<()> {
    let urls = std::iter::once(&checkpoint.base_url).chain(&checkpoint.replica_urls);
    for url in urls {
        if let Err(problem) = crate::clients::model::probe_prompt_logprobs(checkpoint, url).await {
            return Err(ServiceError::Invalid(format!(
                "this eval scores choices by likelihood, which needs prompt logprobs (`echo` with \
                 `logprobs` on /completions), and checkpoint `{}` at {url} did not return them: \
                 {problem}; it is not launched, since its scores would be chance",
                checkpoint.name
            )));
        }
    }
    Ok(())
}

/// Refuses a rolling-likelihood eval on a checkpoint any of whose endpoints cannot score it
/// (no `/tokenize`, no prompt logprobs on token prompts, too short a context), and returns the
/// prefix token every endpoint agrees on.
async fn require_rolling_support(
    checkpoint: &arbiter_domain::checkpoint::Checkpoint,
    rolling: &arbiter_domain::rolling::RollingSpec,
) -> ServiceResult<u32> {
    let mut agreed: Option<(u32, &str)> = None;
    let urls = std::iter::once(&checkpoint.base_url).chain(&checkpoint.replica_urls);
    for url in urls {
        let prefix = crate::clients::model::probe_rolling(checkpoint, url, rolling)
            .await
            .map_err(|problem| {
                ServiceError::Invalid(format!(
                    "this eval scores rolling likelihood, which needs the server's /tokenize and \
                     prompt logprobs on prompts of token ids, and checkpoint `{}` at {url} cannot \
                     give them: {problem}; it is not launched",
                    checkpoint.name
                ))
            })?;
        match agreed {
            Some((first, first_url)) if first != prefix => {
                return Err(ServiceError::Invalid(format!(
                    "checkpoint `{}`'s replicas disagree on the prefix token ({first} at \
                     {first_url}, {prefix} at {url}): they do not serve one tokenizer; it is not \
                     launched",
                    checkpoint.name
                )))
            }
            _ => agreed = Some((prefix, url)),
        }
    }
    Ok(agreed.map_or(0, |(prefix, _)| prefix))
}

/// The sandbox to freeze, or the refusal when none is available.
fn frozen_sandbox(available: Result<SandboxRuntime, String>) -> ServiceResult<SandboxRuntime> {
    available.map_err(|why| {
        ServiceError::Invalid(format!(
            "this eval's code_tests grader runs the model's code, which needs a sandbox, and none \
             can run on this server: {why}"
        ))
    })
}

/// Writes a run's result identities chunk by chunk, repetition by repetition; cached
/// generations are graded and stored as finished right away. Each chunk is written while the
/// next one is read and planned, so the database's writer and its readers work side by side.
async fn expand(
    store: &dyn Store,
    run_id: RunId,
    manifest: &Manifest,
    renderer: PromptRenderer,
    contamination: Option<&NgramIndex>,
) -> ServiceResult<()> {
    let mut cursor = ExpansionCursor {
        repetition: 0,
        after_position: -1,
    };
    // Checked when the eval was saved; a grader that no longer compiles grades nothing here,
    // and its workers report the problem on every item.
    // Graders that read item fields (code tests in a worker's sandbox, instructions) grade
    // where the item is at hand: cached answers of such a run are queued.
    let grader = manifest
        .eval
        .grader
        .compile()
        .ok()
        .filter(|grader| !grader.reads_item_fields());
    let planner = Planner {
        manifest,
        renderer,
        grader: grader.as_ref(),
        contamination: contamination.map(|index| (index, run_id)),
    };
    let mut ready = plan_next_chunk(store, &planner, &mut cursor).await?;
    while let Some(identities) = ready.take() {
        let (written, next) = tokio::join!(
            store.insert_identities(run_id, manifest, &identities),
            plan_next_chunk(store, &planner, &mut cursor),
        );
        written?;
        ready = next?;
    }
    store.mark_planned_in_full(run_id).await?;
    Ok(())
}

/// What plans a run's identities: its manifest, with the prompt and grader compiled once.
struct Planner<'a> {
    manifest: &'a Manifest,
    renderer: PromptRenderer,
    grader: Option<&'a Grader>,
    /// The corpus index items are checked against, and the run their flags are kept for.
    contamination: Option<(&'a NgramIndex, RunId)>,
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
    planner: &Planner<'_>,
    cursor: &mut ExpansionCursor,
) -> ServiceResult<Option<Vec<NewIdentity>>> {
    let manifest = planner.manifest;
    let chunk = loop {
        if cursor.repetition >= i64::from(manifest.eval.repetitions) {
            return Ok(None);
        }
        let chunk = store
            .items_after(
                manifest.dataset_revision_id,
                cursor.after_position,
                EXPANSION_CHUNK,
                EXPANSION_CHUNK_BYTES,
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
    // Each case is checked once, at its first repetition.
    if let (Some((index, run_id)), 0) = (planner.contamination, cursor.repetition) {
        let flags = contaminated_items(manifest, index, &items);
        if !flags.is_empty() {
            store.record_contamination(run_id, &flags).await?;
        }
    }
    // Every item rendered when the launch began; an error now means the revision changed
    // under a running launch, which stores cannot do (revisions are immutable).
    let mut planned = plan_identities(manifest, &planner.renderer, &items, cursor.repetition)
        .map_err(ServiceError::Invalid)?;
    // Later turns of conversations have no key yet: their requests hold earlier answers.
    let keys: Vec<String> = planned
        .iter()
        .filter_map(|identity| identity.generation_key.clone())
        .collect();
    let cached: std::collections::HashMap<String, arbiter_store::CachedGeneration> =
        store.cached_generations(&keys).await?.into_iter().collect();
    let has_judges = manifest
        .triage
        .as_ref()
        .is_some_and(|triage| triage.cheap_judge.is_some());
    // Each identity's answer from the cache, graded against its own targets (two items can
    // share a request, and so a cached answer, yet not their answer keys). An answer its
    // grader cannot decide is queued instead when the eval has judges.
    let answered: Vec<Option<CacheHit>> = planned
        .iter()
        .map(|identity| {
            let hit = cached.get(identity.generation_key.as_ref()?)?;
            let generation = cached_answer(manifest, hit, &identity.targets);
            if generation.outcome.is_error() {
                return None;
            }
            // A rolling score is the answer itself: nothing to grade.
            if manifest.eval.prompt.rolling.is_some() {
                return generation.rolling.is_some().then(|| CacheHit {
                    source_identity_id: hit.source_identity_id,
                    generation,
                    grading: Grading::scored(),
                });
            }
            let grader = planner.grader?;
            let grade = grader.grade_any(&generation.output, &identity.targets);
            if has_judges && grade.verdict == Verdict::Uncertain {
                return None;
            }
            Some(CacheHit {
                source_identity_id: hit.source_identity_id,
                generation,
                grading: Grading::deterministic_only(Some(grade)).route(manifest.triage.as_ref()),
            })
        })
        .collect();
    // Only identities that will be queued need an order: refine their cost by the lengths
    // their cases were seen to take (a re-run answered from the cache skips this read).
    let to_queue: Vec<String> = planned
        .iter()
        .zip(&answered)
        .filter(|(_, hit)| hit.is_none())
        .map(|(identity, _)| identity.case_id.clone())
        .collect();
    // Scoring requests generate one token whatever the budget: their estimate stands.
    let scores =
        manifest.eval.prompt.likelihood.is_some() || manifest.eval.prompt.rolling.is_some();
    if !to_queue.is_empty() && !scores {
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
            .zip(answered)
            .map(|(planned, cached)| NewIdentity { planned, cached })
            .collect(),
    ))
}

/// The items whose text (input, and target when the check says so) shares an n-gram with the
/// corpus, with what was found. An item the mapping cannot read was refused before launch.
fn contaminated_items(
    manifest: &Manifest,
    index: &NgramIndex,
    items: &[DatasetItem],
) -> Vec<(String, arbiter_domain::contamination::Overlap)> {
    let check_target = manifest
        .contamination
        .as_ref()
        .is_some_and(|frozen| frozen.check_target);
    items
        .iter()
        .filter_map(|item| {
            let mapped = manifest
                .eval
                .prompt
                .mapping
                .apply(&item.case_id, &item.fields())
                .ok()?;
            let mut text = match &mapped.input {
                MappedInput::Text(text) => text.clone(),
                MappedInput::Messages(messages) => messages
                    .iter()
                    .map(|message| message.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                MappedInput::Turns(turns) => turns.join("\n"),
            };
            if !mapped.choices.is_empty() {
                text.push('\n');
                text.push_str(&mapped.choices.join("\n"));
            }
            let mut overlap = index.check(&text);
            if check_target && !overlap.contaminated() {
                overlap = index.check(&mapped.target_text());
            }
            overlap
                .contaminated()
                .then(|| (item.case_id.clone(), overlap))
        })
        .collect()
}

/// A cached answer as this run reads it: a likelihood eval's letter and right choices are
/// taken from the cached scores under its own selection and the item's targets.
fn cached_answer(
    manifest: &Manifest,
    hit: &arbiter_store::CachedGeneration,
    targets: &[String],
) -> arbiter_domain::answer::Generation {
    let mut generation = hit.to_generation();
    if let Some(likelihood) = &manifest.eval.prompt.likelihood {
        likelihood.reanswer(&mut generation, targets);
    }
    generation
}

/// Refuses `user` acting on a run (`action`, e.g. "pause") unless they act for the team it is
/// charged to: its members, leads and admins.
pub async fn require_run_team(
    store: &dyn Store,
    user: &User,
    run_id: RunId,
    action: &str,
) -> ServiceResult<()> {
    let team = store
        .run_team(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))?;
    if !user.acts_for_team(&team) {
        return Err(ServiceError::Forbidden(format!(
            "run {run_id} belongs to team `{team}`; only its members, leads and admins may {action} it"
        )));
    }
    Ok(())
}

/// Pause (`paused`), resume (`running`) or cancel (`cancelled`) a run. Requests already in
/// flight finish and are recorded; nothing new is claimed while paused or cancelled. Only the
/// members of the team the run is charged to, leads and admins may.
pub async fn change_run_state(
    store: &dyn Store,
    user: &User,
    run_id: RunId,
    action: &str,
) -> ServiceResult<()> {
    use RunStatus::{Cancelled, Expanding, Paused, Running};
    let (from, to): (&[RunStatus], RunStatus) = match action {
        "pause" => (&[Running], Paused),
        "resume" => (&[Paused, Cancelled], Running),
        "cancel" => (&[Running, Paused, Expanding], Cancelled),
        other => {
            return Err(ServiceError::Invalid(format!(
                "unknown action `{other}`; use pause, resume or cancel"
            )))
        }
    };
    require_run_team(store, user, run_id, action).await?;
    let mut from = from;
    let planned_in: [RunStatus; 1];
    if to == Running {
        let header = store.run_header(run_id).await?;
        if let Some(reason) = header
            .as_ref()
            .and_then(|run| run.checkpoint_retracted.as_ref())
        {
            return Err(ServiceError::Conflict(format!(
                "run {run_id}'s checkpoint was retracted ({reason}); the run cannot be resumed"
            )));
        }
        // A run cancelled, or paused by a serving canary's hold, while it expanded may lack
        // identities its launch never wrote: planned while it is still stopped, so no worker
        // takes it before it is whole.
        if let Some(run) = header.filter(|run| matches!(run.status, Cancelled | Paused)) {
            finish_planning(store, run_id).await?;
            // Only the state it was planned in is resumed: a cancel meanwhile stands.
            planned_in = [run.status];
            from = &planned_in;
        }
    }
    if store.set_run_status(run_id, from, to).await? {
        if to == Running && !store.finish_run_if_done(run_id).await? {
            if let Some(manifest) = store.run_manifest(run_id).await? {
                crate::serving::wake_servers(store, manifest.checkpoint_id).await?;
            }
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

/// The first `limit` results of a run as people read them. An eval of the original shape
/// shows each item's input and target as they are; any other shows what the eval made of the
/// item: the prompt it sent (for a conversation's turn, that turn's message) and the turn's
/// acceptable answers under the mapping (a shuffled choice's letter, not the item's index).
pub async fn run_results(
    store: &dyn Store,
    run_id: RunId,
    limit: i64,
) -> ServiceResult<Vec<IdentityResult>> {
    let mut results = store.run_results(run_id, limit).await?;
    let Some(manifest) = store.run_manifest(run_id).await? else {
        return Ok(results);
    };
    let Some(renderer) = renderer_to_show(&manifest)? else {
        return Ok(results);
    };
    // Results come in dataset order, so the page's items are the revision's first ones.
    let items: std::collections::HashMap<String, DatasetItem> = store
        .list_items(manifest.dataset_revision_id, limit, 0)
        .await?
        .into_iter()
        .map(|item| (item.case_id.clone(), item))
        .collect();
    for result in &mut results {
        let Some(item) = items.get(&result.case_id) else {
            continue;
        };
        if let Some((prompt, target)) = as_sent(&renderer, item, result.turn) {
            result.input = prompt;
            result.target = target;
        }
    }
    Ok(results)
}

/// The renderer that shows a run's items as its eval sent them; `None` for an eval of the
/// original shape, whose items' input and target are what was sent and expected.
fn renderer_to_show(
    manifest: &arbiter_domain::manifest::Manifest,
) -> ServiceResult<Option<PromptRenderer>> {
    let prompt = &manifest.eval.prompt;
    if *prompt == arbiter_domain::prompt::PromptSpec::placeholder(&prompt.template) {
        return Ok(None);
    }
    crate::prompts::renderer(prompt, manifest.exemplars.as_ref(), manifest.dataset_id).map(Some)
}

/// Shows an annotation task's item as its eval sent it: the whole request as text (for a later
/// turn of a conversation, every earlier turn with the model's own answer, then this turn) and
/// this turn's acceptable answers; an eval of the original shape keeps the item's input and
/// target. Raters judge the answer in the context the model had, rendered as people read it.
pub async fn show_task_as_sent(store: &dyn Store, task: &mut AnnotationTask) -> ServiceResult<()> {
    let mut texts = ItemTexts {
        input: &mut task.input,
        images: &mut task.images,
        target: &mut task.target,
        output: &task.output,
        second_output: task.pair.as_ref().map(|pair| pair.right_output.as_str()),
    };
    let (shown, right_shown) = show_as_sent(store, task.identity_id, &mut texts).await?;
    task.shown = Some(shown);
    if let Some(pair) = task.pair.as_mut() {
        pair.right_shown = right_shown;
    }
    Ok(())
}

/// Shows a label under review as its eval sent the item, as [`show_task_as_sent`] does for the
/// rater: reviewers judge the label against what the model saw.
pub async fn show_review_as_sent(
    store: &dyn Store,
    item: &mut arbiter_domain::annotation::review::ReviewItem,
) -> ServiceResult<()> {
    let mut texts = ItemTexts {
        input: &mut item.input,
        images: &mut item.images,
        target: &mut item.target,
        output: &item.output,
        second_output: item
            .pair
            .as_ref()
            .map(|pair| pair.right.right_output.as_str()),
    };
    let (shown, right_shown) = show_as_sent(store, item.identity_id, &mut texts).await?;
    item.shown = Some(shown);
    if let Some(pair) = item.pair.as_mut() {
        pair.right.right_shown = right_shown;
    }
    Ok(())
}

/// Shows a rater's own label's item as its eval sent it, as [`show_task_as_sent`] does.
pub async fn show_own_label_as_sent(
    store: &dyn Store,
    label: &mut arbiter_domain::annotation::review::OwnLabel,
) -> ServiceResult<()> {
    let mut texts = ItemTexts {
        input: &mut label.input,
        images: &mut label.images,
        target: &mut label.target,
        output: &label.output,
        second_output: label
            .pair
            .as_ref()
            .map(|pair| pair.right.right_output.as_str()),
    };
    let (shown, right_shown) = show_as_sent(store, label.identity_id, &mut texts).await?;
    label.shown = Some(shown);
    if let Some(pair) = label.pair.as_mut() {
        pair.right.right_shown = right_shown;
    }
    Ok(())
}

/// The texts of an item on a person's screen, as stored; the request's parts are replaced by
/// what the eval sent.
struct ItemTexts<'a> {
    input: &'a mut String,
    images: &'a mut Vec<String>,
    target: &'a mut String,
    output: &'a str,
    /// A pair's other output (shown as B), rendered the same way.
    second_output: Option<&'a str>,
}

async fn show_as_sent(
    store: &dyn Store,
    identity: Option<arbiter_domain::ids::IdentityId>,
    texts: &mut ItemTexts<'_>,
) -> ServiceResult<(
    arbiter_domain::annotation::shown::ShownItem,
    Option<arbiter_domain::annotation::shown::ShownText>,
)> {
    // An item pushed from outside is shown as pushed: no eval sent it.
    let sent = match identity {
        Some(identity) => item_as_sent(store, identity).await?,
        None => None,
    };
    let code_eval = sent.as_ref().is_some_and(|sent| sent.code_eval);
    let mut conversation = Vec::new();
    if let Some(request) = sent.and_then(|sent| sent.request) {
        *texts.input = request.input;
        *texts.images = request.images;
        *texts.target = request.target;
        conversation = request.conversation;
    }
    // Markdown and highlighting are CPU work (milliseconds for long code): off the async
    // threads, so one page of long items does not stall other requests.
    let (input, target, output) = (
        texts.input.clone(),
        texts.target.clone(),
        texts.output.to_string(),
    );
    let second_output = texts.second_output.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        (
            crate::display::show_item(&input, conversation, &target, &output, code_eval),
            second_output.map(|second| crate::display::show_text(&second, code_eval)),
        )
    })
    .await
    .map_err(|err| {
        tracing::error!(error = %err, "rendering an item failed");
        ServiceError::Internal
    })
}

/// What an identity's eval sent, for people.
struct SentItem {
    /// The eval checks answers by running them (its texts are code).
    code_eval: bool,
    /// The request rebuilt; `None` for an eval of the original shape (the stored item is
    /// what was sent) or an item that no longer renders.
    request: Option<SentRequest>,
}

struct SentRequest {
    input: String,
    images: Vec<String>,
    target: String,
    /// The messages, when more than one was sent: `(role, content, images)`.
    conversation: Vec<(String, String, Vec<String>)>,
}

/// The question an identity's item was sent as, in text (a pairwise judge reads it); `None`
/// when the identity or its run is gone, or its eval sends items as they are.
pub(crate) async fn question_as_sent(
    store: &dyn Store,
    identity: arbiter_domain::ids::IdentityId,
) -> ServiceResult<Option<String>> {
    Ok(item_as_sent(store, identity)
        .await?
        .and_then(|sent| sent.request)
        .map(|request| request.input))
}

/// The request for an identity's item as text with its images and this turn's acceptable
/// answers; `None` when the identity or its run is gone.
async fn item_as_sent(
    store: &dyn Store,
    identity: arbiter_domain::ids::IdentityId,
) -> ServiceResult<Option<SentItem>> {
    let Some(context) = store.identity_context(identity).await? else {
        return Ok(None);
    };
    let Some(manifest) = store.run_manifest(context.run_id).await? else {
        return Ok(None);
    };
    let code_eval = manifest.sandbox.is_some();
    // A prompt that no longer compiles leaves the item as stored (logged), never the rater's
    // queue stuck on an error.
    let renderer = match renderer_to_show(&manifest) {
        Ok(Some(renderer)) => renderer,
        Ok(None) => {
            return Ok(Some(SentItem {
                code_eval,
                request: None,
            }))
        }
        Err(err) => {
            tracing::warn!(error = %err, run = context.run_id.get(), "cannot show an item as its eval sent it");
            return Ok(Some(SentItem {
                code_eval,
                request: None,
            }));
        }
    };
    let turn = usize::try_from(context.turn).unwrap_or(1);
    let request = renderer
        .render_turn(&context.item, turn, &context.earlier_answers)
        .ok()
        .map(|rendered| SentRequest {
            input: rendered.body.as_text(),
            images: rendered.body.images(),
            target: rendered.item.target_text(),
            conversation: match &rendered.body {
                PromptBody::Chat(messages) if messages.len() > 1 => messages
                    .iter()
                    .map(|message| {
                        (
                            message.role.as_str().to_string(),
                            message.content.clone(),
                            message.images.clone(),
                        )
                    })
                    .collect(),
                _ => Vec::new(),
            },
        });
    Ok(Some(SentItem { code_eval, request }))
}

/// The images each identity of `run` had its item sent with (empty for items without images),
/// for pages that show stored items. A run whose eval can send no image costs one manifest
/// read; otherwise each item is read and mapped.
pub async fn images_sent(
    store: &dyn Store,
    run: RunId,
    identities: &[arbiter_domain::ids::IdentityId],
) -> ServiceResult<Vec<Vec<String>>> {
    let Some(manifest) = store.run_manifest(run).await? else {
        return Ok(vec![Vec::new(); identities.len()]);
    };
    let prompt = &manifest.eval.prompt;
    // Images come from a mapped field, or from message parts of items sent as they are.
    let sends_conversations = prompt.template.is_empty() && prompt.messages.is_empty();
    if prompt.mapping.images.is_none() && !sends_conversations {
        return Ok(vec![Vec::new(); identities.len()]);
    }
    let mut all = Vec::with_capacity(identities.len());
    for &identity in identities {
        let images = match store.identity_context(identity).await? {
            Some(context) => prompt
                .mapping
                .apply(&context.item.case_id, &context.item.fields())
                .map(|mapped| {
                    let mut images = mapped.images;
                    if let arbiter_domain::fields::MappedInput::Messages(messages) = mapped.input {
                        images.extend(messages.into_iter().flat_map(|message| message.images));
                    }
                    images
                })
                .unwrap_or_default(),
            None => Vec::new(),
        };
        all.push(images);
    }
    Ok(all)
}

/// An item's prompt as its eval sent it, and the acceptable answers, for turn `turn`: a later
/// turn of a conversation shows its own message (the earlier ones are the rows before it).
fn as_sent(renderer: &PromptRenderer, item: &DatasetItem, turn: i64) -> Option<(String, String)> {
    let turn = usize::try_from(turn).ok().filter(|turn| *turn >= 1)?;
    let no_answers = vec![String::new(); turn - 1];
    let rendered = renderer.render_turn(item, turn, &no_answers).ok()?;
    let prompt = match (&rendered.body, turn) {
        (PromptBody::Chat(messages), turn) if turn > 1 => messages.last()?.content.clone(),
        (body, _) => body.as_text(),
    };
    Some((prompt, rendered.item.target_text()))
}

pub async fn run_progress(store: &dyn Store, run_id: RunId) -> ServiceResult<RunProgress> {
    store
        .run_progress(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_eval_without_a_sandbox_is_refused_with_the_reason() {
        let refused = frozen_sandbox(Err("bubblewrap (`bwrap`) cannot be run".into()));
        match refused {
            Err(ServiceError::Invalid(message)) => {
                assert!(message.contains("needs a sandbox"), "{message}");
                assert!(
                    message.ends_with("bubblewrap (`bwrap`) cannot be run"),
                    "{message}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
