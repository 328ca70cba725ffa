//! Trends along a training run: which earlier checkpoint each point is compared against (the
//! baseline policy), and which prompts flip often across checkpoints and repetitions. Pure:
//! the store-facing side is the engine's `reports::trends`.

use super::snapshot::{Snapshot, VERDICT_FAIL, VERDICT_PASS};
use crate::ids::{CheckpointId, EvalId, RunId};
use serde::{Deserialize, Serialize};

/// Most checkpoints a trend shows (the latest ones): a flaky-prompt history is a 64-bit set.
pub const MAX_TREND_POINTS: usize = 40;

/// What each checkpoint of a trend is compared against. Only complete reports serve as
/// baselines: a partial one would make a regression look like a gap in the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BaselinePolicy {
    /// The first complete checkpoint of the trend.
    First,
    /// The nearest earlier complete checkpoint: catches a step that made things worse.
    Previous,
    /// The earlier complete checkpoint with the highest overall pass rate: catches slow drift
    /// below the best seen so far.
    Best,
    /// One chosen checkpoint (e.g. the model in production).
    Pinned(CheckpointId),
}

impl BaselinePolicy {
    /// From a form: `first`, `previous`, `best` or `pinned` (with the checkpoint's id).
    pub fn parse(
        name: &str,
        pinned_checkpoint: Option<CheckpointId>,
    ) -> Result<BaselinePolicy, String> {
        match (name, pinned_checkpoint) {
            ("first", _) => Ok(BaselinePolicy::First),
            ("previous" | "", _) => Ok(BaselinePolicy::Previous),
            ("best", _) => Ok(BaselinePolicy::Best),
            ("pinned", Some(id)) => Ok(BaselinePolicy::Pinned(id)),
            ("pinned", None) => Err("pick the checkpoint to pin as the baseline".into()),
            (other, _) => Err(format!(
                "unknown baseline policy `{other}`; use first, previous, best or pinned"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BaselinePolicy::First => "first",
            BaselinePolicy::Previous => "previous",
            BaselinePolicy::Best => "best",
            BaselinePolicy::Pinned(_) => "pinned",
        }
    }

    pub fn pinned_checkpoint(self) -> Option<CheckpointId> {
        match self {
            BaselinePolicy::Pinned(id) => Some(id),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            BaselinePolicy::First => "the first complete checkpoint",
            BaselinePolicy::Previous => "the previous complete checkpoint",
            BaselinePolicy::Best => "the best complete checkpoint so far",
            BaselinePolicy::Pinned(_) => "the pinned checkpoint",
        }
    }
}

/// What the policy needs to know of an earlier point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EarlierPoint {
    pub checkpoint_id: CheckpointId,
    pub complete: bool,
    pub overall_rate: Option<f64>,
}

/// The index (into `earlier`, the points before this one in training order) of the baseline
/// for the next point, or `None` when the policy names no complete earlier point. A pinned
/// baseline may sit anywhere in the trend; the caller resolves it (it is not "earlier").
pub fn baseline_index(policy: BaselinePolicy, earlier: &[EarlierPoint]) -> Option<usize> {
    let mut complete = earlier
        .iter()
        .enumerate()
        .filter(|(_, point)| point.complete);
    match policy {
        BaselinePolicy::First => complete.next().map(|(index, _)| index),
        BaselinePolicy::Previous => complete.next_back().map(|(index, _)| index),
        // Ties go to the earlier point, so the baseline does not hop between equals.
        BaselinePolicy::Best => complete
            .filter(|(_, point)| point.overall_rate.is_some())
            .fold(None, |best: Option<(usize, f64)>, (index, point)| {
                let rate = point.overall_rate.unwrap_or(0.0);
                match best {
                    Some((_, best_rate)) if best_rate >= rate => best,
                    _ => Some((index, rate)),
                }
            })
            .map(|(index, _)| index),
        BaselinePolicy::Pinned(id) => earlier
            .iter()
            .position(|point| point.checkpoint_id == id && point.complete),
    }
}

/// One prompt's record across the trend's checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlakyCase {
    /// Position of its first identity in the snapshots (repetition 0).
    pub position: usize,
    pub passes: u32,
    pub fails: u32,
    /// Verdict changes between consecutive checkpoints, summed over repetitions.
    pub flips: u32,
    /// Checkpoints at which its repetitions disagreed.
    pub split_checkpoints: u32,
    /// Per checkpoint in trend order: (passes, decided) over its repetitions.
    pub history: Vec<(u8, u8)>,
}

impl FlakyCase {
    /// Ranking key: instability first, then how evenly it splits.
    fn score(&self) -> (u32, u32) {
        (
            self.flips + self.split_checkpoints,
            self.passes.min(self.fails),
        )
    }
}

/// Accumulates flips per identity over snapshots fed in training order, in 16 bytes per
/// identity (a pass bit and a decided bit per checkpoint), whatever the number of checkpoints
/// up to [`MAX_TREND_POINTS`].
pub struct FlakyTracker {
    identity_hash: String,
    /// Distinct cases: identities are repetition-major, so case = position % cases.
    cases: usize,
    pass_bits: Vec<u64>,
    decided_bits: Vec<u64>,
    checkpoints: usize,
}

impl FlakyTracker {
    /// Starts from the first snapshot's identity list; `repetitions` from the manifest.
    pub fn new(first: &Snapshot, repetitions: usize) -> FlakyTracker {
        let len = first.len();
        let repetitions = repetitions.max(1);
        let cases = if len.is_multiple_of(repetitions) {
            len / repetitions
        } else {
            len
        };
        FlakyTracker {
            identity_hash: first.identity_hash.clone(),
            cases,
            pass_bits: vec![0; len],
            decided_bits: vec![0; len],
            checkpoints: 0,
        }
    }

    /// Adds the next checkpoint's snapshot; `false` (and nothing added) when it lists other
    /// identities than the first or the tracker is full.
    pub fn add(&mut self, snapshot: &Snapshot) -> bool {
        if snapshot.identity_hash != self.identity_hash
            || snapshot.len() != self.pass_bits.len()
            || self.checkpoints >= MAX_TREND_POINTS
        {
            return false;
        }
        let bit = 1u64 << self.checkpoints;
        for (index, &verdict) in snapshot.verdicts.iter().enumerate() {
            if verdict == VERDICT_PASS || verdict == VERDICT_FAIL {
                self.decided_bits[index] |= bit;
                if verdict == VERDICT_PASS {
                    self.pass_bits[index] |= bit;
                }
            }
        }
        self.checkpoints += 1;
        true
    }

    pub fn checkpoints(&self) -> usize {
        self.checkpoints
    }

    /// The `limit` least stable cases that flipped or split at least once, least stable first.
    pub fn most_flaky(&self, limit: usize) -> Vec<FlakyCase> {
        let repetitions = self.pass_bits.len().checked_div(self.cases).unwrap_or(1);
        let mut ranked: Vec<FlakyCase> = Vec::new();
        for case in 0..self.cases {
            let mut record = FlakyCase {
                position: case,
                passes: 0,
                fails: 0,
                flips: 0,
                split_checkpoints: 0,
                history: vec![(0, 0); self.checkpoints],
            };
            for repetition in 0..repetitions {
                let index = repetition * self.cases + case;
                let (passes, decided) = (self.pass_bits[index], self.decided_bits[index]);
                record.flips += flips_in(passes, decided);
                record.passes += passes.count_ones();
                record.fails += (decided & !passes).count_ones();
                for (checkpoint, slot) in record.history.iter_mut().enumerate() {
                    let bit = 1u64 << checkpoint;
                    if decided & bit != 0 {
                        slot.1 = slot.1.saturating_add(1);
                        slot.0 = slot.0.saturating_add(u8::from(passes & bit != 0));
                    }
                }
            }
            record.split_checkpoints = record
                .history
                .iter()
                .filter(|(passes, decided)| *passes > 0 && passes < decided)
                .count() as u32;
            if record.score().0 == 0 {
                continue;
            }
            ranked.push(record);
            // Keep the list short as it grows: sort and cut whenever it doubles.
            if ranked.len() >= limit.max(1) * 2 {
                sort_and_cut(&mut ranked, limit);
            }
        }
        sort_and_cut(&mut ranked, limit);
        ranked
    }
}

fn sort_and_cut(ranked: &mut Vec<FlakyCase>, limit: usize) {
    ranked.sort_by(|a, b| b.score().cmp(&a.score()).then(a.position.cmp(&b.position)));
    ranked.truncate(limit);
}

/// Verdict changes between consecutive decided checkpoints (undecided ones are skipped over).
fn flips_in(passes: u64, decided: u64) -> u32 {
    let mut flips = 0;
    let mut last: Option<bool> = None;
    let mut remaining = decided;
    while remaining != 0 {
        let bit = remaining & remaining.wrapping_neg();
        let pass = passes & bit != 0;
        if last.is_some_and(|previous| previous != pass) {
            flips += 1;
        }
        last = Some(pass);
        remaining &= remaining - 1;
    }
    flips
}

/// The latest run of an eval on one checkpoint of a trend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrendRun {
    pub run_id: RunId,
    pub checkpoint_id: CheckpointId,
    pub checkpoint_name: String,
    pub training_step: Option<i64>,
}

/// A researcher's request to be alerted when an eval regresses along a training run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrendWatch {
    pub eval_id: EvalId,
    pub eval_name: String,
    /// '' for all checkpoints.
    pub training_run: String,
    /// first, previous, best or pinned.
    pub policy: String,
    pub pinned_checkpoint_id: Option<CheckpointId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::IdentityId;
    use crate::reports::snapshot::VERDICT_NONE;

    fn point(checkpoint: i64, complete: bool, rate: f64) -> EarlierPoint {
        EarlierPoint {
            checkpoint_id: CheckpointId(checkpoint),
            complete,
            overall_rate: Some(rate),
        }
    }

    #[test]
    fn each_policy_picks_its_complete_baseline() {
        let earlier = [
            point(10, false, 0.9),
            point(11, true, 0.6),
            point(12, true, 0.8),
            point(13, true, 0.7),
            point(14, false, 0.95),
        ];
        assert_eq!(baseline_index(BaselinePolicy::First, &earlier), Some(1));
        assert_eq!(baseline_index(BaselinePolicy::Previous, &earlier), Some(3));
        assert_eq!(baseline_index(BaselinePolicy::Best, &earlier), Some(2));
        assert_eq!(
            baseline_index(BaselinePolicy::Pinned(CheckpointId(13)), &earlier),
            Some(3)
        );
        assert_eq!(
            baseline_index(BaselinePolicy::Pinned(CheckpointId(14)), &earlier),
            None
        );
        assert_eq!(
            baseline_index(BaselinePolicy::Previous, &earlier[..1]),
            None
        );
        assert_eq!(baseline_index(BaselinePolicy::First, &[]), None);
    }

    #[test]
    fn best_keeps_the_earlier_of_equal_rates() {
        let earlier = [point(1, true, 0.8), point(2, true, 0.8)];
        assert_eq!(baseline_index(BaselinePolicy::Best, &earlier), Some(0));
    }

    #[test]
    fn policies_parse_from_forms_and_refuse_the_unknown() {
        assert_eq!(
            BaselinePolicy::parse("best", None),
            Ok(BaselinePolicy::Best)
        );
        assert_eq!(
            BaselinePolicy::parse("pinned", Some(CheckpointId(4))),
            Ok(BaselinePolicy::Pinned(CheckpointId(4)))
        );
        assert!(BaselinePolicy::parse("pinned", None).is_err());
        assert!(BaselinePolicy::parse("median", None)
            .unwrap_err()
            .contains("unknown baseline policy"));
    }

    #[test]
    fn flips_skip_undecided_checkpoints() {
        // pass, (undecided), fail, fail, pass: two flips.
        assert_eq!(flips_in(0b10001, 0b11101), 2);
        assert_eq!(flips_in(0, 0), 0);
        assert_eq!(flips_in(0b111, 0b111), 0);
    }

    fn snapshot(verdicts: &[u8]) -> Snapshot {
        Snapshot {
            identity_hash: "h".into(),
            identity_ids: (0..verdicts.len() as i64).map(IdentityId).collect(),
            verdicts: verdicts.to_vec(),
            outcomes: vec![0; verdicts.len()],
            categories: vec![0; verdicts.len()],
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_least_stable_case_ranks_first_across_checkpoints_and_repetitions() {
        const P: u8 = VERDICT_PASS;
        const F: u8 = VERDICT_FAIL;
        const N: u8 = VERDICT_NONE;
        // Three cases, two repetitions (repetition-major): case 0 is stable, case 1 flips
        // at every checkpoint in both repetitions, case 2's repetitions disagree at the first.
        let runs = [
            snapshot(&[P, P, F, P, F, P]),
            snapshot(&[P, F, F, P, P, F]),
            snapshot(&[P, P, N, P, F, F]),
        ];
        let mut tracker = FlakyTracker::new(&runs[0], 2);
        for run in &runs {
            assert!(tracker.add(run));
        }
        let flaky = tracker.most_flaky(10);
        assert_eq!(
            flaky.iter().map(|case| case.position).collect::<Vec<_>>(),
            vec![1, 2]
        );
        let case1 = &flaky[0];
        assert_eq!((case1.flips, case1.passes, case1.fails), (4, 3, 3));
        assert_eq!(case1.history, vec![(1, 2), (1, 2), (1, 2)]);
        assert_eq!(case1.split_checkpoints, 3);
        let case2 = &flaky[1];
        assert_eq!((case2.flips, case2.split_checkpoints), (1, 1));
        assert_eq!(case2.history, vec![(1, 2), (0, 2), (0, 1)]);
        assert_eq!((case2.passes, case2.fails), (1, 4));
        assert_eq!(tracker.most_flaky(1).len(), 1);
    }

    #[test]
    fn a_run_of_other_identities_is_not_tracked() {
        let first = snapshot(&[VERDICT_PASS]);
        let mut tracker = FlakyTracker::new(&first, 1);
        let mut other = snapshot(&[VERDICT_FAIL]);
        other.identity_hash = "other".into();
        assert!(!tracker.add(&other));
        assert_eq!(tracker.checkpoints(), 0);
    }
}
