//! Suites: the sets of evals a new checkpoint triggers (every smoke suite on every checkpoint,
//! each full suite on every Nth checkpoint of its training run or on demand), and which are
//! due for a checkpoint.

use crate::ids::{EvalId, RunId};
use serde::{Deserialize, Serialize};

/// A set of evals that new checkpoints trigger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Suite {
    pub id: i64,
    pub name: String,
    /// `smoke` (every checkpoint) or `full` (every Nth, or on demand).
    pub tier: String,
    /// Full suites: run on every Nth checkpoint of a training run; 0 for on demand only.
    pub every_nth: i64,
    /// Only checkpoints of this training run ('' for any).
    pub training_run: String,
    pub team: String,
    /// (eval id, eval name).
    pub evals: Vec<(EvalId, String)>,
    pub created_at: i64,
}

/// A suite to create (validated by the engine's `suites::create_suite`).
#[derive(Clone, Debug, PartialEq)]
pub struct NewSuite {
    pub name: String,
    pub tier: String,
    pub every_nth: i64,
    pub training_run: String,
    pub team: String,
    pub eval_ids: Vec<EvalId>,
}

/// A run a suite launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SuiteLaunch {
    pub suite: String,
    pub checkpoint: String,
    pub run_id: RunId,
    pub reason: String,
    pub created_at: i64,
}

pub const TIER_SMOKE: &str = "smoke";

pub const TIER_FULL: &str = "full";

/// "2nd", "3rd", "11th", "22nd": for "every Nth checkpoint".
pub fn ordinal(n: i64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The suites a new checkpoint at `position` (1-based, in its training run) triggers, with
/// the reason for each.
pub fn suites_due<'a>(
    suites: &'a [Suite],
    training_run: &str,
    position: i64,
) -> Vec<(&'a Suite, String)> {
    suites
        .iter()
        .filter(|suite| suite.training_run.is_empty() || suite.training_run == training_run)
        .filter_map(|suite| match suite.tier.as_str() {
            TIER_SMOKE => Some((suite, "smoke suite: every checkpoint".to_string())),
            TIER_FULL if suite.every_nth == 1 => {
                Some((suite, "full suite: every checkpoint".to_string()))
            }
            TIER_FULL if suite.every_nth > 1 && position % suite.every_nth == 0 => Some((
                suite,
                format!(
                    "full suite: checkpoint {position} of its training run, every {}",
                    ordinal(suite.every_nth)
                ),
            )),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite(name: &str, tier: &str, every_nth: i64, training_run: &str) -> Suite {
        Suite {
            id: 1,
            name: name.into(),
            tier: tier.into(),
            every_nth,
            training_run: training_run.into(),
            team: "default".into(),
            evals: vec![(EvalId(1), "e".into())],
            created_at: 0,
        }
    }

    #[test]
    fn smoke_runs_on_every_checkpoint_and_full_on_its_turn() {
        let suites = vec![
            suite("smoke", TIER_SMOKE, 1, ""),
            suite("full-5", TIER_FULL, 5, ""),
            suite("full-demand", TIER_FULL, 0, ""),
            suite("other-run", TIER_SMOKE, 1, "other"),
        ];
        let names = |position| {
            suites_due(&suites, "pretrain", position)
                .into_iter()
                .map(|(suite, _)| suite.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(1), ["smoke"]);
        assert_eq!(names(4), ["smoke"]);
        assert_eq!(names(5), ["smoke", "full-5"]);
        assert_eq!(names(10), ["smoke", "full-5"]);
        let due = suites_due(&suites, "other", 3);
        assert_eq!(due.len(), 2);
        assert!(due[1].1.contains("smoke"));
        let reason = &suites_due(&suites, "pretrain", 5)[1].1;
        assert!(reason.contains("every 5th"), "{reason}");
        assert_eq!(
            [1, 2, 3, 4, 11, 12, 13, 21, 22, 101].map(ordinal),
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
        );
    }
}
