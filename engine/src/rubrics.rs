//! Rubrics raters answer: defining versions and guidelines, and a rater's answers checked
//! against the rubric of the item they hold before they are stored.

use arbiter_domain::annotation::rubric::DimensionKind;
use arbiter_domain::annotation::rubric::{
    check_guidelines, check_name, parse_rubric, Guidelines, RubricAnswer, RubricEntry,
    RubricVersion,
};
use arbiter_domain::annotation::task::{ClaimHandle, TaskRubric, TrainingFeedback};
use arbiter_domain::grading::scale::MAX_JUDGED_POINTS;
use arbiter_domain::ids::UserId;
use arbiter_store::annotation::RubricLabel;
use arbiter_store::Store;

use crate::error::{ServiceError, ServiceResult};

/// Longest note on a version.
const MAX_NOTE_CHARS: usize = 1_000;

/// Every rubric, by name, newest version first.
pub async fn rubric_entries(store: &dyn Store) -> ServiceResult<Vec<RubricEntry>> {
    let mut entries: Vec<RubricEntry> = Vec::new();
    for version in store.list_rubrics().await? {
        match entries.last_mut() {
            Some(entry) if entry.latest.name == version.name => entry.older.push(version),
            _ => entries.push(RubricEntry {
                latest: version,
                older: Vec::new(),
                guidelines: None,
                guidelines_html: String::new(),
            }),
        }
    }
    for entry in &mut entries {
        entry.guidelines = store
            .guidelines(&entry.latest.name)
            .await?
            .into_iter()
            .next();
        entry.guidelines_html = entry
            .guidelines
            .as_ref()
            .map(|guidelines| crate::display::markdown_html(&guidelines.markdown))
            .unwrap_or_default();
    }
    Ok(entries)
}

/// The dimensions a judge can score, by rubric (newest versions): `(rubric name, keys)` of
/// ordinal dimensions of at most [`MAX_JUDGED_POINTS`] points, rubrics without one left out.
pub async fn judged_scales(store: &dyn Store) -> ServiceResult<Vec<(String, Vec<String>)>> {
    Ok(rubric_entries(store)
        .await?
        .into_iter()
        .filter_map(|entry| {
            let keys: Vec<String> = entry
                .latest
                .rubric
                .dimensions
                .iter()
                .filter(|dimension| match &dimension.kind {
                    DimensionKind::Ordinal { scale } => {
                        scale.len() <= usize::from(MAX_JUDGED_POINTS)
                    }
                    _ => false,
                })
                .map(|dimension| dimension.key.clone())
                .collect();
            (!keys.is_empty()).then_some((entry.latest.name, keys))
        })
        .collect())
}

/// Saves the rubric written as JSON as the next version of `name`.
pub async fn create_rubric(
    store: &dyn Store,
    name: &str,
    definition: &str,
    note: &str,
    created_by: Option<UserId>,
) -> ServiceResult<RubricVersion> {
    let name = name.trim();
    check_name(name).map_err(ServiceError::Invalid)?;
    let rubric = parse_rubric(definition).map_err(ServiceError::Invalid)?;
    Ok(store
        .create_rubric(name, &rubric, &clip(note), created_by)
        .await?)
}

/// Saves the next version of a rubric's guidelines.
pub async fn add_guidelines(
    store: &dyn Store,
    rubric_name: &str,
    markdown: &str,
    note: &str,
    created_by: Option<UserId>,
) -> ServiceResult<Guidelines> {
    check_guidelines(markdown).map_err(ServiceError::Invalid)?;
    Ok(store
        .add_guidelines(rubric_name.trim(), markdown, &clip(note), created_by)
        .await?)
}

fn clip(note: &str) -> String {
    note.trim().chars().take(MAX_NOTE_CHARS).collect()
}

/// A rubric that decides items (an eval's triage policy names it) must say which answer
/// passes.
pub fn check_decides(version: &RubricVersion) -> ServiceResult<()> {
    if version.rubric.verdict.is_some() {
        Ok(())
    } else {
        Err(ServiceError::Invalid(format!(
            "rubric `{}` (version {}) says no verdict: add `\"verdict\": {{\"dimension\": …}}` naming the dimension that passes or fails an item",
            version.name, version.version
        )))
    }
}

/// Records a rater's answers to the rubric of the item they hold: read as JSON by dimension
/// key, checked against that rubric (every required dimension, each answer of its kind), and
/// stored with the verdict the rubric's rule gives them.
pub async fn submit_answers(
    store: &dyn Store,
    handle: &ClaimHandle,
    user_id: UserId,
    answers_json: &str,
    rationale: &str,
    guideline_version: Option<i64>,
) -> ServiceResult<Option<TrainingFeedback>> {
    let rubric_id = store
        .leased_rubric(handle, user_id)
        .await?
        .ok_or_else(|| ServiceError::Invalid("this item asks pass or fail, not a rubric".into()))?;
    let (version, answers, pass) = checked_answers(store, rubric_id, answers_json).await?;
    if let Some(shown) = guideline_version {
        let known = store
            .guidelines(&version.name)
            .await?
            .iter()
            .any(|guidelines| guidelines.version == shown);
        if !known {
            return Err(ServiceError::Invalid(format!(
                "rubric `{}` has no guidelines version {shown}",
                version.name
            )));
        }
    }
    let label = RubricLabel {
        rubric_id,
        answers: serde_json::to_string(&answers).expect("answers always serialize"),
        pass,
        guideline_version,
    };
    Ok(store
        .submit_rubric_label(handle, user_id, &label, rationale)
        .await?)
}

/// Answers to rubric version `rubric_id` read from JSON by dimension key and checked against
/// it (every required dimension, each answer of its kind), with the rubric and the verdict its
/// rule gives them.
pub(crate) async fn checked_answers(
    store: &dyn Store,
    rubric_id: i64,
    answers_json: &str,
) -> ServiceResult<(RubricVersion, RubricAnswer, bool)> {
    let version = store
        .get_rubric(rubric_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no rubric with id {rubric_id}")))?;
    let answers: RubricAnswer = serde_json::from_str(answers_json).map_err(|err| {
        ServiceError::Invalid(format!("answers are a JSON object by dimension key: {err}"))
    })?;
    version
        .rubric
        .check_answer(&answers)
        .map_err(ServiceError::Invalid)?;
    let pass = version.rubric.verdict_of_answer(&answers).ok_or_else(|| {
        ServiceError::Invalid(format!(
            "rubric `{}` says no verdict, so its answers cannot decide an item",
            version.name
        ))
    })?;
    Ok((version, answers, pass))
}

/// Changes a rater's own label while its item waits for other raters: a pass/fail label to
/// `verdict` (`pass` or `fail`), a rubric label to new `answers` (JSON by dimension key,
/// checked against its rubric, whose verdict follows them).
pub async fn edit_own_label(
    store: &dyn Store,
    label_id: i64,
    rater_id: UserId,
    verdict: &str,
    answers: &str,
    rationale: &str,
) -> ServiceResult<()> {
    if rationale.chars().count() > arbiter_domain::annotation::task::MAX_RATIONALE_CHARS {
        return Err(ServiceError::Invalid(format!(
            "the rationale is longer than {} characters",
            arbiter_domain::annotation::task::MAX_RATIONALE_CHARS
        )));
    }
    match (store.label_rubric(label_id).await?, answers.trim()) {
        (Some(_), "") => Err(ServiceError::Invalid(
            "this label answers a rubric: change its answers".into(),
        )),
        (Some((rubric_id, _)), answers) => {
            let (_, answers, pass) = checked_answers(store, rubric_id, answers).await?;
            let answers = serde_json::to_string(&answers).expect("answers always serialize");
            Ok(store
                .edit_rubric_label(label_id, rater_id, &answers, pass, rationale)
                .await?)
        }
        (None, "") => {
            let pass = arbiter_domain::annotation::task::parse_label(verdict, rationale)
                .map_err(ServiceError::Invalid)?;
            Ok(store
                .edit_label(label_id, rater_id, pass, rationale)
                .await?)
        }
        (None, _) => Err(ServiceError::Invalid(
            "this label answers pass or fail, not a rubric".into(),
        )),
    }
}

/// Renders a task's guidelines for the rater.
pub fn render_guidelines(rubric: &mut TaskRubric) {
    rubric.guidelines_html = rubric
        .guidelines
        .as_ref()
        .map(|guidelines| crate::display::markdown_html(&guidelines.markdown))
        .unwrap_or_default();
}

/// A run's rubric dimension by dimension over its decided items (empty when the run asks no
/// rubric).
pub async fn run_dimensions(
    store: &dyn Store,
    run_id: arbiter_domain::ids::RunId,
) -> ServiceResult<Vec<arbiter_domain::reports::dimensions::DimensionSummary>> {
    let manifest = store
        .run_manifest(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))?;
    let Some(frozen) = manifest.triage.and_then(|triage| triage.rubric) else {
        return Ok(Vec::new());
    };
    let items = store.run_consensus(run_id).await?;
    Ok(arbiter_domain::reports::dimensions::summarize(
        &frozen.rubric,
        &items,
    ))
}
