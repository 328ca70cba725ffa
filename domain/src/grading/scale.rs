//! Judges that score a rubric's ordinal dimension, as raters do, G-Eval style: the judge
//! answers a point of the scale, and the logprobs over the point tokens give a probability for
//! every point. From that distribution come the expected score (the probability-weighted
//! point), the probability that the answer passes (the mass on points at or above the pass
//! point) and so the verdict and confidence triage routes on, exactly as a PASS/FAIL judge's.
//!
//! Pure: the call goes through the dispatcher; calibration against raters is in
//! [`super::scale_calibration`].

use serde::{Deserialize, Serialize};

use super::judge::{answer_tokens, token_word, JudgeReading};
use crate::annotation::rubric::{Dimension, DimensionKind, Rubric};
use crate::logprobs::TokenLogprob;

/// Most points a judged scale may have: each point must be one digit token (`1`–`9`), which
/// every tokenizer writes as one token; `10` is two tokens in many.
pub const MAX_JUDGED_POINTS: u8 = 9;
/// Alternatives a scale judge asks for at each token: the most the OpenAI API allows, since
/// one point may be listed in several spellings (`4`, ` 4`) beside tokens off the scale.
pub const SCALE_TOP_LOGPROBS: u8 = 20;
/// Least probability the listed point tokens must hold together for the distribution to be
/// read: below it the judge was unsure it would answer a point at all, and normalising over
/// the few points listed would overstate its confidence.
pub const MIN_POINT_MASS: f64 = 0.5;

/// The rubric dimension a judge scores, frozen with the judge version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeScale {
    /// The rubric version's id (a version, not a name: its scale is fixed).
    pub rubric_id: i64,
    pub rubric_name: String,
    pub rubric_version: i64,
    /// The ordinal dimension's key.
    pub dimension: String,
    /// Points of its scale, 1 being the lowest.
    pub points: u8,
    /// Points at or above this pass.
    pub pass_at_least: u8,
}

impl JudgeScale {
    /// The scale of `rubric`'s dimension `key`, which must be ordinal with at most
    /// [`MAX_JUDGED_POINTS`] points. The pass point is the rubric's own when its verdict comes
    /// from this dimension; otherwise `pass_at_least` must give one.
    pub fn of_rubric(
        (rubric_id, rubric_name, rubric_version): (i64, &str, i64),
        rubric: &Rubric,
        key: &str,
        pass_at_least: Option<u8>,
    ) -> Result<JudgeScale, String> {
        let dimension = rubric.dimension(key).ok_or_else(|| {
            format!("rubric `{rubric_name}` v{rubric_version} has no dimension `{key}`")
        })?;
        let DimensionKind::Ordinal { scale } = &dimension.kind else {
            return Err(format!(
                "dimension `{key}` is not an ordinal scale; a judge scores ordinal dimensions \
                 (a pass/fail question is an ordinary judge's)"
            ));
        };
        let points = u8::try_from(scale.len())
            .ok()
            .filter(|points| *points <= MAX_JUDGED_POINTS)
            .ok_or_else(|| {
                format!(
                    "dimension `{key}` has {} points; a judge reads its score from one digit, \
                     so it scores scales of 2 to {MAX_JUDGED_POINTS} points",
                    scale.len()
                )
            })?;
        let rubric_pass = rubric
            .verdict
            .as_ref()
            .filter(|rule| rule.dimension == key)
            .and_then(|rule| rule.pass_at_least);
        let pass_at_least = match (pass_at_least, rubric_pass) {
            (Some(point), _) => point,
            (None, Some(point)) => point as u8,
            (None, None) => {
                return Err(format!(
                    "say from which point an answer passes on `{key}`: the rubric's verdict \
                     does not come from it"
                ))
            }
        };
        if !(2..=points).contains(&pass_at_least) {
            return Err(format!(
                "the pass point must be from 2 to {points} (the scale's points), not {pass_at_least}"
            ));
        }
        Ok(JudgeScale {
            rubric_id,
            rubric_name: rubric_name.to_string(),
            rubric_version,
            dimension: key.to_string(),
            points,
            pass_at_least,
        })
    }

    /// Whether this judge decides what the rubric's raters decide: the rubric's verdict comes
    /// from the judge's dimension, passing from the same point, on a scale of as many points.
    /// Otherwise its verdicts would not be the raters' verdicts, and their labels could neither
    /// check nor re-tune it.
    pub fn check_decides(&self, rubric_name: &str, rubric: &Rubric) -> Result<(), String> {
        let this = format!(
            "the judge scores `{}` of rubric `{}`",
            self.dimension, self.rubric_name
        );
        if rubric_name != self.rubric_name {
            return Err(format!(
                "{this}, but the raters answer rubric `{rubric_name}`"
            ));
        }
        let rule = rubric.verdict.as_ref();
        if rule.map(|rule| rule.dimension.as_str()) != Some(self.dimension.as_str()) {
            return Err(format!(
                "{this}, but the rubric's verdict comes from {}; a judge in triage must decide \
                 the rubric's verdict",
                rule.map_or_else(
                    || "no dimension".to_string(),
                    |rule| format!("`{}`", rule.dimension)
                )
            ));
        }
        if rule.and_then(|rule| rule.pass_at_least) != Some(f64::from(self.pass_at_least)) {
            return Err(format!(
                "{this} passing from point {}, but the rubric's verdict passes from {}",
                self.pass_at_least,
                rule.and_then(|rule| rule.pass_at_least)
                    .map_or_else(|| "no point".to_string(), |point| point.to_string())
            ));
        }
        match rubric
            .dimension(&self.dimension)
            .map(|dimension| &dimension.kind)
        {
            Some(DimensionKind::Ordinal { scale }) if scale.len() == usize::from(self.points) => {
                Ok(())
            }
            _ => Err(format!(
                "{this} on {} points, and the rubric's newest version changed that scale; define \
                 a new version of the judge",
                self.points
            )),
        }
    }

    /// Checks a scale judge's prompt: it must not ask for PASS or FAIL, which it could never
    /// read as a point.
    pub fn check_prompt(&self, prompt: &str) -> Result<(), String> {
        if prompt.contains("PASS") && prompt.contains("FAIL") {
            return Err(format!(
                "the prompt asks for PASS or FAIL, but a judge on a scale answers a point from 1 to {}; \
                 leave the prompt as it was to start from one made for the scale",
                self.points
            ));
        }
        Ok(())
    }

    /// `rubric v2: helpfulness, 1–5, passes at 4`.
    pub fn describe(&self) -> String {
        format!(
            "{} v{}: {}, 1–{}, passes at {}",
            self.rubric_name, self.rubric_version, self.dimension, self.points, self.pass_at_least
        )
    }

    /// The prompt a new scale judge starts from: the dimension's question and every point's
    /// anchor, then the item, the point asked for first.
    pub fn default_prompt(&self, dimension: &Dimension) -> String {
        let mut prompt = format!(
            "You are rating an answer on one question: {}\n\nRate it on a scale of 1 to {}:\n",
            dimension.question, self.points
        );
        if let DimensionKind::Ordinal { scale } = &dimension.kind {
            for (index, anchor) in scale.iter().enumerate() {
                prompt.push_str(&format!(
                    "{} — {}: {}\n",
                    index + 1,
                    anchor.label,
                    anchor.description
                ));
            }
        }
        prompt.push_str(
            "\nQuestion:\n{input}\n\nReference answer: {target}\n\nAnswer to rate:\n{output}\n\n\
             Reply with the number of the point alone as the first word, then one sentence saying why.",
        );
        prompt
    }
}

/// What one judge sample said on the scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreReading {
    /// The point the reply gives, from 1.
    pub point: u8,
    /// Probability of each point, lowest first (summing to 1), from the logprobs at the
    /// point's token; `None` without logprobs for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probabilities: Option<Vec<f64>>,
}

/// A label a judge may put before its point (`Score: 4`).
const SCORE_LABELS: [&str; 3] = ["score", "rating", "point"];

/// Reads the point from a judge's reply: its first word, a whole number from 1 to the scale's
/// points, optionally after `Score:` or `Rating ` (never `Score (1-5): …`, whose first number is
/// the range's). `None` when the reply starts with anything else, or the number is not a point
/// of this scale (`3.5`, a range `3-4`, `4/10` or `4 out of 10` on another scale): a judge
/// failure, as for a verdict.
pub fn read_score(
    output: &str,
    tokens: Option<&[TokenLogprob]>,
    scale: &JudgeScale,
) -> Option<ScoreReading> {
    // `-2` is no point of a scale from 1.
    if output.trim_start().starts_with(['-', '−']) {
        return None;
    }
    let start = output.trim_start_matches(|c: char| !c.is_alphanumeric());
    let (first, rest) = split_word(start);
    let (word, rest) = if SCORE_LABELS.contains(&first.to_ascii_lowercase().as_str()) {
        let gap = rest
            .find(|c: char| c.is_alphanumeric())
            .map_or(rest, |end| &rest[..end]);
        if !gap
            .chars()
            .all(|c| c == ':' || c.is_whitespace() || c == '*')
        {
            return None;
        }
        split_word(&rest[gap.len()..])
    } else {
        (first, rest)
    };
    let point = point_of(word, scale.points)?;
    if !ends_a_point(rest, scale.points) {
        return None;
    }
    let probabilities = tokens.and_then(|tokens| point_probabilities(tokens, point, scale.points));
    Some(ScoreReading {
        point,
        probabilities,
    })
}

/// Whether the text after a point leaves it a point of this scale: not the start of a decimal
/// (`3.5`) or a range (`3-4`), and any `/N` or `out of N` naming the scale's own points.
fn ends_a_point(rest: &str, points: u8) -> bool {
    let mut chars = rest.chars();
    let next = chars.next();
    let then = chars.next();
    if matches!(next, Some('.' | ',' | '-' | '–')) && then.is_some_and(|c| c.is_ascii_digit()) {
        return false;
    }
    let trimmed = rest.trim_start();
    // A spaced range: `3 - 4`, `3 – 4`, `3 to 4`.
    let range_rest = trimmed
        .strip_prefix(['-', '–'])
        .or_else(|| trimmed.strip_prefix("to "));
    if range_rest.is_some_and(|after| after.trim_start().starts_with(|c: char| c.is_ascii_digit()))
    {
        return false;
    }
    let of_scale = if let Some(after) = trimmed.strip_prefix('/') {
        Some(after)
    } else {
        trimmed
            .get(..6)
            .filter(|head| head.eq_ignore_ascii_case("out of"))
            .map(|_| &trimmed[6..])
    };
    match of_scale {
        Some(after) => {
            let (total, _) = split_word(after.trim_start());
            total.parse::<u8>().ok() == Some(points)
        }
        None => true,
    }
}

fn split_word(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_alphanumeric())
        .unwrap_or(text.len());
    text.split_at(end)
}

/// The point a word spells: digits only, no leading zero, from 1 to `points`.
fn point_of(word: &str, points: u8) -> Option<u8> {
    if word.is_empty() || word.starts_with('0') || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse::<u8>()
        .ok()
        .filter(|point| (1..=points).contains(point))
}

/// The distribution over points at the token that spells `point`: every listed alternative
/// that spells a point adds its probability to that point (` 4` and `4` are one point), the
/// chosen token counted once; then normalised over the points. `None` when the token that
/// spells the point is not the first worded one (after an optional label).
fn point_probabilities(tokens: &[TokenLogprob], point: u8, points: u8) -> Option<Vec<f64>> {
    let chosen = answer_tokens(tokens, &SCORE_LABELS).first()?;
    if point_of(token_word(&chosen.text()), points) != Some(point) {
        return None;
    }
    let mut mass = vec![0.0; usize::from(points)];
    let mut chosen_listed = false;
    for alternative in &chosen.top {
        chosen_listed |= alternative.bytes == chosen.bytes;
        if let Some(at) = point_of(token_word(&alternative.text()), points) {
            mass[usize::from(at) - 1] += f64::from(alternative.logprob).exp();
        }
    }
    if !chosen_listed {
        mass[usize::from(point) - 1] += f64::from(chosen.logprob).exp();
    }
    let total: f64 = mass.iter().sum();
    if !(total.is_finite() && total >= MIN_POINT_MASS) {
        return None;
    }
    Some(mass.into_iter().map(|p| p / total).collect())
}

impl ScoreReading {
    /// The probability-weighted point; the point itself without a distribution.
    pub fn expected(&self) -> f64 {
        match &self.probabilities {
            Some(probabilities) => expected_point(probabilities),
            None => f64::from(self.point),
        }
    }

    /// The sample as triage reads a judge: pass when the probability of passing is above one
    /// half (the point itself decides an exact half, or without logprobs), with the
    /// probability of the verdict given as confidence.
    pub fn judge_reading(&self, scale: &JudgeScale) -> JudgeReading {
        let point_passes = self.point >= scale.pass_at_least;
        match &self.probabilities {
            Some(probabilities) => {
                let pass_probability = pass_probability(probabilities, scale.pass_at_least);
                let pass = if pass_probability == 0.5 {
                    point_passes
                } else {
                    pass_probability > 0.5
                };
                JudgeReading {
                    pass: Some(pass),
                    confidence: Some(if pass {
                        pass_probability
                    } else {
                        1.0 - pass_probability
                    }),
                }
            }
            None => JudgeReading {
                pass: Some(point_passes),
                confidence: None,
            },
        }
    }
}

fn expected_point(probabilities: &[f64]) -> f64 {
    probabilities
        .iter()
        .enumerate()
        .map(|(index, p)| (index + 1) as f64 * p)
        .sum()
}

/// Probability mass on points at or above `pass_at_least`.
pub fn pass_probability(probabilities: &[f64], pass_at_least: u8) -> f64 {
    probabilities
        .iter()
        .skip(usize::from(pass_at_least.max(1)) - 1)
        .sum::<f64>()
        .clamp(0.0, 1.0)
}

/// What a judge's samples said on the scale together, as a grade records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoreRecord {
    /// The judge's most likely point: the likeliest point of the mean distribution, or the
    /// median of the samples' points (the lower one of a tie) when a sample had no
    /// distribution. The verdict follows the probability of passing, not this point, so a grade
    /// may show point 4 (passing from 4) with a fail when points below it together weigh more.
    pub point: u8,
    /// The mean over samples of each sample's expected point.
    pub expected: f64,
    /// The samples' mean distribution over the points, when every sample had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probabilities: Option<Vec<f64>>,
}

/// Combines the samples that gave a point; `None` when none did.
pub fn combine_scores(samples: &[ScoreReading]) -> Option<ScoreRecord> {
    if samples.is_empty() {
        return None;
    }
    let expected = samples.iter().map(ScoreReading::expected).sum::<f64>() / samples.len() as f64;
    let probabilities = samples
        .iter()
        .map(|sample| sample.probabilities.clone())
        .collect::<Option<Vec<_>>>()
        .map(|all| {
            let mut mean = vec![0.0; all[0].len()];
            for distribution in &all {
                for (total, p) in mean.iter_mut().zip(distribution) {
                    *total += p / all.len() as f64;
                }
            }
            mean
        });
    let point = match &probabilities {
        Some(mean) => {
            let mut best = 0;
            for (index, p) in mean.iter().enumerate() {
                if *p > mean[best] {
                    best = index;
                }
            }
            best as u8 + 1
        }
        None => {
            let mut points: Vec<u8> = samples.iter().map(|sample| sample.point).collect();
            points.sort_unstable();
            points[(points.len() - 1) / 2]
        }
    };
    Some(ScoreRecord {
        point,
        expected,
        probabilities,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::rubric::{Anchor, VerdictRule};
    use crate::logprobs::test_token as token;

    fn scale(points: u8, pass_at_least: u8) -> JudgeScale {
        JudgeScale {
            rubric_id: 1,
            rubric_name: "quality".into(),
            rubric_version: 2,
            dimension: "helpfulness".into(),
            points,
            pass_at_least,
        }
    }

    #[test]
    fn the_expected_score_weighs_every_point_by_its_probability() {
        // G-Eval: 0.5 on 4, 0.3 on 5, 0.2 on 3 (and 0.0-ish off the scale) → 4.1.
        let tokens = [
            token(
                "4",
                0.5,
                &[
                    ("4", 0.5),
                    ("5", 0.3),
                    (" 3", 0.1),
                    ("3", 0.1),
                    ("The", 0.05),
                ],
            ),
            token(" because", 0.9, &[]),
        ];
        let reading = read_score("4 because it helps", Some(&tokens), &scale(5, 4)).unwrap();
        assert_eq!(reading.point, 4);
        let p = reading.probabilities.clone().unwrap();
        // Normalised over the points: the off-scale "The" is not a point.
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!((p[2] - 0.2).abs() < 1e-6 && (p[3] - 0.5).abs() < 1e-6);
        assert!((reading.expected() - (3.0 * 0.2 + 4.0 * 0.5 + 5.0 * 0.3)).abs() < 1e-6);
        // Passing from 4: P(pass) = 0.8, the verdict pass with that confidence.
        let judged = reading.judge_reading(&scale(5, 4));
        assert_eq!(judged.pass, Some(true));
        assert!((judged.confidence.unwrap() - 0.8).abs() < 1e-6);
        // Passing from 5: the greedy point 4 fails, and P(fail) = 0.7.
        let judged = reading.judge_reading(&scale(5, 5));
        assert_eq!(judged.pass, Some(false));
        assert!((judged.confidence.unwrap() - 0.7).abs() < 1e-6);
    }

    #[test]
    fn the_verdict_follows_the_probability_not_the_greedy_point() {
        // Greedy 4 (passes at 4), but 3 and 2 together outweigh 4 and 5.
        let tokens = [token("4", 0.4, &[("4", 0.4), ("3", 0.35), ("2", 0.25)])];
        let reading = read_score("4", Some(&tokens), &scale(5, 4)).unwrap();
        let judged = reading.judge_reading(&scale(5, 4));
        assert_eq!(judged.pass, Some(false));
        assert!((judged.confidence.unwrap() - 0.6).abs() < 1e-6);
    }

    #[test]
    fn a_point_is_the_first_word_whole() {
        let five = scale(5, 4);
        assert_eq!(read_score("Score: 3\nok", None, &five).unwrap().point, 3);
        assert_eq!(read_score("**5** - great", None, &five).unwrap().point, 5);
        assert_eq!(read_score("4/5", None, &five).unwrap().point, 4);
        assert_eq!(read_score("Rating 3", None, &five).unwrap().point, 3);
        assert_eq!(read_score("4 out of 5.", None, &five).unwrap().point, 4);
        assert_eq!(read_score("4 / 5", None, &five).unwrap().point, 4);
        for refused in [
            "3.5",
            "6",
            "0",
            "03",
            "The answer is 4",
            "",
            "four",
            // Another scale's number, a range, or the range named before the point.
            "5/10",
            "3/10",
            "4 out of 10",
            "3-4",
            "3–4",
            "3 - 4",
            "3 to 4",
            "-2",
            "Score (1-5): 4",
        ] {
            assert_eq!(read_score(refused, None, &five), None, "{refused}");
        }
        // Without logprobs the point alone decides, with no confidence.
        let reading = read_score("2", None, &five).unwrap();
        assert_eq!(reading.expected(), 2.0);
        assert_eq!(
            reading.judge_reading(&five),
            JudgeReading {
                pass: Some(false),
                confidence: None
            }
        );
    }

    #[test]
    fn logprobs_count_only_at_the_points_token() {
        let five = scale(5, 4);
        // Label first, its punctuation, then the point.
        let tokens = [
            token("Score", 0.9, &[]),
            token(":", 0.9, &[]),
            token(" 2", 0.6, &[(" 2", 0.6), (" 1", 0.4)]),
        ];
        let close = |reading: ScoreReading, expected: [f64; 5]| {
            let got = reading.probabilities.unwrap();
            assert!(
                got.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-6),
                "{got:?}"
            );
        };
        close(
            read_score("Score: 2", Some(&tokens), &five).unwrap(),
            [0.4, 0.6, 0.0, 0.0, 0.0],
        );
        // The chosen token missing from its own list still counts.
        let tokens = [token("5", 0.5, &[("4", 0.5)])];
        close(
            read_score("5", Some(&tokens), &five).unwrap(),
            [0.0, 0.0, 0.0, 0.5, 0.5],
        );
        // Tokens that spell something else say nothing about the point.
        let tokens = [token("Four", 0.5, &[])];
        assert_eq!(point_probabilities(&tokens, 4, 5), None);
        // Most of the mass off the scale: the point stands, its distribution is not read.
        let tokens = [token("4", 0.3, &[("**", 0.6), ("4", 0.3), ("5", 0.05)])];
        let reading = read_score("4", Some(&tokens), &five).unwrap();
        assert_eq!((reading.point, reading.probabilities), (4, None));
    }

    #[test]
    fn samples_combine_into_a_mean_distribution() {
        let five = scale(5, 4);
        let a = ScoreReading {
            point: 4,
            probabilities: Some(vec![0.0, 0.0, 0.2, 0.6, 0.2]),
        };
        let b = ScoreReading {
            point: 3,
            probabilities: Some(vec![0.0, 0.0, 0.6, 0.4, 0.0]),
        };
        let combined = combine_scores(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(combined.point, 4);
        assert!((combined.expected - (4.0 + 3.4) / 2.0).abs() < 1e-9);
        assert_eq!(combined.probabilities.as_ref().unwrap()[2], 0.4);
        // A sample without logprobs: the median point, the lower of a tie.
        let bare = ScoreReading {
            point: 2,
            probabilities: None,
        };
        let combined = combine_scores(&[bare, b]).unwrap();
        assert_eq!((combined.point, combined.probabilities), (2, None));
        assert_eq!(combine_scores(&[]), None);
        assert!(five.describe().contains("helpfulness, 1–5, passes at 4"));
    }

    #[test]
    fn a_judge_scores_an_ordinal_dimension_of_at_most_nine_points() {
        let anchors = |n: usize| -> Vec<Anchor> {
            (1..=n)
                .map(|point| Anchor {
                    label: format!("p{point}"),
                    description: format!("level {point}"),
                })
                .collect()
        };
        let mut rubric = Rubric::pass_fail("Right?");
        rubric.dimensions.push(Dimension {
            key: "helpfulness".into(),
            question: "How helpful is it?".into(),
            kind: DimensionKind::Ordinal { scale: anchors(5) },
            required: true,
        });
        rubric.dimensions.push(Dimension {
            key: "wide".into(),
            question: "Wide?".into(),
            kind: DimensionKind::Ordinal { scale: anchors(10) },
            required: true,
        });
        let id = (7, "quality", 3);
        let made = JudgeScale::of_rubric(id, &rubric, "helpfulness", Some(4)).unwrap();
        assert_eq!((made.points, made.pass_at_least, made.rubric_id), (5, 4, 7));
        // The pass point comes from the rubric when its verdict is on this dimension.
        rubric.verdict = Some(VerdictRule {
            dimension: "helpfulness".into(),
            pass_at_least: Some(3.0),
        });
        assert_eq!(
            JudgeScale::of_rubric(id, &rubric, "helpfulness", None)
                .unwrap()
                .pass_at_least,
            3
        );
        for (key, pass, expected) in [
            ("correct", None, "not an ordinal scale"),
            ("wide", Some(5), "scales of 2 to 9 points"),
            ("missing", None, "has no dimension `missing`"),
            ("helpfulness", Some(6), "from 2 to 5"),
            ("helpfulness", Some(1), "from 2 to 5"),
        ] {
            let refused = JudgeScale::of_rubric(id, &rubric, key, pass).unwrap_err();
            assert!(refused.contains(expected), "{key}: {refused}");
        }
        rubric.verdict = None;
        let refused = JudgeScale::of_rubric(id, &rubric, "helpfulness", None).unwrap_err();
        assert!(refused.contains("from which point"), "{refused}");
        // The default prompt holds every anchor and the placeholders a judge prompt needs.
        let prompt = made.default_prompt(rubric.dimension("helpfulness").unwrap());
        assert!(prompt.contains("scale of 1 to 5") && prompt.contains("5 — p5: level 5"));
        assert!(super::super::judge::validate_rubric(&prompt).is_ok());
        assert!(made.check_prompt(&prompt).is_ok());
        let refused = made
            .check_prompt(super::super::judge::DEFAULT_RUBRIC)
            .unwrap_err();
        assert!(refused.contains("asks for PASS or FAIL"), "{refused}");
    }

    #[test]
    fn a_judge_in_triage_decides_the_rubrics_own_verdict() {
        let rubric = |dimension: &str, pass: Option<f64>, points: usize| Rubric {
            dimensions: vec![Dimension {
                key: "helpfulness".into(),
                question: "Helpful?".into(),
                kind: DimensionKind::Ordinal {
                    scale: (1..=points)
                        .map(|point| Anchor {
                            label: format!("p{point}"),
                            description: "d".into(),
                        })
                        .collect(),
                },
                required: true,
            }],
            verdict: Some(VerdictRule {
                dimension: dimension.into(),
                pass_at_least: pass,
            }),
        };
        let judge = scale(5, 4);
        assert!(judge
            .check_decides("quality", &rubric("helpfulness", Some(4.0), 5))
            .is_ok());
        for (name, rubric, says) in [
            (
                "other",
                rubric("helpfulness", Some(4.0), 5),
                "raters answer rubric `other`",
            ),
            (
                "quality",
                rubric("correct", None, 5),
                "verdict comes from `correct`",
            ),
            (
                "quality",
                rubric("helpfulness", Some(3.0), 5),
                "passes from 3",
            ),
            (
                "quality",
                rubric("helpfulness", Some(4.0), 7),
                "changed that scale",
            ),
        ] {
            let refused = judge.check_decides(name, &rubric).unwrap_err();
            assert!(refused.contains(says), "{refused}");
        }
    }
}
