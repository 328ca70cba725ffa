//! An eval's prompt made ready to render: its few-shot exemplars drawn from their dataset's
//! newest revision, the renderer compiled with them, and every item of a revision rendered
//! once to refuse a bad one before anything is stored (when an eval is saved, and at each
//! launch, whose revision may be newer).

use crate::error::{ServiceError, ServiceResult};
use crate::runs::{EXPANSION_CHUNK, EXPANSION_CHUNK_BYTES};
use arbiter_domain::dataset::DatasetItem;
use arbiter_domain::grading::{Grader, GraderSpec};
use arbiter_domain::ids::{DatasetId, RevisionId};
use arbiter_domain::prompt::few_shot::{ExemplarDraw, Exemplars};
use arbiter_domain::prompt::{PromptRenderer, PromptSpec};
use arbiter_store::Store;

/// Most bytes of exemplar items a manifest may freeze: every shot must fit one prompt anyway.
const MAX_EXEMPLAR_BYTES: usize = 2 * arbiter_domain::prompt::MAX_PROMPT_BYTES;

/// Draws the eval's few-shot exemplars (`None` without few-shot), streaming over the
/// exemplar dataset's newest revision page by page.
pub async fn draw_exemplars(
    store: &dyn Store,
    prompt: &PromptSpec,
) -> ServiceResult<Option<Exemplars>> {
    let Some(few_shot) = &prompt.few_shot else {
        return Ok(None);
    };
    let dataset = store
        .get_dataset(few_shot.dataset_id)
        .await?
        .ok_or_else(|| {
            ServiceError::Invalid(format!(
                "the few-shot dataset (id {}) does not exist",
                few_shot.dataset_id
            ))
        })?;
    let revision = dataset.latest_revision.ok_or_else(|| {
        ServiceError::Invalid(format!(
            "the few-shot dataset `{}` has no items",
            dataset.name
        ))
    })?;
    let mut draw = ExemplarDraw::new(few_shot);
    let mut after_position = -1;
    loop {
        let page = store
            .items_after(
                revision.id,
                after_position,
                EXPANSION_CHUNK,
                EXPANSION_CHUNK_BYTES,
            )
            .await?;
        let Some((last, _)) = page.last() else {
            break;
        };
        after_position = *last;
        for (_, item) in &page {
            draw.offer(item);
        }
    }
    let items = draw.finish();
    check_exemplar_size(&items)?;
    if items.len() < few_shot.count as usize {
        return Err(ServiceError::Invalid(format!(
            "the few-shot dataset `{}` has {} items; {} shots were asked for",
            dataset.name,
            items.len(),
            few_shot.count
        )));
    }
    Ok(Some(Exemplars {
        dataset_id: few_shot.dataset_id,
        dataset_revision: revision.content_hash,
        items,
    }))
}

/// The eval's renderer, with its exemplars when it has any.
pub fn renderer(
    prompt: &PromptSpec,
    exemplars: Option<&Exemplars>,
    evaluated_dataset: DatasetId,
) -> ServiceResult<PromptRenderer> {
    let renderer = PromptRenderer::new(prompt).map_err(ServiceError::Invalid)?;
    match exemplars {
        Some(exemplars) => renderer
            .with_exemplars(exemplars, evaluated_dataset)
            .map_err(ServiceError::Invalid),
        None => Ok(renderer),
    }
}

/// Refuses exemplars too large to freeze into a manifest (every worker reads it).
pub fn check_exemplar_size(items: &[arbiter_domain::dataset::DatasetItem]) -> ServiceResult<()> {
    // The drawn items are frozen into every run's manifest, which each worker reads.
    let frozen: usize = items
        .iter()
        .map(|item| serde_json::to_string(item).map_or(0, |json| json.len()))
        .sum();
    if frozen > MAX_EXEMPLAR_BYTES {
        return Err(ServiceError::Invalid(format!(
            "the {} drawn few-shot exemplars hold {}; the limit is {} (use fewer shots, or a \
             dataset of shorter items)",
            items.len(),
            arbiter_domain::prompt::describe_bytes(frozen),
            arbiter_domain::prompt::describe_bytes(MAX_EXEMPLAR_BYTES)
        )));
    }
    Ok(())
}

/// What rendering every item of a revision found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemsChecked {
    pub items: u64,
    /// Turns of the items in all (equal to `items` unless some are conversations).
    pub turns: u64,
}

impl ItemsChecked {
    /// The manifest's count of conversation turns: `None` unless some item is a conversation.
    pub fn conversation_turns(&self) -> Option<u64> {
        (self.turns != self.items).then_some(self.turns)
    }
}

/// Checks one item as a launch does: its prompt (every turn of a conversation) renders, and a
/// grader that reads item fields (code tests, instructions) finds what it reads. `Ok`: the
/// item's turns; `Err`: what is wrong, to follow the item's name.
pub fn check_item(
    renderer: &PromptRenderer,
    grader: Option<&Grader>,
    item: &DatasetItem,
) -> Result<usize, String> {
    let turns = renderer.check_turns(item)?;
    if let Some(code) = grader.and_then(Grader::code_tests) {
        code.check_item(&item.fields())
            .map_err(|problem| format!("{problem}, which the code_tests grader reads"))?;
    }
    if let Some(instructions) = grader.and_then(Grader::instructions) {
        if turns > 1 {
            return Err(format!(
                "is a conversation of {turns} turns; the instructions grader checks one answer \
                 per item"
            ));
        }
        instructions
            .check_item(&item.fields())
            .map_err(|problem| format!("{problem}, which the instructions grader reads"))?;
    }
    Ok(turns)
}

/// Renders the prompt of every item of a revision (every turn of a conversation; streamed
/// page by page, nothing kept), and refuses the first that cannot be rendered, naming the
/// item and what is wrong: a missing or ill-typed field, a template error, a prompt over the
/// size limit.
pub async fn check_every_item(
    store: &dyn Store,
    renderer: &PromptRenderer,
    grader: &GraderSpec,
    revision_id: RevisionId,
) -> ServiceResult<ItemsChecked> {
    let compiled = grader.compile().ok();
    let mut checked = ItemsChecked::default();
    let mut after_position = -1;
    loop {
        let page = store
            .items_after(
                revision_id,
                after_position,
                EXPANSION_CHUNK,
                EXPANSION_CHUNK_BYTES,
            )
            .await?;
        let Some((last, _)) = page.last() else {
            return Ok(checked);
        };
        after_position = *last;
        for (_, item) in &page {
            let turns = check_item(renderer, compiled.as_ref(), item).map_err(|problem| {
                ServiceError::Invalid(format!("item `{}` {problem}", item.case_id))
            })?;
            checked.items += 1;
            checked.turns += turns as u64;
        }
    }
}
