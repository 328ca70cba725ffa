//! A pairwise judge: an LLM asked which of two answers to one question is better, the way raters
//! compare two checkpoints side by side. Judges favour the answer shown first (or second), so
//! every pair is asked twice, once in each order, and the two readings are averaged with the
//! second's sides swapped back: a judge that only followed position comes out even between the
//! two answers and chooses nothing, and one whose two orders disagree is not trusted to decide.
//!
//! The judge answers `A`, `B` or `TIE` first (`A` in capitals: "a" is a word). Its confidence
//! comes from the logprobs at that token, as a PASS/FAIL judge's does: each choice's
//! probability summed over its spellings and normalised over the three, unless less than half
//! the mass is on them. Pure.

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
/// (`Verdict:`, `Winner:`, `Answer:`) may come first. ("A tie" is a tie, not A.)
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
    let choice = match (first.and_then(choice_word), words.next()) {
        (Some(Preference::A), Some(next)) if next.eq_ignore_ascii_case("tie") => {
            Some(Preference::Tie)
        }
        (choice, _) => choice,
    };
    let Some(choice) = choice else {
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
/// spellings (` A`, `A`, `Tie`, ` TIE`) and normalised over the three. A tie may be spelt in
/// pieces (`T` + `IE`): a listed alternative that begins the word counts for it, so a tie's
/// mass is not missed (a choice itself spelt in pieces is not read).
fn choice_probabilities(tokens: &[TokenLogprob], choice: Preference) -> Option<[f64; 3]> {
    let chosen = answer_tokens(tokens, &CHOICE_LABELS).first()?;
    if choice_word(token_word(&chosen.text())) != Some(choice) {
        return None;
    }
    let mut mass = [0.0f64; 3];
    let mut chosen_listed = false;
    for alternative in &chosen.top {
        chosen_listed |= alternative.bytes == chosen.bytes;
        let text = alternative.text();
        let word = token_word(&text);
        let read = choice_word(word).or_else(|| {
            let lower = word.to_ascii_lowercase();
            (!lower.is_empty() && "tie".starts_with(&lower)).then_some(Preference::Tie)
        });
        if let Some(at) = read.and_then(|word| CHOICES.iter().position(|c| *c == word)) {
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

/// Probabilities closer than this are even: no choice is likelier.
const EVEN: f64 = 1e-9;

impl PairVerdict {
    /// Whether the verdict decides the pair without raters: both orders named its choice and
    /// the averaged probability of that choice reaches `threshold`.
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
    let replies_agree = left_first.choice.is_some() && left_first.choice == second_choice;
    let probabilities = match (left_first.probabilities, right_first.probabilities) {
        (Some(first), Some(second)) => Some([
            (first[0] + second[1]) / 2.0,
            (first[1] + second[0]) / 2.0,
            (first[2] + second[2]) / 2.0,
        ]),
        _ => None,
    };
    let (choice, confidence) = match probabilities {
        Some(probabilities) if left_first.choice.is_some() && second_choice.is_some() => {
            let mut ranked: Vec<(usize, f64)> = probabilities.iter().copied().enumerate().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            if ranked[0].1 - ranked[1].1 <= EVEN {
                // Even (a judge that only followed position): no choice.
                (None, None)
            } else {
                (Some(CHOICES[ranked[0].0]), Some(ranked[0].1))
            }
        }
        _ if replies_agree => (left_first.choice, None),
        _ => (None, None),
    };
    PairVerdict {
        probabilities,
        choice,
        confidence,
        // The likeliest choice must be the one both replies gave: a choice summed over its
        // spellings can overtake the one each reply sampled.
        consistent: replies_agree && choice == left_first.choice,
    }
}

/// A human's choice compared with a judge's: both bad is a tie (neither answer is better).
fn as_judged(choice: Preference) -> Preference {
    match choice {
        Preference::BothBad => Preference::Tie,
        other => other,
    }
}

/// A pair the judge was asked about, with the raters' decided choice where they decided one.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedPair {
    pub verdict: PairVerdict,
    pub human: Option<Preference>,
    /// Inverse of the chance raters saw the pair: 1 for one the judge did not decide (all go
    /// to raters), 1 / the audit share for one it decided and raters labelled anyway.
    pub weight: f64,
}

/// One row of the calibration's reliability table: pairs whose judge confidence fell in
/// `[lower, upper)` (the last row includes 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfidenceBin {
    pub lower: f64,
    pub upper: f64,
    /// Pairs in the row (a raw count: the evidence behind it).
    pub count: u64,
    /// Weighted mean confidence and weighted share agreeing with the raters.
    pub mean_confidence: Option<f64>,
    pub agreement: Option<f64>,
}

/// How a pairwise judge compares with the raters' decided pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairwiseCalibration {
    /// Pairs the judge chose on and raters decided.
    pub pairs: u64,
    /// Share where the judge's choice is the raters' (both bad counting as a tie), each pair
    /// weighted by the inverse of the chance raters saw it, so it estimates the agreement on
    /// every pair the judge is asked.
    pub agreement: Option<f64>,
    /// Cohen's kappa between the judge and the raters over A, B and tie (unweighted, over the
    /// pairs raters decided), or why it is undefined.
    pub kappa: Option<f64>,
    pub kappa_undefined: Option<String>,
    /// Share of judged pairs whose two orders named the same choice.
    pub consistency: Option<f64>,
    /// Pairs it judged (answering in both orders).
    pub judged: u64,
    /// The judge's confidence (from 1/3: three choices) against its weighted agreement.
    pub reliability: Vec<ConfidenceBin>,
}

/// Rows of the reliability table, from a third (an even three-way split) to one.
const RELIABILITY_BINS: usize = 4;

/// Calibrates a pairwise judge on every pair it judged.
pub fn calibrate_pairwise(pairs: &[CheckedPair]) -> PairwiseCalibration {
    let compared: Vec<(&CheckedPair, Preference, Preference)> = pairs
        .iter()
        .filter_map(|pair| Some((pair, pair.verdict.choice?, as_judged(pair.human?))))
        .collect();
    let weighted_share = |items: &mut dyn Iterator<Item = (f64, bool)>| {
        let (mut total, mut agreeing) = (0.0, 0.0);
        for (weight, agrees) in items {
            total += weight;
            if agrees {
                agreeing += weight;
            }
        }
        (total > 0.0).then(|| agreeing / total)
    };
    let labels: Vec<(&str, &str)> = compared
        .iter()
        .map(|(_, judge, human)| (judge.as_str(), human.as_str()))
        .collect();
    let kappa = cohen_kappa(&labels, Weighting::Unweighted).statistic;
    let lowest = 1.0 / 3.0;
    let width = (1.0 - lowest) / RELIABILITY_BINS as f64;
    let reliability = (0..RELIABILITY_BINS)
        .map(|bin| {
            let lower = lowest + width * bin as f64;
            let upper = lower + width;
            let last = bin + 1 == RELIABILITY_BINS;
            let inside: Vec<(f64, f64, bool)> = compared
                .iter()
                .filter_map(|(pair, judge, human)| {
                    let confidence = pair.verdict.confidence?;
                    let within = confidence >= lower && (confidence < upper || last);
                    within.then_some((confidence, pair.weight, judge == human))
                })
                .collect();
            let weight: f64 = inside.iter().map(|(_, weight, _)| weight).sum();
            ConfidenceBin {
                lower,
                upper,
                count: inside.len() as u64,
                mean_confidence: (weight > 0.0).then(|| {
                    inside
                        .iter()
                        .map(|(confidence, weight, _)| confidence * weight)
                        .sum::<f64>()
                        / weight
                }),
                agreement: weighted_share(
                    &mut inside.iter().map(|(_, weight, agrees)| (*weight, *agrees)),
                ),
            }
        })
        .collect();
    PairwiseCalibration {
        pairs: compared.len() as u64,
        agreement: weighted_share(
            &mut compared
                .iter()
                .map(|(pair, judge, human)| (pair.weight, judge == human)),
        ),
        kappa: kappa.value(),
        kappa_undefined: match kappa {
            Statistic::Undefined { reason } => Some(reason.to_string()),
            Statistic::Defined(_) => None,
        },
        consistency: weighted_share(&mut pairs.iter().map(|pair| (1.0, pair.verdict.consistent))),
        judged: pairs.len() as u64,
        reliability,
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
    fn a_choice_that_overtakes_both_replies_decides_nothing() {
        // Both replies said A (the left), but the tie's spellings sum to more.
        let verdict = combine_orders(
            &reading(Preference::A, [0.4, 0.05, 0.55]),
            &reading(Preference::B, [0.05, 0.4, 0.55]),
        );
        assert_eq!(verdict.choice, Some(Preference::Tie));
        assert!(!verdict.consistent && !verdict.decides(0.5));
        // "A tie" is a tie; a tie spelt in pieces still weighs against A.
        assert_eq!(
            read_pairwise("A tie: both are right", None).choice,
            Some(Preference::Tie)
        );
        let split_tie = [token(
            "A",
            (0.5f32).ln(),
            &[("A", (0.5f32).ln()), ("T", (0.45f32).ln())],
        )];
        let [a, _, tie] = read_pairwise("A", Some(&split_tie)).probabilities.unwrap();
        assert!((a - 0.5 / 0.95).abs() < 1e-6 && (tie - 0.45 / 0.95).abs() < 1e-6);
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
        assert_eq!(verdict.choice, None, "even: no choice");
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
    fn calibration_counts_agreement_with_both_bad_as_a_tie_and_weighs_audited_pairs() {
        let sure = |choice, confidence| PairVerdict {
            probabilities: None,
            choice: Some(choice),
            confidence: Some(confidence),
            consistent: true,
        };
        let checked = |verdict, human, weight| CheckedPair {
            verdict,
            human,
            weight,
        };
        let pairs = [
            checked(sure(Preference::A, 0.9), Some(Preference::A), 1.0),
            checked(sure(Preference::B, 0.9), Some(Preference::B), 1.0),
            checked(sure(Preference::Tie, 0.4), Some(Preference::BothBad), 1.0),
            // An audited pair stands for the four the judge decided alone (audit share 1/4).
            checked(sure(Preference::A, 0.9), Some(Preference::B), 4.0),
            // Judged but never seen by raters: counts for consistency only.
            checked(sure(Preference::A, 0.9), None, 1.0),
            checked(
                PairVerdict {
                    consistent: false,
                    ..sure(Preference::B, 0.6)
                },
                None,
                1.0,
            ),
        ];
        let calibration = calibrate_pairwise(&pairs);
        assert_eq!((calibration.pairs, calibration.judged), (4, 6));
        // 3 of 7 by weight agree.
        assert!((calibration.agreement.unwrap() - 3.0 / 7.0).abs() < 1e-12);
        assert_eq!(calibration.consistency, Some(5.0 / 6.0));
        // Judge a, b, tie, a against raters a, b, tie, b: kappa (0.75 - 0.3125) / 0.6875.
        assert!((calibration.kappa.unwrap() - 0.4375 / 0.6875).abs() < 1e-9);
        // A confidence below a half has a row of its own.
        let first = &calibration.reliability[0];
        assert!(first.lower < 0.34 && first.upper > 0.4);
        assert_eq!((first.count, first.agreement), (1, Some(1.0)));
        let top = calibration.reliability.last().unwrap();
        assert_eq!(top.count, 3);
        assert!((top.agreement.unwrap() - 2.0 / 6.0).abs() < 1e-12);
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
