//! Reports and checkpoint comparisons over the store: reads tallies and run snapshots
//! (rebuilding a snapshot when its run has moved on), then hands them to the pure
//! [`arbiter_domain::reports`] functions. Nothing here loads a run's rows into memory: tallies are a few
//! rows per category, a snapshot is 12 bytes per identity, and diff texts are read a page at a
//! time.

use crate::service::{ServiceError, ServiceResult};
use arbiter_domain::logprobs::{self, TokenLogprob};
use arbiter_domain::manifest::Manifest;
use arbiter_domain::reports::compare::{
    apply_correction, changed_items, compare_snapshots, ChangedItem, DiffFilter, PairedComparison,
};
use arbiter_domain::reports::decision::NewPromotionDecision;
use arbiter_domain::reports::diff::DiffSide;
use arbiter_domain::reports::snapshot::{Expectation, Snapshot, SnapshotBuilder};
use arbiter_domain::reports::{build_report, Completeness, Report, RunFacts, TallyRow};
use arbiter_domain::run::RunProgress;
use arbiter_domain::stats::correction::Correction;
use arbiter_domain::stats::proportion::ClusterSums;
use arbiter_store::{Store, StoredSnapshot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// Candidates on one comparison page: each adds one family of tests to the correction.
pub const MAX_CANDIDATES: usize = 8;
/// Rows per page of the per-prompt diff.
pub const DIFF_PAGE: usize = 50;
/// Changed items whose texts one text search reads before it stops (and says so).
pub const SEARCH_SCAN_LIMIT: usize = 20_000;
const DIFF_FETCH_BATCH: usize = 200;

/// The tallies' fingerprint: a snapshot built from other tallies is stale.
fn tally_version(tallies: &[TallyRow]) -> String {
    let mut sums: BTreeMap<&str, i64> = BTreeMap::new();
    for row in tallies {
        *sums.entry(row.field.as_str()).or_default() += row.count;
    }
    let verdicts: Vec<String> = tallies
        .iter()
        .filter(|row| row.field == "verdict")
        .map(|row| format!("{}:{}={}", row.category, row.value, row.count))
        .collect();
    format!(
        "v{};o{};c{};{}",
        sums.get("verdict").copied().unwrap_or(0),
        sums.get("outcome").copied().unwrap_or(0),
        sums.get("changes").copied().unwrap_or(0),
        xxhash_rust::xxh3::xxh3_64(verdicts.join(",").as_bytes())
    )
}

/// The run's snapshot, rebuilt by one scan if results arrived or changed since it was stored.
pub async fn snapshot_of(store: &dyn Store, run_id: i64) -> ServiceResult<Snapshot> {
    let manifest = manifest_of(store, run_id).await?;
    let tallies = store.run_tallies(run_id).await?;
    current_snapshot(store, run_id, &manifest, &tallies).await
}

pub(crate) async fn manifest_of(store: &dyn Store, run_id: i64) -> ServiceResult<Manifest> {
    store
        .run_manifest(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))
}

/// The stored snapshot if it was built from these tallies, else a new one from a scan.
async fn current_snapshot(
    store: &dyn Store,
    run_id: i64,
    manifest: &Manifest,
    tallies: &[TallyRow],
) -> ServiceResult<Snapshot> {
    let version = tally_version(tallies);
    if let Some(stored) = store.stored_snapshot(run_id).await? {
        if stored.version == version {
            if let Ok(snapshot) = Snapshot::decode(&stored.data, stored.identity_hash) {
                return Ok(snapshot);
            }
        }
    }
    let started = Instant::now();
    let mut builder = SnapshotBuilder::new(Expectation {
        revision_id: manifest.dataset_revision_id,
        grader: manifest.eval.grader.id_version().to_string(),
        repetitions: i64::from(manifest.eval.repetitions),
    });
    store
        .scan_run(run_id, &mut |row| builder.push(&row))
        .await?;
    builder.note_graders(store.run_graders(run_id).await?);
    let snapshot = builder.finish();
    let stored = StoredSnapshot {
        version,
        identity_hash: snapshot.identity_hash.clone(),
        data: snapshot.encode(),
        build_ms: started.elapsed().as_millis() as i64,
    };
    store
        .save_snapshot(run_id, snapshot.len() as i64, &stored)
        .await?;
    Ok(snapshot)
}

/// Completed runs whose snapshot is missing or older than their completion: built here, so
/// the first researcher to open a finished run's report or comparison does not wait for the
/// scan. Returns how many were built (at most `limit` per call).
pub async fn warm_snapshots(store: &dyn Store, limit: i64) -> ServiceResult<usize> {
    let runs = store.runs_needing_snapshots(limit).await?;
    for &run_id in &runs {
        snapshot_of(store, run_id).await?;
    }
    Ok(runs.len())
}

/// Rounds of the warmer between checks of the watched trends when no run finished (a human
/// label can turn a verdict, and so a trend, without finishing a run).
const WATCH_CHECK_ROUNDS: u32 = 20;

/// Builds finished runs' snapshots every `interval` until `shutdown` turns true, and checks
/// the watched trends for regressions whenever a run finished (and every few rounds).
pub async fn run_snapshot_warmer(
    store: std::sync::Arc<dyn Store>,
    interval: std::time::Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut rounds_since_check = WATCH_CHECK_ROUNDS;
    loop {
        let built = match warm_snapshots(store.as_ref(), 2).await {
            Ok(built) => built,
            Err(err) => {
                tracing::warn!(error = %err, "building run snapshots failed");
                0
            }
        };
        if built > 0 {
            tracing::info!(built, "run snapshots built for finished runs");
        }
        rounds_since_check += 1;
        if built > 0 || rounds_since_check >= WATCH_CHECK_ROUNDS {
            rounds_since_check = 0;
            match crate::trends::check_watches(store.as_ref(), arbiter_store::now_ms()).await {
                Ok((0, 0)) => {}
                Ok((raised, resolved)) => tracing::info!(raised, resolved, "regression alerts"),
                Err(err) => tracing::warn!(error = %err, "checking watched trends failed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

/// A run's report: counts from the tallies; completeness checks and, with repetitions,
/// clustered intervals from the snapshot.
pub async fn run_report(store: &dyn Store, run_id: i64) -> ServiceResult<(RunProgress, Report)> {
    let (progress, report, _) = report_and_snapshot(store, run_id).await?;
    Ok((progress, report))
}

/// The report with the snapshot it was checked against (a comparison pairs that snapshot).
/// Reads the run's heading and tallies, never counts its rows.
pub(crate) async fn report_and_snapshot(
    store: &dyn Store,
    run_id: i64,
) -> ServiceResult<(RunProgress, Report, Snapshot)> {
    let progress = store
        .run_header(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))?;
    let manifest = manifest_of(store, run_id).await?;
    let tallies = store.run_tallies(run_id).await?;
    let snapshot = current_snapshot(store, run_id, &manifest, &tallies).await?;
    let clusters: BTreeMap<String, ClusterSums> = snapshot
        .header
        .categories
        .iter()
        .cloned()
        .zip(snapshot.header.clusters.iter().copied())
        .collect();
    let facts = RunFacts {
        expected: progress.expected.max(0) as u64,
        repetitions: i64::from(manifest.eval.repetitions),
    };
    let mut report = build_report(&facts, &tallies, &snapshot.header.problems, &clusters);
    report.latency = snapshot.header.latency.clone();
    Ok((progress, report, snapshot))
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CandidateResult {
    pub run: RunProgress,
    pub report: Report,
    pub comparison: PairedComparison,
}

#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CheckpointComparison {
    pub baseline: RunProgress,
    pub baseline_report: Report,
    pub candidates: Vec<CandidateResult>,
    pub correction: Correction,
    /// Milliseconds to build this summary (snapshots read or rebuilt, tests run).
    pub elapsed_ms: u64,
}

fn check_runs(baseline: i64, candidates: &[i64]) -> ServiceResult<()> {
    if candidates.is_empty() {
        return Err(ServiceError::Invalid(
            "pick at least one candidate run".into(),
        ));
    }
    if candidates.len() > MAX_CANDIDATES {
        return Err(ServiceError::Invalid(format!(
            "compare at most {MAX_CANDIDATES} candidates at once"
        )));
    }
    if candidates.contains(&baseline) {
        return Err(ServiceError::Invalid(
            "pick two different runs to compare".into(),
        ));
    }
    Ok(())
}

/// Baseline against one or more candidates of the same eval: reports, paired tests per
/// category, corrected together.
pub async fn compare_checkpoints(
    store: &dyn Store,
    baseline_run: i64,
    candidate_runs: &[i64],
    correction: Correction,
) -> ServiceResult<CheckpointComparison> {
    check_runs(baseline_run, candidate_runs)?;
    let started = Instant::now();
    let (baseline, baseline_report, baseline_snapshot) =
        report_and_snapshot(store, baseline_run).await?;
    let mut runs = Vec::new();
    let mut comparisons = Vec::new();
    for &candidate_run in candidate_runs {
        let (run, report, snapshot) = report_and_snapshot(store, candidate_run).await?;
        if run.eval_id != baseline.eval_id {
            return Err(ServiceError::Invalid(format!(
                "run {} evaluates `{}` and run {} evaluates `{}`: only runs of the same eval can be compared",
                baseline.id, baseline.eval_name, run.id, run.eval_name
            )));
        }
        comparisons
            .push(compare_snapshots(&baseline_snapshot, &snapshot).map_err(ServiceError::Invalid)?);
        runs.push((run, report));
    }
    apply_correction(&mut comparisons, correction);
    let candidates = runs
        .into_iter()
        .zip(comparisons)
        .map(|((run, report), comparison)| CandidateResult {
            run,
            report,
            comparison,
        })
        .collect();
    Ok(CheckpointComparison {
        baseline,
        baseline_report,
        candidates,
        correction,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Longest note kept with a promotion decision.
const MAX_DECISION_NOTE: usize = 4_000;

/// What a promotion decision keeps of the comparison it was made on.
#[derive(Serialize)]
struct DecisionSummary<'a> {
    correction: Correction,
    baseline: &'a Report,
    candidate: &'a Report,
    comparison: &'a PairedComparison,
}

/// Records a decision to promote (or reject) the candidate against the baseline. Refused
/// unless both runs' reports are complete: a partial or invalid report can inform a decision
/// but never back one. The comparison as it stands is kept with the decision.
pub async fn decide_promotion(
    store: &dyn Store,
    baseline_run: i64,
    candidate_run: i64,
    promote: bool,
    note: &str,
    decided_by: Option<i64>,
) -> ServiceResult<i64> {
    let note = note.trim();
    if note.chars().count() > MAX_DECISION_NOTE {
        return Err(ServiceError::Invalid(format!(
            "keep the note under {MAX_DECISION_NOTE} characters"
        )));
    }
    let correction = Correction::default();
    let comparison = compare_checkpoints(store, baseline_run, &[candidate_run], correction).await?;
    let candidate = comparison
        .candidates
        .first()
        .ok_or_else(|| ServiceError::Invalid("pick a candidate run".into()))?;
    for (side, run, report) in [
        (
            "baseline",
            &comparison.baseline,
            &comparison.baseline_report,
        ),
        ("candidate", &candidate.run, &candidate.report),
    ] {
        if report.completeness != Completeness::Complete {
            let mut reason = format!(
                "the {side} run {} on `{}` is {} ({} of {} results)",
                run.id,
                run.checkpoint_name,
                report.completeness.label(),
                report.completed,
                report.expected
            );
            for explanation in report.explanations() {
                reason.push_str("; ");
                reason.push_str(&explanation);
            }
            return Err(ServiceError::Invalid(format!(
                "{reason}: a promotion decision needs two complete reports"
            )));
        }
    }
    let summary_json = serde_json::to_string(&DecisionSummary {
        correction,
        baseline: &comparison.baseline_report,
        candidate: &candidate.report,
        comparison: &candidate.comparison,
    })
    .map_err(|err| {
        tracing::error!(error = %err, "serialising a promotion decision's summary failed");
        ServiceError::Internal
    })?;
    Ok(store
        .record_promotion_decision(&NewPromotionDecision {
            baseline_run_id: baseline_run,
            candidate_run_id: candidate_run,
            promote,
            note: note.to_string(),
            summary_json,
            decided_by,
        })
        .await?)
}

/// One row of the per-prompt diff.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffRow {
    pub change: arbiter_domain::reports::compare::Change,
    pub baseline: DiffSide,
    pub candidate: DiffSide,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffPage {
    pub rows: Vec<DiffRow>,
    /// The baseline's categories, for the filter.
    pub categories: Vec<String>,
    /// Changed items matching the filter (before any text search).
    pub matching: u64,
    /// Where the next page starts, if there is one.
    pub next_offset: Option<usize>,
    /// With a text search: changed items read; the search stops at `SEARCH_SCAN_LIMIT`.
    pub searched: usize,
    pub search_truncated: bool,
}

fn contains_folded(haystack: &str, needle: &str) -> bool {
    haystack.to_lowercase().contains(needle)
}

fn row_matches(row: &DiffRow, needle: &str) -> bool {
    [
        &row.baseline.case_id,
        &row.baseline.input,
        &row.baseline.target,
        &row.baseline.output,
        &row.candidate.output,
    ]
    .iter()
    .any(|text| contains_folded(text, needle))
}

/// A page of the items whose verdict changed between the baseline and one candidate,
/// regressions first, filtered by category, change, outcome and text.
pub async fn diff_page(
    store: &dyn Store,
    baseline_run: i64,
    candidate_run: i64,
    filter: &DiffFilter,
    search: &str,
    offset: usize,
) -> ServiceResult<DiffPage> {
    check_runs(baseline_run, &[candidate_run])?;
    let baseline = snapshot_of(store, baseline_run).await?;
    let candidate = snapshot_of(store, candidate_run).await?;
    if let Some(reason) = arbiter_domain::reports::compare::unpairable_reason(&baseline, &candidate)
    {
        return Err(ServiceError::Invalid(reason));
    }
    let items = changed_items(&baseline, &candidate, filter);
    let needle = search.trim().to_lowercase();
    let mut rows = Vec::new();
    let mut position = offset.min(items.len());
    let mut searched = 0;
    // Without a search every row is shown, so fetch just what the page lacks; with one, read
    // in larger batches and keep the matches.
    'pages: while position < items.len() && rows.len() < DIFF_PAGE {
        let batch_len = if needle.is_empty() {
            DIFF_PAGE - rows.len()
        } else {
            DIFF_FETCH_BATCH
        };
        let batch = &items[position..(position + batch_len).min(items.len())];
        for row in fetch_rows(store, batch).await? {
            position += 1;
            if !needle.is_empty() {
                searched += 1;
            }
            let Some(row) = row else { continue };
            if needle.is_empty() || row_matches(&row, &needle) {
                rows.push(row);
                if rows.len() == DIFF_PAGE {
                    break 'pages;
                }
            }
            if searched >= SEARCH_SCAN_LIMIT {
                break 'pages;
            }
        }
    }
    let search_truncated = searched >= SEARCH_SCAN_LIMIT && position < items.len();
    Ok(DiffPage {
        rows,
        categories: baseline.header.categories,
        matching: items.len() as u64,
        next_offset: (position < items.len()).then_some(position),
        searched,
        search_truncated,
    })
}

/// Both sides of each item, in the items' order; `None` where a side is missing.
async fn fetch_rows(
    store: &dyn Store,
    items: &[ChangedItem],
) -> ServiceResult<Vec<Option<DiffRow>>> {
    let ids: Vec<i64> = items
        .iter()
        .flat_map(|item| [item.baseline_id, item.candidate_id])
        .collect();
    let mut sides: std::collections::HashMap<i64, DiffSide> = store
        .diff_sides(&ids)
        .await?
        .into_iter()
        .map(|side| (side.work_item_id, side))
        .collect();
    Ok(items
        .iter()
        .map(|item| {
            // Each id belongs to one item (the two runs are distinct), so sides move out.
            Some(DiffRow {
                change: item.change,
                baseline: sides.remove(&item.baseline_id)?,
                candidate: sides.remove(&item.candidate_id)?,
            })
        })
        .collect())
}

/// Where two answers' tokens first differ, with each side's top alternatives there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// Index of the first differing token (0-based).
    pub index: usize,
    /// The text both answers share before it.
    pub shared_prefix: String,
    pub baseline: Option<TokenChoice>,
    pub candidate: Option<TokenChoice>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenChoice {
    pub token: String,
    pub probability: f64,
    /// Runner-up tokens with their probabilities, most likely first.
    pub alternatives: Vec<(String, f64)>,
}

fn choice(token: &TokenLogprob) -> TokenChoice {
    TokenChoice {
        token: token.text().into_owned(),
        probability: f64::from(token.logprob).exp(),
        alternatives: token
            .top
            .iter()
            .filter(|alt| alt.bytes != token.bytes)
            .map(|alt| (alt.text().into_owned(), f64::from(alt.logprob).exp()))
            .collect(),
    }
}

/// The first token where the two answers part; `None` when they are identical token for token.
pub fn first_divergence(
    baseline: &[TokenLogprob],
    candidate: &[TokenLogprob],
) -> Option<Divergence> {
    let index = baseline
        .iter()
        .zip(candidate)
        .position(|(a, b)| a.bytes != b.bytes)
        .unwrap_or(baseline.len().min(candidate.len()));
    if index == baseline.len() && index == candidate.len() {
        return None;
    }
    let prefix: Vec<u8> = baseline
        .iter()
        .take(index)
        .flat_map(|token| token.bytes.iter().copied())
        .collect();
    Some(Divergence {
        index,
        shared_prefix: String::from_utf8_lossy(&prefix).into_owned(),
        baseline: baseline.get(index).map(choice),
        candidate: candidate.get(index).map(choice),
    })
}

/// Both sides of one changed item, with the first diverging token where logprobs were stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffDetail {
    pub baseline: DiffSide,
    pub candidate: DiffSide,
    pub divergence: Option<Divergence>,
    /// Why no divergence is shown, when none is.
    pub divergence_note: Option<String>,
}

pub async fn diff_detail(
    store: &dyn Store,
    baseline_item: i64,
    candidate_item: i64,
) -> ServiceResult<DiffDetail> {
    let sides = store.diff_sides(&[baseline_item, candidate_item]).await?;
    let side = |id: i64| {
        sides
            .iter()
            .find(|side| side.work_item_id == id)
            .cloned()
            .ok_or_else(|| ServiceError::NotFound(format!("no result with id {id}")))
    };
    let (baseline, candidate) = (side(baseline_item)?, side(candidate_item)?);
    if baseline.case_id != candidate.case_id || baseline.repetition != candidate.repetition {
        return Err(ServiceError::Invalid(
            "these two results are not the same item on two checkpoints".into(),
        ));
    }
    let tokens = |id: Option<i64>| async move {
        match id {
            Some(id) => match store.generation_logprobs(id).await? {
                Some(data) => Ok::<_, ServiceError>(logprobs::decode(&data).ok()),
                None => Ok(None),
            },
            None => Ok(None),
        }
    };
    let (base_tokens, cand_tokens) = (
        tokens(baseline.logprobs_id).await?,
        tokens(candidate.logprobs_id).await?,
    );
    let (divergence, divergence_note) = match (base_tokens, cand_tokens) {
        (Some(a), Some(b)) => match first_divergence(&a, &b) {
            Some(divergence) => (Some(divergence), None),
            None => (
                None,
                Some("both answers are the same token for token".to_string()),
            ),
        },
        _ => (
            None,
            Some("no logprobs were stored for one of the answers".to_string()),
        ),
    };
    Ok(DiffDetail {
        baseline,
        candidate,
        divergence,
        divergence_note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::logprobs::Alternative;

    fn token(text: &str, logprob: f32, alternatives: &[(&str, f32)]) -> TokenLogprob {
        TokenLogprob {
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: alternatives
                .iter()
                .map(|(t, l)| Alternative {
                    bytes: t.as_bytes().to_vec(),
                    logprob: *l,
                })
                .collect(),
        }
    }

    #[test]
    fn divergence_finds_the_near_tie_that_flipped() {
        let baseline = [
            token("The", -0.01, &[]),
            token(" answer", -0.69, &[(" answer", -0.69), (" result", -0.71)]),
        ];
        let candidate = [
            token("The", -0.02, &[]),
            token(" result", -0.68, &[(" result", -0.68), (" answer", -0.70)]),
        ];
        let divergence = first_divergence(&baseline, &candidate).unwrap();
        assert_eq!(divergence.index, 1);
        assert_eq!(divergence.shared_prefix, "The");
        let base = divergence.baseline.unwrap();
        assert_eq!(base.token, " answer");
        assert!((base.probability - 0.5016).abs() < 1e-3);
        assert_eq!(base.alternatives[0].0, " result");
        assert!(first_divergence(&baseline, &baseline).is_none());
        let longer = [
            token("The", -0.01, &[]),
            token(" answer", -0.69, &[]),
            token("!", -1.0, &[]),
        ];
        let divergence = first_divergence(&baseline, &longer).unwrap();
        assert_eq!((divergence.index, divergence.baseline.is_none()), (2, true));
    }

    #[test]
    fn tally_versions_move_with_any_change() {
        let row = |value: &str, count| TallyRow {
            category: String::new(),
            field: "verdict".into(),
            value: value.into(),
            count,
        };
        let before = tally_version(&[row("pass", 3), row("fail", 1)]);
        assert_eq!(before, tally_version(&[row("pass", 3), row("fail", 1)]));
        assert_ne!(before, tally_version(&[row("pass", 2), row("fail", 2)]));
    }
}
