//! Gold items and training, and the spot checks of reviewers' own decisions: which claims are
//! served a gold item, which review decisions another senior checks, and when a rater in
//! training has shown enough to label for real.
//!
//! Pure. The store serves gold leases and records answers; this module only decides.

use super::adjudication::stable_draw;
use super::preference::Preference;
use crate::ids::{TaskId, UserId};
use serde::{Deserialize, Serialize};

/// Setting: share of claims served a gold item (when live gold exists).
pub const GOLD_RATE_SETTING: &str = "gold_rate";
pub const DEFAULT_GOLD_RATE: f64 = 0.05;
/// Setting: share of reviewers' decisions drawn for a spot check by another senior.
pub const REVIEW_CHECK_RATE_SETTING: &str = "review_check_rate";
pub const DEFAULT_REVIEW_CHECK_RATE: f64 = 0.1;
/// Setting: Krippendorff's alpha below which a queue's agreement raises an alert.
pub const AGREEMENT_FLOOR_SETTING: &str = "agreement_floor";
/// Below 0.667 Krippendorff advises tentative conclusions at most; 0.6 leaves room for noise
/// in a week of labels before a lead is woken.
pub const DEFAULT_AGREEMENT_FLOOR: f64 = 0.6;
/// Gold answers a rater in training gives before graduating (their accuracy over these must
/// reach the lead's quality threshold).
pub const TRAINING_ITEMS: usize = 10;

/// Whether this claim, by `rater_id` at `now_ms`, is served a gold item. Drawn from the claim
/// itself, so a rater cannot tell gold from ordinary items by when they appear.
pub fn next_is_gold(gold_rate: f64, rater_id: UserId, now_ms: i64) -> bool {
    gold_rate > 0.0
        && stable_draw("gold", rater_id.get().wrapping_mul(1_000_003) ^ now_ms) < gold_rate
}

/// Whether a reviewer's decision (by its review id) is drawn for a spot check.
pub fn review_is_checked(check_rate: f64, review_id: i64) -> bool {
    check_rate > 0.0 && stable_draw("review-check", review_id) < check_rate
}

/// Whether a rater in training has passed: at least [`TRAINING_ITEMS`] answers given in
/// training, and the share right among the latest [`TRAINING_ITEMS`] reaches `threshold`.
/// `answers` are in the order given, `true` for right.
pub fn training_passed(answers: &[bool], threshold: f64) -> bool {
    if answers.len() < TRAINING_ITEMS {
        return false;
    }
    let latest = &answers[answers.len() - TRAINING_ITEMS..];
    let right = latest.iter().filter(|&&right| right).count();
    right as f64 / TRAINING_ITEMS as f64 >= threshold
}

/// Reads a share typed by a lead (`0.05`, or `5%`), between 0 and `max`.
pub fn parse_share(text: &str, what: &str, max: f64) -> Result<f64, String> {
    let trimmed = text.trim();
    let value = match trimmed.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|value| value / 100.0),
        None => trimmed.parse::<f64>(),
    };
    value
        .ok()
        .filter(|value| value.is_finite() && (0.0..=max).contains(value))
        .ok_or_else(|| format!("{what} is a share from 0 to {max} (or a percentage), not `{text}`"))
}

/// A gold item's right answer: a verdict for an item, a choice for a pair (its sides as shown
/// to every rater, which a pair records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoldAnswer {
    Verdict(bool),
    Pair(Preference),
}

impl GoldAnswer {
    /// The stored form: `pass`, `fail`, or a pair's choice (`a`, `b`, `tie`, `both_bad`).
    pub fn as_str(self) -> &'static str {
        match self {
            GoldAnswer::Verdict(true) => "pass",
            GoldAnswer::Verdict(false) => "fail",
            GoldAnswer::Pair(choice) => choice.as_str(),
        }
    }

    pub fn parse(text: &str) -> Result<GoldAnswer, String> {
        match text {
            "pass" => Ok(GoldAnswer::Verdict(true)),
            "fail" => Ok(GoldAnswer::Verdict(false)),
            other => Preference::parse(other).map(GoldAnswer::Pair).map_err(|_| {
                format!("a gold answer is pass or fail (an item), or a, b, tie or both_bad (a pair), not `{other}`")
            }),
        }
    }

    /// In words, for people.
    pub fn words(self) -> &'static str {
        match self {
            GoldAnswer::Verdict(true) => "pass",
            GoldAnswer::Verdict(false) => "fail",
            GoldAnswer::Pair(choice) => choice.words(),
        }
    }

    pub fn is_pair(self) -> bool {
        matches!(self, GoldAnswer::Pair(_))
    }
}

/// A gold item with how raters have done on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldItem {
    pub id: i64,
    pub task_id: TaskId,
    /// The start of the item's question, to recognise it by.
    pub input: String,
    pub answer: GoldAnswer,
    pub note: String,
    pub created_at: i64,
    pub retired_at: Option<i64>,
    pub answers: u64,
    pub right: u64,
}

/// A finished item or pair whose raters all agreed (or a reviewer corrected): a good gold
/// candidate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GoldCandidate {
    pub task_id: TaskId,
    pub input: String,
    /// The decided answer, which would become the gold answer.
    pub answer: GoldAnswer,
    pub labels: u64,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_is_served_at_the_rate() {
        let served = (0..20_000)
            .filter(|claim| next_is_gold(0.05, UserId(7), 1_800_000_000_000 + claim * 1_337))
            .count();
        // 5% of 20,000 = 1,000; the standard deviation is about 31.
        assert!((880..=1_120).contains(&served), "{served}");
        assert!(!(0..1_000).any(|claim| next_is_gold(0.0, UserId(7), claim)));
        assert!((0..1_000).all(|claim| next_is_gold(1.0, UserId(7), claim)));
    }

    #[test]
    fn spot_checks_are_stable_and_at_the_rate() {
        let checked = (0..10_000).filter(|id| review_is_checked(0.1, *id)).count();
        assert!((900..=1_100).contains(&checked), "{checked}");
        assert_eq!(review_is_checked(0.1, 42), review_is_checked(0.1, 42));
    }

    #[test]
    fn training_needs_enough_right_answers_among_the_latest() {
        assert!(!training_passed(&[true; 9], 0.7), "too few answers");
        assert!(training_passed(&[true; 10], 0.7));
        let mut answers = vec![false; 5];
        answers.extend([true; 7]);
        answers.extend([false; 3]);
        // Early mistakes age out: the latest ten are 7 right and 3 wrong.
        assert!(training_passed(&answers, 0.7));
        assert!(!training_passed(&answers, 0.75));
    }

    #[test]
    fn gold_answers_read_back_as_stored() {
        for answer in [GoldAnswer::Verdict(true), GoldAnswer::Verdict(false)]
            .into_iter()
            .chain(Preference::ALL.into_iter().map(GoldAnswer::Pair))
        {
            assert_eq!(GoldAnswer::parse(answer.as_str()), Ok(answer));
        }
        assert!(GoldAnswer::parse("maybe").unwrap_err().contains("maybe"));
        assert!(GoldAnswer::parse("a").unwrap().is_pair());
    }

    #[test]
    fn shares_read_as_decimals_or_percentages() {
        assert_eq!(parse_share("0.05", "the gold rate", 0.5), Ok(0.05));
        assert_eq!(parse_share(" 10% ", "the gold rate", 0.5), Ok(0.1));
        assert!(parse_share("0.9", "the gold rate", 0.5).is_err());
        assert!(parse_share("-1", "the gold rate", 0.5).is_err());
        assert!(parse_share("NaN", "the gold rate", 0.5).is_err());
        let error = parse_share("lots", "the gold rate", 0.5).unwrap_err();
        assert!(
            error.contains("the gold rate") && error.contains("lots"),
            "{error}"
        );
    }
}
