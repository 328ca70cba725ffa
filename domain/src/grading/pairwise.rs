//! A pairwise judge: an LLM asked which of two answers to one question is better, the way raters
//! compare two checkpoints side by side. Judges favour the answer shown first (or second), so
//! every pair is asked twice, once in each order, and the two readings are averaged with the
//! second's sides swapped back: a judge that only followed position then says "tie", and one
//! whose two orders disagree is not trusted to decide.
//!
//! The judge answers `A`, `B` or `TIE` first (`A` in capitals: "a" is a word). Its confidence
//! comes from the logprobs at that token, as a PASS/FAIL judge's does: each choice's
//! probability summed over its spellings and normalised over the three, unless less than half
//! the mass is on them. Pure.

use super::calibration::{reliability_bins, LabelledJudgement, ReliabilityBin};
use super::judge::{answer_tokens, render_placeholders, token_word, MAX_RUBRIC_CHARS};
use crate::annotation::agreement::{cohen_kappa, Statistic, Weighting};
use crate::annotation::preference::Preference;
use crate::logprobs::TokenLogprob;
use serde::{Deserialize, Serialize};

/// Where the answer shown first (as A) goes in a pairwise rubric.
pub const OUTPUT_A_PLACEHOLDER: &str = "{output_a}";
/// Where the answer shown second (as B) goes.
pub const OUTPUT_B_PLACEHOLDER: &str = "{output_b}";
/// Alternatives asked per token: every spelling of the three choices should be listed.
pub const PAIRWISE_TOP_LOGPROBS: u8 = 20;
/// Least probability mass on the three choices for the logprobs to be read.
pub const MIN_CHOICE_MASS: f64 = 0.5;
/// Confidence bins of the calibration's reliability table.
const RELIABILITY_BINS: usize = 5;

pub const DEFAULT_PAIRWISE_RUBRIC: &str = "You are comparing two answers to the same question.\n\n\
Question:\n{input}\n\n\
Answer A:\n{output_a}\n\n\
Answer B:\n{output_b}\n\n\
Which answer is better? Judge whether each final answer is correct first, then how clearly it \
is reached; ignore which answer comes first and how long each is. Reply A, B or TIE as your \
first word, then one sentence.";

/// Checks a pairwise judge's rubric as the UI saves it.
pub fn validate_pairwise_rubric(rubric: &str) -> Result<(), String> {
    for placeholder in [OUTPUT_A_PLACEHOLDER, OUTPUT_B_PLACEHOLDER] {
        if !rubric.contains(placeholder) {
            return Err(format!(
                "a pairwise rubric must contain {OUTPUT_A_PLACEHOLDER} and {OUTPUT_B_PLACEHOLDER}, where the two answers go"
            ));
        }
    }
    if rubric.chars().count() > MAX_RUBRIC_CHARS {
        return Err(format!(
            "the rubric is longer than {MAX_RUBRIC_CHARS} characters"
        ));
    }
    Ok(())
}

/// The prompt for one order: `first` shown as A, `second` as B (quoted and bounded as a
/// PASS/FAIL judge's prompt is).
pub fn render_pairwise_prompt(
    rubric: &str,
    input: &str,
    first: &str,
    second: &str,
) -> Result<String, String> {
    render_placeholders(
        rubric,
        &[
            crate::prompt::INPUT_PLACEHOLDER,
            OUTPUT_A_PLACEHOLDER,
            OUTPUT_B_PLACEHOLDER,
        ],
        &[input, first, second],
    )
}

/// The three answers a pairwise judge gives, as shown: A (first) better, B better, or a tie.
const CHOICES: [Preference; 3] = [Preference::A, Preference::B, Preference::Tie];

/// What one order of a pair said.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OrderReading {
    /// The choice as shown (`A`: the answer shown first); `None`: the reply held none.
    pub choice: Option<Preference>,
    /// P(A), P(B), P(tie) from the logprobs, when they could be read.
    pub probabilities: Option<[f64; 3]>,
}

/// A reply's first word as a choice: `A` or `B` (capitals), or `tie` in any case; a label
/// (`Verdict:`, `Winner:`, `Answer:`) may come first.
fn choice_word(word: &str) -> Option<Preference> {
    match word {
        "A" => Some(Preference::A),
        "B" => Some(Preference::B),
        tie if tie.eq_ignore_ascii_case("tie") => Some(Preference::Tie),
        _ => None,
    }
}

const CHOICE_LABELS: [&str; 3] = ["verdict", "winner", "answer"];

/// Reads one order's reply: its first word (after an optional label) must be a choice, as a
/// PASS/FAIL judge's first word must be a verdict; a choice found later is not read.
pub fn read_pairwise(output: &str, tokens: Option<&[TokenLogprob]>) -> OrderReading {
    let mut words = output
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty());
    let first = match words.next() {
        Some(word)
            if CHOICE_LABELS
                .iter()
                .any(|label| word.eq_ignore_ascii_case(label)) =>
        {
            words.next()
        }
        first => first,
    };
    let Some(choice) = first.and_then(choice_word) else {
        return OrderReading {
            choice: None,
            probabilities: None,
        };
    };
    OrderReading {
        choice: Some(choice),
        probabilities: tokens.and_then(|tokens| choice_probabilities(tokens, choice)),
    }
}

/// P(A), P(B), P(tie) at the token that spells the choice: each summed over its listed
/// spellings (` A`, `A`, `Tie`, ` TIE`) and normalised over the three.
fn choice_probabilities(tokens: &[TokenLogprob], choice: Preference) -> Option<[f64; 3]> {
    let chosen = answer_tokens(tokens, &CHOICE_LABELS).first()?;
    if choice_word(token_word(&chosen.text())) != Some(choice) {
        return None;
    }
    let mut mass = [0.0f64; 3];
    let mut chosen_listed = false;
    for alternative in &chosen.top {
        chosen_listed |= alternative.bytes == chosen.bytes;
        if let Some(at) = choice_word(token_word(&alternative.text()))
            .and_then(|word| CHOICES.iter().position(|c| *c == word))
        {
            mass[at] += f64::from(alternative.logprob).exp();
        }
    }
    if !chosen_listed {
        let at = CHOICES.iter().position(|c| *c == choice)?;
        mass[at] += f64::from(chosen.logprob).exp();
    }
    let total: f64 = mass.iter().sum();
    if !(total.is_finite() && total >= MIN_CHOICE_MASS) {
        return None;
    }
    Some(mass.map(|p| p / total))
}

/// A choice as shown in the second order, in the pair's own sides (the second order shows the
/// right answer first).
fn swapped(choice: Preference) -> Preference {
    match choice {
        Preference::A => Preference::B,
        Preference::B => Preference::A,
        other => other,
    }
}

/// What a pairwise judge concluded on a pair from both orders, in the pair's own sides: `A`
/// is its left answer (shown first in the first order), `B` its right.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairVerdict {
    /// P(left better), P(right better), P(tie), both orders averaged; `None` when either
    /// order's logprobs could not be read.
    pub probabilities: Option<[f64; 3]>,
    /// The likeliest choice (from the probabilities, else from the two replies when they
    /// agree); `None` when a reply held no choice, or the replies disagree without logprobs.
    pub choice: Option<Preference>,
    /// The probability of that choice.
    pub confidence: Option<f64>,
    /// Both orders named the same answer (or both a tie): the judge followed the answers, not
    /// their position.
    pub consistent: bool,
}

impl PairVerdict {
    /// Whether the verdict decides the pair without raters: both orders agree and the averaged
    /// probability of the choice reaches `threshold`.
    pub fn decides(&self, threshold: f64) -> bool {
        self.consistent
            && self.choice.is_some()
            && self
                .confidence
                .is_some_and(|confidence| confidence >= threshold)
    }
}

/// Combines the order showing the left answer first with the order showing the right one first.
pub fn combine_orders(left_first: &OrderReading, right_first: &OrderReading) -> PairVerdict {
    let second_choice = right_first.choice.map(swapped);
    let consistent = left_first.choice.is_some() && left_first.choice == second_choice;
    let probabilities = match (left_first.probabilities, right_first.probabilities) {
        (Some(first), Some(second)) => Some([
            (first[0] + second[1]) / 2.0,
            (first[1] + second[0]) / 2.0,
            (first[2] + second[2]) / 2.0,
        ]),
        _ => None,
    };
    let (choice, confidence) =
        match probabilities {
            Some(probabilities) if left_first.choice.is_some() && second_choice.is_some() => {
                let (at, confidence) = probabilities.iter().copied().enumerate().fold(
                    (0, f64::MIN),
                    |best, (at, p)| if p > best.1 { (at, p) } else { best },
                );
                (Some(CHOICES[at]), Some(confidence))
            }
            _ if consistent => (left_first.choice, None),
            _ => (None, None),
        };
    PairVerdict {
        probabilities,
        choice,
        confidence,
        consistent,
    }
}

/// A human's choice compared with a judge's: both bad is a tie (neither answer is better).
fn as_judged(choice: Preference) -> Preference {
    match choice {
        Preference::BothBad => Preference::Tie,
        other => other,
    }
}

/// How a pairwise judge compares with the raters' decided pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairwiseCalibration {
    /// Pairs the judge chose on and raters decided.
    pub pairs: u64,
    /// Share where the judge's choice is the raters' (both bad counting as a tie).
    pub agreement: Option<f64>,
    /// Cohen's kappa between the judge and the raters over A, B and tie, or why it is
    /// undefined.
    pub kappa: Option<f64>,
    pub kappa_undefined: Option<String>,
    /// Share of every judged pair whose two orders agreed.
    pub consistency: Option<f64>,
    /// Judged pairs (with or without raters).
    pub judged: u64,
    /// The judge's confidence against how often it matched the raters.
    pub reliability: Vec<ReliabilityBin>,
}

/// Calibrates a pairwise judge: `verdicts` are every pair it judged, with the raters' decided
/// choice where they decided one.
pub fn calibrate_pairwise(verdicts: &[(PairVerdict, Option<Preference>)]) -> PairwiseCalibration {
    let compared: Vec<(&PairVerdict, Preference, Preference)> = verdicts
        .iter()
        .filter_map(|(verdict, human)| Some((verdict, verdict.choice?, as_judged((*human)?))))
        .collect();
    let agreeing = compared
        .iter()
        .filter(|(_, judge, human)| judge == human)
        .count();
    let share = |part: usize, whole: usize| (whole > 0).then(|| part as f64 / whole as f64);
    let labels: Vec<(&str, &str)> = compared
        .iter()
        .map(|(_, judge, human)| (judge.as_str(), human.as_str()))
        .collect();
    // The raters were asked whether or not the judge was sure (every pair of a request the
    // judge did not decide, and an audit sample of those it did), so each counts once.
    let labelled: Vec<LabelledJudgement> = compared
        .iter()
        .filter_map(|(verdict, judge, human)| {
            Some(LabelledJudgement {
                confidence: verdict.confidence?,
                judge_pass: true,
                human_pass: judge == human,
                weight: 1.0,
            })
        })
        .collect();
    let kappa = cohen_kappa(&labels, Weighting::Unweighted).statistic;
    PairwiseCalibration {
        pairs: compared.len() as u64,
        agreement: share(agreeing, compared.len()),
        kappa: kappa.value(),
        kappa_undefined: match kappa {
            Statistic::Undefined { reason } => Some(reason.to_string()),
            Statistic::Defined(_) => None,
        },
        consistency: share(
            verdicts
                .iter()
                .filter(|(verdict, _)| verdict.consistent)
                .count(),
            verdicts.len(),
        ),
        judged: verdicts.len() as u64,
        reliability: reliability_bins(&labelled, RELIABILITY_BINS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logprobs::Alternative;

    fn token(text: &str, logprob: f32, top: &[(&str, f32)]) -> TokenLogprob {
        TokenLogprob {
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: top
                .iter()
                .map(|(text, logprob)| Alternative {
                    bytes: text.as_bytes().to_vec(),
                    logprob: *logprob,
                })
                .collect(),
        }
    }

    fn reading(choice: Preference, probabilities: [f64; 3]) -> OrderReading {
        OrderReading {
            choice: Some(choice),
            probabilities: Some(probabilities),
        }
    }

    #[test]
    fn the_first_word_is_the_choice() {
        for (reply, choice) in [
            ("A", Some(Preference::A)),
            ("B. It shows its working.", Some(Preference::B)),
            ("**TIE** both are right", Some(Preference::Tie)),
            ("tie", Some(Preference::Tie)),
            ("Winner: B", Some(Preference::B)),
            ("[[A]]", Some(Preference::A)),
            // "a" is a word, not a choice; and a choice found later is never read.
            ("a better answer is B", None),
            ("Both are fine, so TIE", None),
            ("", None),
        ] {
            assert_eq!(read_pairwise(reply, None).choice, choice, "{reply:?}");
        }
    }

    #[test]
    fn logprobs_give_each_choice_summed_over_its_spellings() {
        let tokens = [
            token(
                " B",
                (0.6f32).ln(),
                &[
                    (" B", (0.6f32).ln()),
                    ("B", (0.1f32).ln()),
                    (" A", (0.2f32).ln()),
                    (" Tie", (0.05f32).ln()),
                    (" The", (0.05f32).ln()),
                ],
            ),
            token(".", -0.1, &[]),
        ];
        let read = read_pairwise(" B.", Some(&tokens));
        assert_eq!(read.choice, Some(Preference::B));
        let [a, b, tie] = read.probabilities.unwrap();
        let total = 0.6 + 0.1 + 0.2 + 0.05;
        assert!((a - 0.2 / total).abs() < 1e-6);
        assert!((b - 0.7 / total).abs() < 1e-6);
        assert!((tie - 0.05 / total).abs() < 1e-6);
        // Too little mass on the three choices: no distribution, but the choice stands.
        let vague = [token(
            "A",
            (0.3f32).ln(),
            &[("A", (0.3f32).ln()), ("The", (0.6f32).ln())],
        )];
        let read = read_pairwise("A", Some(&vague));
        assert_eq!(
            (read.choice, read.probabilities),
            (Some(Preference::A), None)
        );
    }

    #[test]
    fn both_orders_average_with_sides_swapped_back() {
        // Left first: A (the left) at 0.8. Right first: B (the left again) at 0.6.
        let verdict = combine_orders(
            &reading(Preference::A, [0.8, 0.1, 0.1]),
            &reading(Preference::B, [0.3, 0.6, 0.1]),
        );
        let [left, right, tie] = verdict.probabilities.unwrap();
        assert!(
            (left - 0.7).abs() < 1e-9 && (right - 0.2).abs() < 1e-9 && (tie - 0.1).abs() < 1e-9
        );
        assert_eq!(verdict.choice, Some(Preference::A));
        assert!(verdict.consistent);
        assert!(verdict.decides(0.7) && !verdict.decides(0.75));
    }

    #[test]
    fn a_judge_that_follows_position_decides_nothing() {
        // It says "A" whichever answer is shown first: the orders disagree.
        let verdict = combine_orders(
            &reading(Preference::A, [0.9, 0.05, 0.05]),
            &reading(Preference::A, [0.9, 0.05, 0.05]),
        );
        assert!(!verdict.consistent);
        let [left, right, _] = verdict.probabilities.unwrap();
        assert!((left - right).abs() < 1e-9, "position cancels out");
        assert!(!verdict.decides(0.4));
        // Without logprobs, agreeing replies give the choice but no confidence.
        let plain = |choice| OrderReading {
            choice: Some(choice),
            probabilities: None,
        };
        let agreed = combine_orders(&plain(Preference::B), &plain(Preference::A));
        assert_eq!(
            (agreed.choice, agreed.confidence),
            (Some(Preference::B), None)
        );
        assert!(agreed.consistent && !agreed.decides(0.5));
        let split = combine_orders(&plain(Preference::B), &plain(Preference::B));
        assert_eq!(split.choice, None);
        let unread = combine_orders(
            &OrderReading {
                choice: None,
                probabilities: None,
            },
            &plain(Preference::A),
        );
        assert_eq!((unread.choice, unread.consistent), (None, false));
    }

    #[test]
    fn calibration_counts_agreement_with_both_bad_as_a_tie() {
        let sure = |choice| PairVerdict {
            probabilities: None,
            choice: Some(choice),
            confidence: Some(0.9),
            consistent: true,
        };
        let verdicts = [
            (sure(Preference::A), Some(Preference::A)),
            (sure(Preference::B), Some(Preference::B)),
            (sure(Preference::Tie), Some(Preference::BothBad)),
            (sure(Preference::A), Some(Preference::B)),
            // Judged but never seen by raters: counts for consistency only.
            (sure(Preference::A), None),
            (
                PairVerdict {
                    consistent: false,
                    ..sure(Preference::B)
                },
                None,
            ),
        ];
        let calibration = calibrate_pairwise(&verdicts);
        assert_eq!((calibration.pairs, calibration.judged), (4, 6));
        assert_eq!(calibration.agreement, Some(0.75));
        assert_eq!(calibration.consistency, Some(5.0 / 6.0));
        // Judge a, b, tie, a against raters a, b, tie, b: kappa (0.75 - 0.3125) / 0.6875.
        assert!((calibration.kappa.unwrap() - 0.4375 / 0.6875).abs() < 1e-9);
        let top = calibration.reliability.last().unwrap();
        assert_eq!((top.count, top.accuracy), (4, Some(0.75)));
    }

    #[test]
    fn rubrics_must_place_both_answers() {
        assert!(validate_pairwise_rubric(DEFAULT_PAIRWISE_RUBRIC).is_ok());
        assert!(validate_pairwise_rubric("{input} {output_a}").is_err());
        let prompt =
            render_pairwise_prompt("Q {input} A {output_a} B {output_b}", "q", "x", "y").unwrap();
        assert_eq!(prompt, "Q q A x B y");
    }
}
