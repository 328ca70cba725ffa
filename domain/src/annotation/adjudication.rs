//! From labels to an item's final verdict, and the rules around it: a rater's quality weight,
//! which labels a senior reviewer sees, and when a task is due.
//!
//! Pure. The final label is the majority weighted by rater quality; a senior reviewer's
//! correction overrides it; an even split is left to a reviewer rather than decided by chance.

use crate::run::Priority;
use serde::{Deserialize, Serialize};

/// One rater's standing label on an item, with the weight their track record earns.
#[derive(Clone, Debug, PartialEq)]
pub struct Vote {
    pub rater: String,
    pub pass: bool,
    /// What the rater wrote ('' for nothing); shown when one label decides.
    pub rationale: String,
    /// From [`rater_quality`]; 0.5 for a rater with no track record.
    pub quality: f64,
}

/// What the labels decide.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Adjudication {
    /// `None`: the weighted votes tie, or there are none; a reviewer decides.
    pub pass: Option<bool>,
    /// In words, for the grade: who said what, with what weight.
    pub reason: String,
}

/// The quality weight of a rater from their reviewed labels and gold answers: the share judged
/// right, smoothed towards 0.5 (Laplace: one right and one wrong imagined), so that a new
/// rater's single label neither dominates nor vanishes.
pub fn rater_quality(right: u64, wrong: u64) -> f64 {
    (right as f64 + 1.0) / ((right + wrong) as f64 + 2.0)
}

/// The final verdict of an item: a reviewer's correction if there is one, else the majority of
/// the votes weighted by rater quality.
pub fn adjudicate(votes: &[Vote], correction: Option<bool>) -> Adjudication {
    if let Some(pass) = correction {
        return Adjudication {
            pass: Some(pass),
            reason: format!(
                "a senior reviewer corrected the label to {}",
                verdict_word(pass)
            ),
        };
    }
    let weight = |pass: bool| -> f64 {
        votes
            .iter()
            .filter(|vote| vote.pass == pass)
            .map(|vote| vote.quality)
            .sum()
    };
    let (for_pass, for_fail) = (weight(true), weight(false));
    let count = |pass: bool| votes.iter().filter(|vote| vote.pass == pass).count();
    let tally = format!(
        "{} said pass (weight {for_pass:.2}), {} said fail (weight {for_fail:.2})",
        count(true),
        count(false)
    );
    // Weights are sums of a few numbers in (0, 1): closer than this is a tie, not a decision.
    let pass = if votes.is_empty() || (for_pass - for_fail).abs() < 1e-9 {
        None
    } else {
        Some(for_pass > for_fail)
    };
    let reason = match pass {
        Some(pass) if votes.len() == 1 => match votes[0].rationale.trim() {
            "" => format!("human label: {}", verdict_word(pass)),
            rationale => format!("human label ({}): {rationale}", verdict_word(pass)),
        },
        Some(pass) => format!(
            "raters' weighted majority: {} ({tally})",
            verdict_word(pass)
        ),
        None if votes.is_empty() => "no standing labels".to_string(),
        None => format!("raters split evenly ({tally}); a senior reviewer decides"),
    };
    Adjudication { pass, reason }
}

fn verdict_word(pass: bool) -> &'static str {
    if pass {
        "pass"
    } else {
        "fail"
    }
}

/// Whether a submitted label is drawn for a senior reviewer: a stable draw from the label's id,
/// so the sample does not change when it is recomputed.
pub fn drawn_for_review(review_rate: f64, label_id: i64) -> bool {
    review_rate > 0.0 && stable_draw("review", label_id) < review_rate
}

/// A number in [0, 1) fixed by `(purpose, id)`: the same question always gets the same answer,
/// and draws for different purposes are independent of each other.
pub fn stable_draw(purpose: &str, id: i64) -> f64 {
    let hash = xxhash_rust::xxh3::xxh3_64(format!("{purpose}\0{id}").as_bytes());
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// Longest skill tag; tags are short words like `code`, `math` or `de`.
pub const MAX_SKILL_CHARS: usize = 40;

/// Checks a skill tag: lower-case letters, digits and `-`, so tags compare exactly and are
/// safe inside the queue's match pattern.
pub fn check_skill(skill: &str) -> Result<(), String> {
    let valid = !skill.is_empty()
        && skill.chars().count() <= MAX_SKILL_CHARS
        && skill
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "skill `{skill}` must be 1 to {MAX_SKILL_CHARS} lower-case letters, digits or dashes"
        ))
    }
}

/// Reads a comma-separated list of skills (as typed by a lead), refusing bad tags.
pub fn parse_skills(text: &str) -> Result<Vec<String>, String> {
    let mut skills: Vec<String> = Vec::new();
    for skill in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let skill = skill.to_lowercase();
        check_skill(&skill)?;
        if !skills.contains(&skill) {
            skills.push(skill);
        }
    }
    Ok(skills)
}

/// Hours from escalation to a task's SLA deadline, by its run's priority class: promotion
/// decisions in a day, scheduled evals in two (the default), ablations in four.
pub fn sla_hours(priority: Priority) -> i64 {
    match priority {
        Priority::Promotion => 24,
        Priority::Scheduled => 48,
        Priority::Ablation => 96,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(rater: &str, pass: bool, quality: f64) -> Vote {
        Vote {
            rater: rater.into(),
            pass,
            rationale: String::new(),
            quality,
        }
    }

    #[test]
    fn quality_weighs_the_majority() {
        // Two weak raters say pass, one strong rater says fail: the weights decide.
        let votes = [
            vote("a", true, 0.3),
            vote("b", true, 0.3),
            vote("c", false, 0.9),
        ];
        let decided = adjudicate(&votes, None);
        assert_eq!(decided.pass, Some(false));
        assert!(decided.reason.contains("2 said pass"), "{}", decided.reason);
        // Equal weights: the head count decides.
        let votes = [
            vote("a", true, 0.5),
            vote("b", true, 0.5),
            vote("c", false, 0.5),
        ];
        assert_eq!(adjudicate(&votes, None).pass, Some(true));
    }

    #[test]
    fn an_even_split_is_left_to_a_reviewer_and_a_correction_overrides() {
        let votes = [vote("a", true, 0.6), vote("b", false, 0.6)];
        let split = adjudicate(&votes, None);
        assert_eq!(split.pass, None);
        assert!(split.reason.contains("senior reviewer"));
        assert_eq!(adjudicate(&votes, Some(false)).pass, Some(false));
        assert_eq!(adjudicate(&[], None).pass, None);
        assert_eq!(
            adjudicate(&[vote("a", true, 0.5)], None).reason,
            "human label: pass"
        );
    }

    #[test]
    fn quality_is_smoothed_towards_a_half() {
        assert_eq!(rater_quality(0, 0), 0.5);
        assert!(rater_quality(9, 1) > 0.75 && rater_quality(9, 1) < 0.9);
        assert!(rater_quality(0, 5) < 0.2);
    }

    #[test]
    fn review_draws_hit_the_rate_and_are_stable() {
        let drawn = (0..20_000)
            .filter(|id| drawn_for_review(0.075, *id))
            .count();
        // 7.5% of 20,000 = 1,500; the standard deviation is about 37.
        assert!((1_350..=1_650).contains(&drawn), "{drawn}");
        assert_eq!(drawn_for_review(0.075, 7), drawn_for_review(0.075, 7));
        assert!(!(0..1000).any(|id| drawn_for_review(0.0, id)));
    }

    #[test]
    fn deadlines_follow_the_priority_class() {
        assert_eq!(sla_hours(Priority::Promotion), 24);
        assert_eq!(sla_hours(Priority::Scheduled), 48);
        assert_eq!(sla_hours(Priority::Ablation), 96);
    }
}
