//! What a rolling-likelihood eval reports instead of a pass rate: lm-eval's corpus metrics for
//! `loglikelihood_rolling` tasks (word perplexity, byte perplexity, bits per byte: the summed
//! log-likelihood over the summed words or bytes of every document, so long documents weigh
//! more), the token perplexity (tokenizer-dependent, so comparable only between checkpoints
//! that share one), and a bootstrap interval over documents for bits per byte, which lm-eval
//! leaves out. A comparison adds a paired bootstrap of the difference in bits per byte over the
//! documents both runs scored.
//!
//! Scoring is deterministic, so a document's repetitions are one score: the first is used.
//!
//! Pure: the scores come from the store.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::rolling::{bits_per_byte, perplexity, RollingScore};
use crate::stats::paired::{grouped_bootstrap, ScoreGroup};
use crate::stats::{Interval, DEFAULT_CONFIDENCE};

/// Resamples of the bootstrap intervals.
const RESAMPLES: usize = 1000;
/// Seeds of the bootstraps, so a report reads the same every time.
const SEED: u64 = 0x726f_6c6c;

/// A rolling run's corpus metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RollingReport {
    /// Documents scored (one per case); errors are left out and counted in the run's errors.
    pub documents: u64,
    pub tokens: u64,
    pub words: u64,
    pub bytes: u64,
    /// Requests the documents took.
    pub windows: u64,
    /// Natural-log likelihood of the whole corpus.
    pub logprob: f64,
    /// `exp(-logprob / words)`: lm-eval's `word_perplexity`.
    pub word_perplexity: Option<f64>,
    /// `exp(-logprob / bytes)`: lm-eval's `byte_perplexity`.
    pub byte_perplexity: Option<f64>,
    /// `-logprob / bytes / ln 2`: lm-eval's `bits_per_byte`.
    pub bits_per_byte: Option<f64>,
    /// 95% percentile bootstrap interval of bits per byte, resampling documents.
    pub bits_per_byte_interval: Option<Interval>,
    /// `exp(-logprob / tokens)`: depends on the tokenizer.
    pub token_perplexity: Option<f64>,
}

/// The first repetition's score of each case, in the order the cases come (the store gives
/// dataset order, in which lm-eval adds documents up, so the sums agree to the last bit with
/// Python before 3.12, whose `sum()` compensates).
fn per_document(rows: &[(String, i64, RollingScore)]) -> Vec<(&str, &RollingScore)> {
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut documents: Vec<(&str, i64, &RollingScore)> = Vec::new();
    for (case, repetition, score) in rows {
        match at.get(case.as_str()) {
            Some(&index) if documents[index].1 <= *repetition => {}
            Some(&index) => documents[index] = (case, *repetition, score),
            None => {
                at.insert(case, documents.len());
                documents.push((case, *repetition, score));
            }
        }
    }
    documents
        .into_iter()
        .map(|(case, _, score)| (case, score))
        .collect()
}

/// The corpus metrics over a run's scored documents; `None` without any.
pub fn rolling_report(rows: &[(String, i64, RollingScore)]) -> Option<RollingReport> {
    let documents = per_document(rows);
    if documents.is_empty() {
        return None;
    }
    let logprob: f64 = documents.iter().map(|(_, score)| score.logprob).sum();
    let total =
        |unit: fn(&RollingScore) -> u64| documents.iter().map(|(_, s)| unit(s)).sum::<u64>();
    let (tokens, words, bytes) = (total(|s| s.tokens), total(|s| s.words), total(|s| s.bytes));
    let bits: Vec<ScoreGroup> = documents
        .iter()
        .map(|(_, score)| ScoreGroup {
            score: -score.logprob / std::f64::consts::LN_2,
            weight: score.bytes as f64,
            cases: 1,
        })
        .collect();
    let bits_per_byte_interval = (documents.len() > 1)
        .then(|| grouped_bootstrap(&bits, RESAMPLES, DEFAULT_CONFIDENCE, SEED))
        .flatten()
        .map(|result| result.interval);
    Some(RollingReport {
        documents: documents.len() as u64,
        tokens,
        words,
        bytes,
        windows: total(|s| s.windows),
        logprob,
        word_perplexity: perplexity(logprob, words),
        byte_perplexity: perplexity(logprob, bytes),
        bits_per_byte: bits_per_byte(logprob, bytes),
        bits_per_byte_interval,
        token_perplexity: perplexity(logprob, tokens),
    })
}

/// A paired comparison of bits per byte between two runs over the documents both scored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PairedBitsPerByte {
    /// Documents both runs scored.
    pub documents: u64,
    pub baseline: f64,
    pub candidate: f64,
    /// Candidate minus baseline (lower is better).
    pub difference: f64,
    /// 95% paired percentile bootstrap interval of the difference, resampling documents.
    pub interval: Option<Interval>,
    /// Two-sided bootstrap p-value against no difference.
    pub p_value: Option<f64>,
    /// Documents the candidate scored better (higher log-likelihood) than the baseline.
    pub candidate_better: u64,
}

impl PairedBitsPerByte {
    /// The candidate has more bits per byte than the baseline beyond the interval's doubt.
    pub fn is_regression(&self) -> bool {
        self.interval.is_some_and(|interval| interval.lower > 0.0)
    }

    /// The candidate has fewer bits per byte beyond the interval's doubt.
    pub fn is_improvement(&self) -> bool {
        self.interval.is_some_and(|interval| interval.upper < 0.0)
    }
}

/// The paired test of bits per byte over shared documents; `None` when they share none (or
/// their text has no bytes).
pub fn paired_bits_per_byte(
    baseline: &[(String, i64, RollingScore)],
    candidate: &[(String, i64, RollingScore)],
) -> Option<PairedBitsPerByte> {
    let before: HashMap<&str, &RollingScore> = per_document(baseline).into_iter().collect();
    let shared: Vec<(&RollingScore, &RollingScore)> = per_document(candidate)
        .into_iter()
        .filter_map(|(case, score)| before.get(case).map(|old| (*old, score)))
        .collect();
    let bytes: u64 = shared.iter().map(|(old, _)| old.bytes).sum();
    let sum = |pick: fn(&(&RollingScore, &RollingScore)) -> f64| shared.iter().map(pick).sum();
    let baseline = bits_per_byte(sum(|(old, _)| old.logprob), bytes)?;
    let candidate = bits_per_byte(sum(|(_, new)| new.logprob), bytes)?;
    let differences: Vec<ScoreGroup> = shared
        .iter()
        .map(|(old, new)| ScoreGroup {
            score: (old.logprob - new.logprob) / std::f64::consts::LN_2,
            weight: old.bytes as f64,
            cases: 1,
        })
        .collect();
    let bootstrap = (shared.len() > 1)
        .then(|| grouped_bootstrap(&differences, RESAMPLES, DEFAULT_CONFIDENCE, SEED))
        .flatten();
    Some(PairedBitsPerByte {
        documents: shared.len() as u64,
        baseline,
        candidate,
        difference: candidate - baseline,
        interval: bootstrap.map(|result| result.interval),
        p_value: bootstrap.map(|result| result.p_value),
        candidate_better: shared
            .iter()
            .filter(|(old, new)| new.logprob > old.logprob)
            .count() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(logprob: f64, tokens: u64, bytes: u64, words: u64) -> RollingScore {
        RollingScore {
            logprob,
            tokens,
            bytes,
            words,
            windows: 1,
        }
    }

    fn row(case: &str, repetition: i64, score: RollingScore) -> (String, i64, RollingScore) {
        (case.to_string(), repetition, score)
    }

    #[test]
    fn corpus_metrics_weigh_documents_by_their_units_as_lm_eval() {
        let rows = vec![
            row("a", 0, score(-10.0, 5, 20, 4)),
            row("b", 0, score(-30.0, 15, 40, 8)),
            // A repetition scores the same text again: counted once.
            row("b", 1, score(-30.0, 15, 40, 8)),
        ];
        let report = rolling_report(&rows).unwrap();
        assert_eq!(
            (report.documents, report.tokens, report.bytes, report.words),
            (2, 20, 60, 12)
        );
        // lm-eval's weighted_perplexity: exp(-Σll / Σunits), not a mean of perplexities.
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(
            report.word_perplexity.unwrap(),
            (40.0f64 / 12.0).exp()
        ));
        assert!(close(
            report.byte_perplexity.unwrap(),
            (40.0f64 / 60.0).exp()
        ));
        assert!(close(
            report.bits_per_byte.unwrap(),
            40.0 / 60.0 / std::f64::consts::LN_2
        ));
        assert!(close(report.token_perplexity.unwrap(), 2.0f64.exp()));
        let interval = report.bits_per_byte_interval.unwrap();
        assert!(interval.lower <= report.bits_per_byte.unwrap());
        assert!(interval.upper >= report.bits_per_byte.unwrap());
        assert_eq!(rolling_report(&[]), None);
    }

    #[test]
    fn a_model_better_on_every_document_has_lower_bits_per_byte() {
        let baseline: Vec<_> = (0..30)
            .map(|i| row(&format!("d{i:02}"), 0, score(-40.0 - i as f64, 20, 50, 10)))
            .collect();
        let candidate: Vec<_> = (0..30)
            .map(|i| row(&format!("d{i:02}"), 0, score(-30.0 - i as f64, 20, 50, 10)))
            .chain(std::iter::once(row("only-here", 0, score(-1.0, 1, 1, 1))))
            .collect();
        let paired = paired_bits_per_byte(&baseline, &candidate).unwrap();
        assert_eq!((paired.documents, paired.candidate_better), (30, 30));
        assert!(paired.difference < 0.0);
        let expected = -10.0 / 50.0 / std::f64::consts::LN_2;
        assert!((paired.difference - expected).abs() < 1e-12);
        let interval = paired.interval.unwrap();
        assert!(interval.upper < 0.0, "{interval:?}");
        assert!(paired.p_value.unwrap() < 0.01);
        assert!(paired.is_improvement() && !paired.is_regression());
        let reversed = paired_bits_per_byte(&candidate, &baseline).unwrap();
        assert!(reversed.is_regression() && !reversed.is_improvement());
        // The same scores on both sides: no difference.
        let same = paired_bits_per_byte(&baseline, &baseline).unwrap();
        assert_eq!((same.difference, same.candidate_better), (0.0, 0));
        assert!(paired_bits_per_byte(&baseline, &[]).is_none());
    }
}
