//! A run's report, from its tallies and (where per-item data is needed) its snapshot, rebuilt
//! when the run has moved on since it was built.

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::contamination::ContaminationReport;
use arbiter_domain::grading::instructions::InstructionResult;
use arbiter_domain::ids::RunId;
use arbiter_domain::likelihood::ChoiceScores;
use arbiter_domain::manifest::Manifest;
use arbiter_domain::reports::instructions::instructions_report;
use arbiter_domain::reports::likelihood::likelihood_report;
use arbiter_domain::reports::rolling::rolling_report;
use arbiter_domain::reports::sample_compare::RunSamples;
use arbiter_domain::reports::snapshot::{
    Expectation, Snapshot, SnapshotBuilder, VERDICT_FAIL, VERDICT_PASS,
};
use arbiter_domain::reports::{build_report, Report, RunFacts, TallyRow};
use arbiter_domain::rolling::RollingScore;
use arbiter_domain::run::RunProgress;
use arbiter_domain::stats::proportion::ClusterSums;
use arbiter_domain::stats::sampling::{majority_metrics, sample_metrics, VotedSample};
use arbiter_store::{Store, StoredSnapshot};
use std::collections::BTreeMap;
use std::time::Instant;

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
pub async fn snapshot_of(store: &dyn Store, run_id: RunId) -> ServiceResult<Snapshot> {
    let manifest = manifest_of(store, run_id).await?;
    let tallies = store.run_tallies(run_id).await?;
    current_snapshot(store, run_id, &manifest, &tallies).await
}

pub(crate) async fn manifest_of(store: &dyn Store, run_id: RunId) -> ServiceResult<Manifest> {
    store
        .run_manifest(run_id)
        .await?
        .ok_or_else(|| ServiceError::NotFound(format!("no run with id {run_id}")))
}

/// The stored snapshot if it was built from these tallies, else a new one from a scan.
async fn current_snapshot(
    store: &dyn Store,
    run_id: RunId,
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

/// A run's report: counts from the tallies; completeness checks and, with repetitions,
/// clustered intervals from the snapshot.
pub async fn run_report(store: &dyn Store, run_id: RunId) -> ServiceResult<(RunProgress, Report)> {
    let view = report_and_snapshot(store, run_id).await?;
    Ok((view.progress, view.report))
}

/// A run's report with what a comparison pairs: the snapshot it was checked against, and
/// with several samples per item the samples behind pass@k and maj@k.
pub(crate) struct RunView {
    pub progress: RunProgress,
    pub report: Report,
    pub snapshot: Snapshot,
    pub samples: Option<RunSamples>,
    /// A likelihood run's scored answers: (case id, repetition, scores).
    pub choice_scores: Option<Vec<(String, i64, ChoiceScores)>>,
    /// A rolling-likelihood run's scored documents: (case id, repetition, score).
    pub rolling_scores: Option<Vec<(String, i64, RollingScore)>>,
}

/// Reads the run's heading and tallies, never counts its rows.
pub(crate) async fn report_and_snapshot(
    store: &dyn Store,
    run_id: RunId,
) -> ServiceResult<RunView> {
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
    report.turns = arbiter_domain::reports::turn_reports(&snapshot.header.turns);
    let mut samples = None;
    if let Some(counts) = samples_per_item(&snapshot) {
        let (keys, votes) = votes_per_item(store, run_id).await?;
        let seed = run_id.get() as u64;
        report.sample_metrics = sample_metrics(&counts, seed);
        report.sample_metrics.extend(majority_metrics(&votes, seed));
        samples = Some(RunSamples {
            items: keys.into_iter().zip(votes).collect(),
        });
    }
    if let Some(frozen) = &manifest.contamination {
        let counts = store.contamination_split(run_id).await?;
        let count = |value: i64| u64::try_from(value).unwrap_or(0);
        report.contamination = Some(ContaminationReport::new(
            frozen,
            count(counts.flagged_cases),
            (count(counts.flagged_pass), count(counts.flagged_fail)),
            (count(counts.clean_pass), count(counts.clean_fail)),
        ));
    }
    let reads_instructions = manifest
        .eval
        .grader
        .compile()
        .is_ok_and(|grader| grader.instructions().is_some());
    if reads_instructions {
        let results: Vec<(String, Vec<InstructionResult>)> = store
            .run_instruction_results(run_id)
            .await?
            .into_iter()
            .map(|(case_id, _, results)| (case_id, results))
            .collect();
        report.instructions = Some(instructions_report(&results));
    }
    let choice_scores = match &manifest.eval.prompt.likelihood {
        Some(likelihood) => {
            let scores = store.run_choice_scores(run_id).await?;
            let all: Vec<_> = scores.iter().map(|(_, _, scores)| scores.clone()).collect();
            report.likelihood = Some(likelihood_report(&all, likelihood.select_by));
            Some(scores)
        }
        None => None,
    };
    let rolling_scores = match &manifest.eval.prompt.rolling {
        Some(_) => {
            let scores = store.run_rolling_scores(run_id).await?;
            report.rolling = rolling_report(&scores);
            Some(scores)
        }
        None => None,
    };
    Ok(RunView {
        progress,
        report,
        snapshot,
        samples,
        choice_scores,
        rolling_scores,
    })
}

/// Each case's (and turn's) samples as a majority vote sees them, in repetition order, and
/// the (case id, turn) of each.
async fn votes_per_item(
    store: &dyn Store,
    run_id: RunId,
) -> ServiceResult<(Vec<(String, i64)>, Vec<Vec<VotedSample>>)> {
    let mut keys: Vec<(String, i64)> = Vec::new();
    let mut items: Vec<Vec<VotedSample>> = Vec::new();
    for (case_id, turn, answer, verdict) in store.run_votes(run_id).await? {
        // Samples still pending or without a verdict (errors, undecided) do not vote, as
        // pass@k counts only decided samples.
        if verdict.is_none() {
            continue;
        }
        let sample = VotedSample { answer, verdict };
        match (keys.last(), items.last_mut()) {
            (Some((last_case, last_turn)), Some(samples))
                if *last_case == case_id && *last_turn == turn =>
            {
                samples.push(sample)
            }
            _ => {
                keys.push((case_id, turn));
                items.push(vec![sample]);
            }
        }
    }
    Ok((keys, items))
}

/// Each case's (graded samples, correct samples), when the run has several repetitions laid
/// out repetition by repetition (the snapshot's `cases`; position p is case p % cases).
fn samples_per_item(snapshot: &Snapshot) -> Option<Vec<(u64, u64)>> {
    let cases = usize::try_from(snapshot.header.cases?)
        .ok()
        .filter(|cases| *cases > 0)?;
    let mut per_item = vec![(0u64, 0u64); cases];
    for (position, verdict) in snapshot.verdicts.iter().enumerate() {
        let item = &mut per_item[position % cases];
        match *verdict {
            VERDICT_PASS => *item = (item.0 + 1, item.1 + 1),
            VERDICT_FAIL => item.0 += 1,
            _ => {}
        }
    }
    Some(per_item)
}

#[cfg(test)]
mod tests {
    use super::*;

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
