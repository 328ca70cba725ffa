//! Run reports: complete or labelled partial, pooled rates per category with confidence
//! intervals, and the outcome mix beside the score. Pure: the store's tallies (and, where
//! per-item data is needed, a [`snapshot::Snapshot`]) in, a report out.
//!
//! A report is **complete** only when every expected identity is present exactly once with a
//! final verdict, from one dataset revision, one grader and one served model. Otherwise it is
//! **partial** (still running: completed / expected shown) or **invalid** (a problem that
//! waiting will not fix, explained). Only complete reports may back a promotion decision.

pub mod compare;
pub mod decision;
pub mod diff;
pub mod dimensions;
pub mod instructions;
pub mod latency;
pub mod likelihood;
pub mod rolling;
pub mod sample_compare;
pub mod snapshot;
pub mod trend;

use crate::answer::Outcome;
use crate::ids::RevisionId;
use crate::stats::proportion::{clustered, wilson, ClusterSums};
use crate::stats::{Interval, DEFAULT_CONFIDENCE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Final verdicts, in the order reports list them.
pub const VERDICTS: [&str; 5] = ["pass", "fail", "uncertain", "error", "scored"];

/// Why a set of results cannot be reported as complete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// Results still missing: the run is not finished (or was cancelled).
    Missing {
        expected: u64,
        present: u64,
    },
    /// Identities undecided: waiting for a judge or a human label.
    Undecided {
        count: u64,
    },
    Duplicates {
        count: u64,
        example: String,
    },
    ConflictingDuplicates {
        count: u64,
        example: String,
    },
    MixedDatasetRevisions {
        expected: RevisionId,
        found: Vec<RevisionId>,
    },
    MixedGraders {
        expected: String,
        found: Vec<String>,
    },
    /// The endpoint served more than one model within the run (fallback answers excluded).
    ChangedEndpoint {
        models: Vec<String>,
    },
    /// More results than expected identities.
    Unexpected {
        expected: u64,
        present: u64,
    },
}

impl Problem {
    /// Whether finishing the run can clear it (missing or undecided results).
    pub fn is_pending(&self) -> bool {
        matches!(self, Problem::Missing { .. } | Problem::Undecided { .. })
    }

    pub fn explain(&self) -> String {
        match self {
            Problem::Missing { expected, present } => format!(
                "{} of {expected} expected results are missing ({present} present)",
                expected - present.min(expected)
            ),
            Problem::Undecided { count } => format!(
                "{count} results have no final verdict yet (waiting for a judge or a human label)"
            ),
            Problem::Duplicates { count, example } => format!(
                "{count} result identities appear more than once (first: {example}); each must appear exactly once"
            ),
            Problem::ConflictingDuplicates { count, example } => format!(
                "{count} result identities appear twice with different verdicts (first: {example}); the run cannot be scored until one is removed"
            ),
            Problem::MixedDatasetRevisions { expected, found } => format!(
                "results come from dataset revisions {found:?}, but the manifest froze revision {expected}"
            ),
            Problem::MixedGraders { expected, found } => format!(
                "results were graded by {}, but the manifest froze {expected}",
                found.join(", ")
            ),
            Problem::ChangedEndpoint { models } => format!(
                "the endpoint's served model changed within the run ({}); results from different models cannot be pooled",
                models.join(", ")
            ),
            Problem::Unexpected { expected, present } => format!(
                "{present} results are stored but only {expected} identities were expected"
            ),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Completeness {
    Complete,
    Partial,
    Invalid,
}

impl Completeness {
    pub fn label(self) -> &'static str {
        match self {
            Completeness::Complete => "COMPLETE",
            Completeness::Partial => "PARTIAL",
            Completeness::Invalid => "INVALID",
        }
    }
}

/// One row of the store's `run_tallies`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TallyRow {
    pub category: String,
    pub field: String,
    pub value: String,
    pub count: i64,
}

/// Counts of one category (or the whole run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CategoryReport {
    pub category: String,
    pub passed: u64,
    pub failed: u64,
    pub uncertain: u64,
    pub errors: u64,
    /// Scored without a verdict (rolling likelihood); done, never in the pass rate.
    #[serde(default)]
    pub scored: u64,
    /// Identities of this category without a final verdict (only known for the whole run and
    /// from a snapshot; zero otherwise).
    pub pending: u64,
    /// Outcome of the answers, `Outcome::ALL` order: ok, truncated, empty, refused,
    /// endpoint_error, timeout. Stopped turns (no answer) are counted under errors and by turn
    /// (`Report::turns`), not here: reports stored before conversations keep this shape.
    pub outcomes: [u64; 6],
    /// Passes over pass + fail: uncertain and errored results are shown beside, never counted
    /// as wrong.
    pub pass_rate: Option<f64>,
    pub interval: Option<Interval>,
    /// How the interval was computed: "wilson" or "clustered over repetitions".
    pub interval_method: String,
}

impl CategoryReport {
    pub fn graded(&self) -> u64 {
        self.passed + self.failed
    }

    pub fn decided(&self) -> u64 {
        self.passed + self.failed + self.uncertain + self.errors + self.scored
    }

    fn add_tally(&mut self, field: &str, value: &str, count: u64) {
        match (field, value) {
            ("verdict", "pass") => self.passed += count,
            ("verdict", "fail") => self.failed += count,
            ("verdict", "uncertain") => self.uncertain += count,
            ("verdict", "error") => self.errors += count,
            ("verdict", "scored") => self.scored += count,
            ("outcome", outcome) => {
                if let Some(index) = Outcome::parse(outcome)
                    .and_then(|o| Outcome::ALL.iter().position(|known| *known == o))
                {
                    if let Some(slot) = self.outcomes.get_mut(index) {
                        *slot += count;
                    }
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, clusters: Option<&ClusterSums>, repetitions: i64) {
        self.pass_rate = (self.graded() > 0).then(|| self.passed as f64 / self.graded() as f64);
        let clustered_interval = clusters
            .filter(|_| repetitions > 1)
            .and_then(|sums| clustered(sums, DEFAULT_CONFIDENCE));
        (self.interval, self.interval_method) = match clustered_interval {
            Some(interval) => (Some(interval), "clustered over repetitions".into()),
            None => (
                wilson(self.passed, self.graded(), DEFAULT_CONFIDENCE),
                "wilson".into(),
            ),
        };
    }
}

/// What the report knows about its run.
#[derive(Clone, Debug)]
pub struct RunFacts {
    pub expected: u64,
    pub repetitions: i64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Report {
    pub completeness: Completeness,
    pub expected: u64,
    /// Identities with a final verdict (pass, fail or error) or scored.
    pub completed: u64,
    pub overall: CategoryReport,
    /// Per category, largest first; empty when the dataset has no categories.
    pub categories: Vec<CategoryReport>,
    pub problems: Vec<Problem>,
    /// Answers per latency bucket ([`crate::reports::latency::LATENCY_EDGES_MS`]), from the
    /// snapshot; empty before any answer.
    pub latency: Vec<u64>,
    /// With several repetitions: pass@k and pass^k for every k up to the samples per case,
    /// each saying how many cases and samples it used. Empty with one repetition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sample_metrics: Vec<crate::stats::sampling::SampleMetricRow>,
    /// For conversations: each turn's results (turn 1 first); empty when every item is one
    /// request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnReport>,
    /// For a likelihood eval: acc, acc_norm, acc_bytes, the probability on the right answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<likelihood::LikelihoodReport>,
    /// For a rolling-likelihood eval: word and byte perplexity and bits per byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling: Option<rolling::RollingReport>,
    /// For an instruction-following eval: IFEval's prompt- and instruction-level accuracies,
    /// strict and loose, and each instruction's rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<instructions::InstructionsReport>,
    /// With a contamination check: the scores with and without the items found in the corpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<crate::contamination::ContaminationReport>,
}

/// One turn's results across a run's conversations, with its pass rate and Wilson interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnReport {
    /// From 1.
    pub turn: u32,
    #[serde(flatten)]
    pub counts: snapshot::TurnTally,
    pub pass_rate: Option<f64>,
    pub interval: Option<Interval>,
}

/// Per-turn rows from a snapshot's turn tallies.
pub fn turn_reports(turns: &[snapshot::TurnTally]) -> Vec<TurnReport> {
    turns
        .iter()
        .enumerate()
        .map(|(index, tally)| {
            let graded = tally.passed + tally.failed;
            TurnReport {
                turn: index as u32 + 1,
                counts: tally.clone(),
                pass_rate: (graded > 0).then(|| tally.passed as f64 / graded as f64),
                interval: wilson(tally.passed, graded, DEFAULT_CONFIDENCE),
            }
        })
        .collect()
}

impl Report {
    pub fn explanations(&self) -> Vec<String> {
        self.problems.iter().map(Problem::explain).collect()
    }
}

/// Builds a report from the tallies; `snapshot_problems` and `clusters` (per category name)
/// come from a snapshot when one was built (clustered intervals, duplicate and version checks).
pub fn build_report(
    facts: &RunFacts,
    tallies: &[TallyRow],
    snapshot_problems: &[Problem],
    clusters: &BTreeMap<String, ClusterSums>,
) -> Report {
    let mut by_category: BTreeMap<&str, CategoryReport> = BTreeMap::new();
    let mut overall = CategoryReport {
        category: "all".into(),
        ..CategoryReport::default()
    };
    for row in tallies {
        let count = row.count.max(0) as u64;
        overall.add_tally(&row.field, &row.value, count);
        by_category
            .entry(row.category.as_str())
            .or_insert_with(|| CategoryReport {
                category: row.category.clone(),
                ..CategoryReport::default()
            })
            .add_tally(&row.field, &row.value, count);
    }
    let overall_clusters = (!clusters.is_empty()).then(|| {
        let mut total = ClusterSums::default();
        for sums in clusters.values() {
            total.merge(sums);
        }
        total
    });
    let decided = overall.decided();
    let completed = overall.graded() + overall.errors + overall.scored;
    overall.pending = facts.expected.saturating_sub(decided);
    overall.finish(overall_clusters.as_ref(), facts.repetitions);
    let mut categories: Vec<CategoryReport> = by_category
        .into_values()
        .map(|mut report| {
            report.finish(clusters.get(&report.category), facts.repetitions);
            report
        })
        .collect();
    categories.sort_by(|a, b| {
        b.decided()
            .cmp(&a.decided())
            .then(a.category.cmp(&b.category))
    });
    if categories.len() == 1 && categories[0].category.is_empty() {
        categories.clear();
    }

    let mut problems: Vec<Problem> = snapshot_problems.to_vec();
    if decided > facts.expected {
        problems.push(Problem::Unexpected {
            expected: facts.expected,
            present: decided,
        });
    } else if decided < facts.expected {
        problems.push(Problem::Missing {
            expected: facts.expected,
            present: decided,
        });
    }
    if overall.uncertain > 0 {
        problems.push(Problem::Undecided {
            count: overall.uncertain,
        });
    }
    // A cancelled run's missing results are pending for good: it stays partial, never complete.
    let completeness = if problems.is_empty() {
        Completeness::Complete
    } else if problems.iter().all(Problem::is_pending) {
        Completeness::Partial
    } else {
        Completeness::Invalid
    };
    Report {
        completeness,
        expected: facts.expected,
        completed,
        overall,
        categories,
        problems,
        latency: Vec::new(),
        sample_metrics: Vec::new(),
        turns: Vec::new(),
        likelihood: None,
        rolling: None,
        instructions: None,
        contamination: None,
    }
}

#[cfg(test)]
mod tests;
