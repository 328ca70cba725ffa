//! Judge calibration against human labels.
//!
//! An LLM judge returns a binary verdict (pass/fail) together with a
//! confidence in `[0.5, 1.0]`: the probability it assigns to *its own*
//! verdict being right. Humans later label some of the same items. This
//! module answers three questions about those labelled items:
//!
//! * Does the judge's confidence mean what it says? ([`reliability_bins`],
//!   and the expected calibration error in [`judge_accuracy`]).
//! * How often does the judge agree with humans, beyond chance?
//!   ([`judge_accuracy`], [`cohen_kappa_binary`]).
//! * Above which confidence can verdicts be auto-accepted without a human,
//!   for a given tolerated error rate? ([`recalibrate_accept_threshold`]).
//!
//! # Weighting
//!
//! The labelled items are not a random sample of the judge's verdicts.
//! Triage sends *every* verdict the judge was unsure about to a human, but
//! only a random audit share (say 2%) of the verdicts it was sure about. An
//! unweighted statistic would therefore count the unsure band about fifty
//! times too heavily and describe the labelled sample instead of the judge.
//!
//! So each item carries a `weight`: the inverse of the probability that it
//! was sent to a human, i.e. roughly how many judged verdicts it stands
//! for. Every rate and mean here is inverse-probability weighted (the ratio,
//! or Hájek, form of the Horvitz–Thompson estimator: weighted sums divided
//! by the total weight), so it estimates the judge's behaviour on all judged
//! traffic. Because every estimate is a ratio, only the weights *relative to
//! each other* matter; multiplying them all by one factor changes nothing.
//! Item *counts* (`count`, `items`, `items_used`, `items_above`, and the
//! `min_items_above` guard) stay raw numbers of labelled items, because they
//! say how much evidence a number rests on, and weighting does not add
//! evidence.
//!
//! # Malformed input
//!
//! Handling is uniform across the module, so every labelled item is counted
//! exactly once everywhere instead of silently dropping malformed rows from
//! some statistics but not others:
//!
//! * Confidence values below 0.5, NaN and negative infinity are treated as
//!   0.5 (a verdict that is no better than a coin flip), and values above
//!   1.0 are treated as 1.0.
//! * A weight that is NaN, infinite, zero or negative is a caller bug (no
//!   sampling probability produces it). Rather than fail a whole report over
//!   one bad row, the item counts with weight 1.0: the weight of an
//!   escalated item, and the smallest a genuine inverse probability can be,
//!   so a bad row still counts once but cannot dominate the estimates.

use serde::{Deserialize, Serialize};

/// Lowest meaningful confidence for a binary verdict: below this the judge
/// would have been more confident in the opposite verdict.
const MIN_CONFIDENCE: f64 = 0.5;
/// Highest possible confidence.
const MAX_CONFIDENCE: f64 = 1.0;
/// Number of bins used for the expected calibration error. Ten is the
/// customary choice, which keeps our numbers comparable with published ECEs.
const ECE_BINS: usize = 10;
/// Weight used in place of an unusable one (see the module docs).
const FALLBACK_WEIGHT: f64 = 1.0;
/// Kappa is reported as undefined when the room it has above chance,
/// `1 - pe`, is at most this much.
///
/// Exactly zero would be the mathematical rule, but with weighted sums `pe`
/// is computed in floating point, and when the dissenting weight is tiny
/// the difference `1 - pe` is mostly rounding error, which kappa then
/// divides by. `1e-12` sits far above that rounding (about `1e-16`) and far
/// below the `1/n` that one dissenting item produces among `n` items of
/// equal weight, so with equal weights the answer matches the exact integer
/// rule of [`cohen_kappa_binary`] for any realistic `n` (below about
/// `10^12` items).
const KAPPA_UNDEFINED_EPSILON: f64 = 1e-12;

/// One item that has both a judge verdict and a human label.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelledJudgement {
    /// The judge's probability that its own verdict is correct, in `[0.5, 1.0]`.
    pub confidence: f64,
    /// The judge's verdict.
    pub judge_pass: bool,
    /// The human's verdict, taken as ground truth.
    pub human_pass: bool,
    /// Inverse of the probability that this verdict was sent to a human:
    /// 1.0 for an escalation (always labelled), `1 / audit_rate` for a
    /// verdict drawn for the random audit. Must be finite and positive (see
    /// the module docs for what happens otherwise). Deliberately has no
    /// serde default: a silent 1.0 would bring back exactly the bias the
    /// weight exists to remove.
    pub weight: f64,
}

impl LabelledJudgement {
    /// Whether the judge agreed with the human on this item.
    fn is_correct(&self) -> bool {
        self.judge_pass == self.human_pass
    }

    /// The confidence after the module-wide normalisation (see module docs).
    fn normalised_confidence(&self) -> f64 {
        normalise_confidence(self.confidence)
    }

    /// The weight after the module-wide normalisation (see module docs).
    fn normalised_weight(&self) -> f64 {
        normalise_weight(self.weight)
    }
}

/// Maps any `f64` into `[0.5, 1.0]`. NaN becomes 0.5 because a confidence
/// we cannot read carries no more information than a coin flip.
fn normalise_confidence(confidence: f64) -> f64 {
    if confidence.is_nan() {
        MIN_CONFIDENCE
    } else {
        confidence.clamp(MIN_CONFIDENCE, MAX_CONFIDENCE)
    }
}

/// Keeps a finite, positive weight and replaces anything else with
/// [`FALLBACK_WEIGHT`]. Weights below 1.0 are kept: they cannot be inverse
/// probabilities, but weights rescaled by a common factor are legitimate
/// and give the same estimates.
fn normalise_weight(weight: f64) -> f64 {
    if weight.is_finite() && weight > 0.0 {
        weight
    } else {
        FALLBACK_WEIGHT
    }
}

/// Each item's normalised weight divided by the largest one, in item order.
///
/// Every estimate is a ratio of weighted sums, so a common factor changes
/// nothing, and dividing by the largest weight keeps each weight in
/// `(0, 1]` and every sum at most the number of items: no caller weight,
/// however large, can overflow a sum to infinity and turn a ratio into NaN.
/// The floor at the smallest normal `f64` stops a weight that is tiny
/// compared with the largest from underflowing to zero, which would leave a
/// non-empty bin with no weight. When all weights are equal every relative
/// weight is exactly 1.0, so the results are bit-for-bit the unweighted ones.
fn relative_weights(items: &[LabelledJudgement]) -> Vec<f64> {
    let largest = items
        .iter()
        .map(LabelledJudgement::normalised_weight)
        .fold(0.0, f64::max);
    items
        .iter()
        .map(|item| (item.normalised_weight() / largest).max(f64::MIN_POSITIVE))
        .collect()
}

/// `weighted_sum / total_weight`, or `None` when there is no weight to
/// average over (an empty set).
fn weighted_mean(weighted_sum: f64, total_weight: f64) -> Option<f64> {
    (total_weight > 0.0).then(|| weighted_sum / total_weight)
}

/// One bar of a reliability diagram: the items whose confidence fell in
/// `[lower, upper)` (the last bin also includes `upper == 1.0`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    /// Inclusive lower edge.
    pub lower: f64,
    /// Exclusive upper edge, except for the last bin where it is inclusive.
    pub upper: f64,
    /// Number of labelled items in the bin: a raw count, not a weighted
    /// one, because it says how much evidence stands behind the bin.
    pub count: u64,
    /// Weighted mean confidence of the items in the bin; `None` when the
    /// bin is empty so an empty bin can never be mistaken for a real
    /// measurement.
    pub mean_confidence: Option<f64>,
    /// Weighted fraction of the bin's items where the judge agreed with the
    /// human: an estimate for all judged verdicts in the bin, not only the
    /// labelled ones. `None` when the bin is empty.
    pub accuracy: Option<f64>,
}

/// Lower edge of bin `index` out of `bins` equal-width bins over `[0.5, 1.0]`.
///
/// Computed the same way for the reported edges and for the assignment of
/// items, so an item sitting exactly on an edge always lands in the bin
/// whose reported `lower` equals it.
fn bin_lower_edge(index: usize, bins: usize) -> f64 {
    MIN_CONFIDENCE + (MAX_CONFIDENCE - MIN_CONFIDENCE) * index as f64 / bins as f64
}

/// Index of the bin holding `confidence` (already normalised), for `bins > 0`.
fn bin_index(confidence: f64, bins: usize) -> usize {
    let width = (MAX_CONFIDENCE - MIN_CONFIDENCE) / bins as f64;
    // The division gives the right answer except within a rounding error of
    // an edge; the two loops below settle those cases against the exact
    // edges reported to callers.
    let estimate = ((confidence - MIN_CONFIDENCE) / width).floor();
    let mut index = if estimate.is_finite() && estimate > 0.0 {
        (estimate as usize).min(bins - 1)
    } else {
        0
    };
    while index + 1 < bins && confidence >= bin_lower_edge(index + 1, bins) {
        index += 1;
    }
    while index > 0 && confidence < bin_lower_edge(index, bins) {
        index -= 1;
    }
    index
}

/// Running totals for one bin while items are being assigned.
#[derive(Default, Clone, Copy)]
struct BinTotals {
    count: u64,
    weight: f64,
    weighted_confidence: f64,
    weighted_correct: f64,
}

impl BinTotals {
    fn mean_confidence(&self) -> Option<f64> {
        weighted_mean(self.weighted_confidence, self.weight)
    }

    fn accuracy(&self) -> Option<f64> {
        weighted_mean(self.weighted_correct, self.weight)
    }
}

/// Assigns items (with their relative weights, see [`relative_weights`])
/// to `bins` equal-width bins, for `bins > 0`.
fn bin_totals(items: &[LabelledJudgement], weights: &[f64], bins: usize) -> Vec<BinTotals> {
    let mut totals = vec![BinTotals::default(); bins];
    for (item, &weight) in items.iter().zip(weights) {
        let confidence = item.normalised_confidence();
        let bin = &mut totals[bin_index(confidence, bins)];
        bin.count += 1;
        bin.weight += weight;
        bin.weighted_confidence += weight * confidence;
        if item.is_correct() {
            bin.weighted_correct += weight;
        }
    }
    totals
}

/// Groups items into `bins` equal-width confidence bins over `[0.5, 1.0]`.
///
/// Every bin is returned, empty ones included (with `count == 0` and `None`
/// statistics), so a chart or table always has the same shape and gaps in
/// the data are visible. `bins == 0` returns an empty vector.
pub fn reliability_bins(items: &[LabelledJudgement], bins: usize) -> Vec<ReliabilityBin> {
    if bins == 0 {
        return Vec::new();
    }
    bin_totals(items, &relative_weights(items), bins)
        .iter()
        .enumerate()
        .map(|(index, bin)| finish_bin(index, bins, bin))
        .collect()
}

/// Turns running totals into the reported bin.
fn finish_bin(index: usize, bins: usize, totals: &BinTotals) -> ReliabilityBin {
    ReliabilityBin {
        lower: bin_lower_edge(index, bins),
        upper: bin_lower_edge(index + 1, bins),
        count: totals.count,
        mean_confidence: totals.mean_confidence(),
        accuracy: totals.accuracy(),
    }
}

/// Summary of how well the judge matches human labels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct JudgeAccuracy {
    /// Number of labelled items the summary is based on (a raw count).
    pub items: u64,
    /// Weighted fraction of items where the judge agreed with the human, an
    /// estimate for all judged verdicts; `None` with no items.
    pub accuracy: Option<f64>,
    /// Cohen's kappa between judge and human verdicts, from the weighted
    /// 2x2 table; `None` when it is undefined (no items, or chance agreement
    /// is already perfect: both sides gave one and the same verdict to
    /// every item, up to a `1e-12` tolerance explained in the source).
    pub kappa: Option<f64>,
    /// Weighted expected calibration error over ten equal-width bins;
    /// `None` with no items.
    pub expected_calibration_error: Option<f64>,
}

/// Agreement, chance-corrected agreement and calibration of the judge.
///
/// Raw accuracy alone flatters a judge when most items pass: a judge that
/// always says "pass" looks good. Kappa corrects for that, and ECE says
/// whether the confidence numbers can be taken at face value. All three
/// are weighted (see the module docs), so they describe judged traffic
/// rather than the over-sampled unsure band.
pub fn judge_accuracy(items: &[LabelledJudgement]) -> JudgeAccuracy {
    let weights = relative_weights(items);
    let weighted = || items.iter().zip(weights.iter().copied());
    let total_weight: f64 = weights.iter().sum();
    let correct_weight: f64 = weighted()
        .filter(|(item, _)| item.is_correct())
        .map(|(_, weight)| weight)
        .sum();
    let kappa = weighted_cohen_kappa_binary(
        weighted().map(|(item, weight)| (item.judge_pass, item.human_pass, weight)),
    );
    JudgeAccuracy {
        items: items.len() as u64,
        accuracy: weighted_mean(correct_weight, total_weight),
        kappa,
        expected_calibration_error: expected_calibration_error(items, &weights),
    }
}

/// ECE: the weight-weighted mean gap between accuracy and mean confidence
/// over the non-empty bins. `None` with no items.
fn expected_calibration_error(items: &[LabelledJudgement], weights: &[f64]) -> Option<f64> {
    let bins = bin_totals(items, weights, ECE_BINS);
    let total_weight: f64 = bins.iter().map(|bin| bin.weight).sum();
    if total_weight <= 0.0 {
        return None;
    }
    let ece = bins
        .iter()
        .filter_map(|bin| {
            let gap = (bin.accuracy()? - bin.mean_confidence()?).abs();
            Some(bin.weight / total_weight * gap)
        })
        .sum();
    Some(ece)
}

/// Cohen's kappa for two raters giving binary verdicts, from
/// `(first_rater_pass, second_rater_pass)` pairs, each counting once.
///
/// Returns `None` when kappa is undefined: no pairs, or expected chance
/// agreement of exactly 1 (both raters gave the same single verdict to every
/// item). It never returns NaN and never reports 1.0 by convention for the
/// undefined case, because "both always said pass" says nothing about
/// whether the raters would agree on a fail.
///
/// The undefined check is done on integer counts, so it is exact rather than
/// subject to floating-point rounding. [`judge_accuracy`] uses a weighted
/// version of the same computation instead, which gives bit-for-bit the
/// same answer when all weights are equal.
pub fn cohen_kappa_binary(pairs: impl Iterator<Item = (bool, bool)>) -> Option<f64> {
    // 2x2 table: both pass, first only, second only, both fail.
    let (mut both_pass, mut first_only, mut second_only, mut both_fail) =
        (0u128, 0u128, 0u128, 0u128);
    for pair in pairs {
        match pair {
            (true, true) => both_pass += 1,
            (true, false) => first_only += 1,
            (false, true) => second_only += 1,
            (false, false) => both_fail += 1,
        }
    }
    let n = both_pass + first_only + second_only + both_fail;
    if n == 0 {
        return None;
    }
    // Everything scaled by n^2 to stay in integers:
    // observed = po * n^2, chance = pe * n^2.
    let n_squared = n * n;
    let observed = (both_pass + both_fail) * n;
    let chance = (both_pass + first_only) * (both_pass + second_only)
        + (second_only + both_fail) * (first_only + both_fail);
    if chance == n_squared {
        return None;
    }
    Some((observed as f64 - chance as f64) / (n_squared as f64 - chance as f64))
}

/// Cohen's kappa from `(first_rater_pass, second_rater_pass, weight)`
/// triples: [`cohen_kappa_binary`] on a 2x2 table of summed weights.
///
/// Weights are expected finite and positive (the callers pass
/// [`relative_weights`]). `None` when the table holds no weight, or when
/// `1 - pe` is at most [`KAPPA_UNDEFINED_EPSILON`]; never NaN. The
/// arithmetic mirrors the integer version step for step (scaled by the
/// total squared), which is what makes equal weights reproduce it exactly.
fn weighted_cohen_kappa_binary(triples: impl Iterator<Item = (bool, bool, f64)>) -> Option<f64> {
    let (mut both_pass, mut first_only, mut second_only, mut both_fail) = (0.0, 0.0, 0.0, 0.0);
    for (first, second, weight) in triples {
        match (first, second) {
            (true, true) => both_pass += weight,
            (true, false) => first_only += weight,
            (false, true) => second_only += weight,
            (false, false) => both_fail += weight,
        }
    }
    let total: f64 = both_pass + first_only + second_only + both_fail;
    if total.is_nan() || total <= 0.0 {
        return None;
    }
    let total_squared = total * total;
    let observed = (both_pass + both_fail) * total;
    let chance = (both_pass + first_only) * (both_pass + second_only)
        + (second_only + both_fail) * (first_only + both_fail);
    let room = total_squared - chance;
    // Written so that a NaN room also counts as undefined.
    if room.is_nan() || room <= KAPPA_UNDEFINED_EPSILON * total_squared {
        return None;
    }
    Some((observed - chance) / room)
}

/// A recommended auto-accept threshold and what it is expected to cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Recalibration {
    /// Verdicts with confidence `>=` this value can be accepted without a human.
    pub accept_threshold: f64,
    /// Weighted error rate (judge != human) among labelled items at or above
    /// the threshold: an estimate of the error rate among all judged
    /// verdicts the threshold would accept. A point estimate, not a bound:
    /// see [`recalibrate_accept_threshold`].
    pub expected_error_rate: f64,
    /// Estimated share of all judged traffic (not of the labelled items)
    /// with confidence at or above the threshold, i.e. the share that would
    /// skip human review: the labelled items' weight at or above the
    /// threshold divided by their total weight. Sound only as far as the
    /// weights are: every kind of judged verdict must have had some chance
    /// of being labelled.
    pub accepted_fraction: f64,
    /// Number of labelled items at or above the threshold (a raw count: the
    /// number `min_items_above` was checked against).
    pub items_above: u64,
    /// Number of labelled items the recommendation was computed from (all of
    /// them, not only those above the threshold).
    pub items_used: u64,
}

/// Error rate and size of the set accepted by one candidate threshold.
#[derive(Clone, Copy)]
struct Candidate {
    threshold: f64,
    /// Raw number of labelled items accepted.
    accepted: u64,
    /// Their total relative weight, and the part of it the judge got wrong.
    accepted_weight: f64,
    error_weight: f64,
}

impl Candidate {
    /// Weighted error rate. Every candidate accepts at least one item and
    /// relative weights are positive, so the division is always defined.
    fn error_rate(&self) -> f64 {
        self.error_weight / self.accepted_weight
    }
}

/// Chooses the lowest confidence threshold that keeps auto-accepted
/// verdicts within `target_error_rate`.
///
/// Candidates are the observed confidences. A threshold `t` qualifies when
/// the labelled items with confidence `>= t` number at least
/// `min_items_above` (a raw count, because it guards against deciding from
/// too little evidence, and a heavy weight is not more evidence) and their
/// weighted error rate is at most `target_error_rate`. Among qualifying
/// thresholds the lowest wins, because it auto-accepts the most verdicts and
/// so saves the most human review.
///
/// The error rate used is the weighted observed rate (a point estimate). It
/// is not a confidence bound, so with few items above the threshold the true
/// rate can be noticeably higher; `min_items_above` is the caller's guard
/// against deciding from too few items. Heavily weighted audit items make
/// the estimate noisier than the raw count suggests.
///
/// Every candidate is checked, not just until the first success, because the
/// error rate is not monotone in the threshold. Runs in O(n log n).
///
/// # Errors
/// A plain-English message when `items` is empty, when `target_error_rate`
/// is not strictly between 0 and 1, or when no threshold qualifies (the
/// message then gives the best error rate that was achievable).
pub fn recalibrate_accept_threshold(
    items: &[LabelledJudgement],
    target_error_rate: f64,
    min_items_above: u64,
) -> Result<Recalibration, String> {
    if items.is_empty() {
        return Err("cannot recalibrate: there are no human-labelled items yet".to_string());
    }
    if !(target_error_rate > 0.0 && target_error_rate < 1.0) {
        return Err(format!(
            "the target error rate must be strictly between 0 and 1, got {target_error_rate}"
        ));
    }
    let candidates = threshold_candidates(items);
    // The lowest candidate accepts everything; taking the total from it
    // (same items, same summation order) makes its fraction exactly 1.0.
    let total_weight = candidates.last().map_or(0.0, |c| c.accepted_weight);
    let large_enough = || candidates.iter().filter(|c| c.accepted >= min_items_above);
    // Candidates run from the highest threshold to the lowest, so searching
    // from the back finds the lowest qualifying threshold first.
    let chosen = large_enough()
        .rev()
        .find(|c| c.error_rate() <= target_error_rate);
    match chosen {
        Some(candidate) => Ok(Recalibration {
            accept_threshold: candidate.threshold,
            expected_error_rate: candidate.error_rate(),
            accepted_fraction: candidate.accepted_weight / total_weight,
            items_above: candidate.accepted,
            items_used: items.len() as u64,
        }),
        None => Err(no_threshold_message(
            large_enough().map(|c| c.error_rate()).reduce(f64::min),
            target_error_rate,
            min_items_above,
            items.len(),
        )),
    }
}

/// One candidate per distinct observed confidence, from the highest
/// threshold to the lowest, with the raw number of items and the weight of
/// items and errors at or above it. Ties are kept together: a threshold
/// accepts all items equal to it.
fn threshold_candidates(items: &[LabelledJudgement]) -> Vec<Candidate> {
    let mut sorted: Vec<(f64, bool, f64)> = items
        .iter()
        .zip(relative_weights(items))
        .map(|(item, weight)| (item.normalised_confidence(), item.is_correct(), weight))
        .collect();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));

    let mut candidates: Vec<Candidate> = Vec::new();
    let (mut accepted, mut accepted_weight, mut error_weight) = (0u64, 0.0, 0.0);
    for (index, &(confidence, correct, weight)) in sorted.iter().enumerate() {
        accepted += 1;
        accepted_weight += weight;
        if !correct {
            error_weight += weight;
        }
        let last_of_tie = sorted
            .get(index + 1)
            .is_none_or(|next| next.0 != confidence);
        if last_of_tie {
            candidates.push(Candidate {
                threshold: confidence,
                accepted,
                accepted_weight,
                error_weight,
            });
        }
    }
    candidates
}

/// Explains why no threshold qualified.
fn no_threshold_message(
    best_error_rate: Option<f64>,
    target_error_rate: f64,
    min_items_above: u64,
    total_items: usize,
) -> String {
    match best_error_rate {
        Some(best) => format!(
            "no confidence threshold keeps the error rate at or below {:.1}% with at least \
             {min_items_above} labelled items above it; the best achievable error rate was {:.1}%",
            target_error_rate * 100.0,
            best * 100.0
        ),
        None => format!(
            "need at least {min_items_above} labelled items above the threshold, but only \
             {total_items} items are labelled in total"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An item with weight 1.0, as if every labelled item had been escalated.
    fn item(confidence: f64, judge_pass: bool, human_pass: bool) -> LabelledJudgement {
        LabelledJudgement {
            confidence,
            judge_pass,
            human_pass,
            weight: 1.0,
        }
    }

    /// The same item with another weight.
    fn weighted(item: LabelledJudgement, weight: f64) -> LabelledJudgement {
        LabelledJudgement { weight, ..item }
    }

    /// The same items, all with one weight.
    fn reweighted(items: &[LabelledJudgement], weight: f64) -> Vec<LabelledJudgement> {
        items.iter().map(|&item| weighted(item, weight)).collect()
    }

    /// An item the judge got right (`true`) or wrong (`false`).
    fn graded(confidence: f64, correct: bool) -> LabelledJudgement {
        item(confidence, true, correct)
    }

    /// Tiny deterministic generator (Knuth's MMIX LCG) so tests need no
    /// `rand` crate and always see the same data.
    struct Lcg(u64);

    impl Lcg {
        fn next_f64(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Top 53 bits give a uniform value in [0, 1).
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn pairs(counts: [(bool, bool, usize); 4]) -> Vec<(bool, bool)> {
        counts
            .iter()
            .flat_map(|&(a, b, n)| std::iter::repeat_n((a, b), n))
            .collect()
    }

    #[test]
    fn kappa_is_one_for_perfect_agreement() {
        let data = pairs([
            (true, true, 7),
            (false, false, 3),
            (true, false, 0),
            (false, true, 0),
        ]);
        let kappa = cohen_kappa_binary(data.into_iter()).expect("defined");
        assert!((kappa - 1.0).abs() < 1e-12, "kappa {kappa}");
    }

    #[test]
    fn kappa_is_zero_at_chance_agreement() {
        let data = pairs([
            (true, true, 25),
            (true, false, 25),
            (false, true, 25),
            (false, false, 25),
        ]);
        let kappa = cohen_kappa_binary(data.into_iter()).expect("defined");
        assert!(kappa.abs() < 1e-12, "kappa {kappa}");

        // Independent random raters: close to zero, not exactly.
        let mut rng = Lcg(42);
        let random = (0..20_000).map(|_| (rng.next_f64() < 0.7, rng.next_f64() < 0.6));
        let kappa = cohen_kappa_binary(random.collect::<Vec<_>>().into_iter()).expect("defined");
        assert!(kappa.abs() < 0.03, "kappa {kappa}");
    }

    #[test]
    fn kappa_matches_hand_computed_table() {
        // a=20 both pass, b=5 judge only, c=10 human only, d=15 both fail, n=50.
        // po = 35/50 = 0.7; judge pass 25/50, human pass 30/50;
        // pe = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4.
        let data = pairs([
            (true, true, 20),
            (true, false, 5),
            (false, true, 10),
            (false, false, 15),
        ]);
        let kappa = cohen_kappa_binary(data.into_iter()).expect("defined");
        assert!((kappa - 0.4).abs() < 1e-12, "kappa {kappa}");
    }

    #[test]
    fn kappa_is_undefined_without_variation_or_items() {
        let all_pass = pairs([
            (true, true, 10),
            (true, false, 0),
            (false, true, 0),
            (false, false, 0),
        ]);
        assert_eq!(cohen_kappa_binary(all_pass.into_iter()), None);
        let all_fail = pairs([
            (false, false, 4),
            (true, false, 0),
            (false, true, 0),
            (true, true, 0),
        ]);
        assert_eq!(cohen_kappa_binary(all_fail.into_iter()), None);
        assert_eq!(cohen_kappa_binary(std::iter::empty()), None);
    }

    #[test]
    fn kappa_with_constant_but_opposite_raters_is_zero_not_undefined() {
        // Judge always passes, humans always fail: pe = 0, po = 0.
        let data = pairs([
            (true, false, 6),
            (true, true, 0),
            (false, true, 0),
            (false, false, 0),
        ]);
        assert_eq!(cohen_kappa_binary(data.into_iter()), Some(0.0));
    }

    #[test]
    fn bins_cover_the_range_and_place_edges_consistently() {
        let items = [
            graded(0.5, true),
            graded(0.74, false),
            graded(0.75, true),
            graded(1.0, true),
            graded(0.2, false),      // below range: first bin
            graded(f64::NAN, false), // unreadable: first bin
            graded(1.3, true),       // above range: last bin
        ];
        let bins = reliability_bins(&items, 2);
        assert_eq!(bins.len(), 2);
        assert_eq!((bins[0].lower, bins[0].upper), (0.5, 0.75));
        assert_eq!((bins[1].lower, bins[1].upper), (0.75, 1.0));
        assert_eq!(bins[0].count, 4);
        assert_eq!(bins[1].count, 3);
        assert_eq!(
            bins.iter().map(|b| b.count).sum::<u64>(),
            items.len() as u64
        );
        assert_eq!(bins[0].accuracy, Some(0.25));
        assert_eq!(bins[1].accuracy, Some(1.0));
        // Clamped values count as 0.5 and 1.0 in the mean.
        let mean = bins[0].mean_confidence.expect("non-empty");
        assert!((mean - (0.5 + 0.74 + 0.5 + 0.5) / 4.0).abs() < 1e-12);
        let mean = bins[1].mean_confidence.expect("non-empty");
        assert!((mean - (0.75 + 1.0 + 1.0) / 3.0).abs() < 1e-12);
    }

    #[test]
    fn every_item_on_an_edge_lands_in_the_bin_starting_there() {
        for bins in 1..=40 {
            for edge in 0..bins {
                let lower = bin_lower_edge(edge, bins);
                let placed = reliability_bins(&[graded(lower, true)], bins);
                assert_eq!(
                    placed[edge].count, 1,
                    "edge {edge} of {bins} bins ({lower})"
                );
            }
        }
    }

    #[test]
    fn empty_bins_are_explicit() {
        let bins = reliability_bins(&[graded(0.97, true)], 10);
        assert_eq!(bins.len(), 10);
        assert_eq!(bins[9].count, 1);
        assert_eq!(bins.iter().filter(|b| b.accuracy.is_none()).count(), 9);
        assert!(bins[..9]
            .iter()
            .all(|b| b.count == 0 && b.mean_confidence.is_none()));
        assert!(reliability_bins(&[graded(0.9, true)], 0).is_empty());
    }

    #[test]
    fn judge_accuracy_summarises_items() {
        let empty = judge_accuracy(&[]);
        assert_eq!(empty.items, 0);
        assert_eq!(
            (
                empty.accuracy,
                empty.kappa,
                empty.expected_calibration_error
            ),
            (None, None, None)
        );

        let items = [
            item(0.9, true, true),
            item(0.9, false, false),
            item(0.9, true, false),
            item(0.9, false, false),
        ];
        let summary = judge_accuracy(&items);
        assert_eq!(summary.items, 4);
        assert_eq!(summary.accuracy, Some(0.75));
        // One bin: |0.75 - 0.9| = 0.15.
        let ece = summary.expected_calibration_error.expect("items present");
        assert!((ece - 0.15).abs() < 1e-12, "ece {ece}");
        // Table a=1, b=1, c=0, d=2: po=0.75, pe=0.5*0.25+0.5*0.75=0.5, kappa=0.5.
        let kappa = summary.kappa.expect("defined");
        assert!((kappa - 0.5).abs() < 1e-12, "kappa {kappa}");
    }

    #[test]
    fn perfectly_calibrated_judge_has_small_ece() {
        let mut rng = Lcg(7);
        let items: Vec<_> = (0..20_000)
            .map(|_| {
                let confidence = 0.5 + 0.5 * rng.next_f64();
                let judge_pass = rng.next_f64() < 0.5;
                let correct = rng.next_f64() < confidence;
                item(
                    confidence,
                    judge_pass,
                    if correct { judge_pass } else { !judge_pass },
                )
            })
            .collect();
        let ece = judge_accuracy(&items)
            .expected_calibration_error
            .expect("items present");
        assert!(ece < 0.05, "ece {ece}");
    }

    #[test]
    fn overconfident_judge_has_large_ece() {
        // Always 0.95 confident, right only 60% of the time.
        let items: Vec<_> = (0..100).map(|i| graded(0.95, i % 5 < 3)).collect();
        let ece = judge_accuracy(&items)
            .expected_calibration_error
            .expect("items present");
        assert!((ece - 0.35).abs() < 1e-9, "ece {ece}");
    }

    /// Confidence 1.0: 4 right; 0.9: 4 right, 1 wrong; 0.8: 3 right, 2 wrong;
    /// 0.7: 1 right, 4 wrong. Cumulative error rates from the top:
    /// >=1.0: 0/4, >=0.9: 1/9, >=0.8: 3/14, >=0.7: 7/19.
    fn staircase() -> Vec<LabelledJudgement> {
        let mut items = Vec::new();
        for (confidence, right, wrong) in [(1.0, 4, 0), (0.9, 4, 1), (0.8, 3, 2), (0.7, 1, 4)] {
            items.extend((0..right).map(|_| graded(confidence, true)));
            items.extend((0..wrong).map(|_| graded(confidence, false)));
        }
        items
    }

    #[test]
    fn recalibration_picks_the_lowest_qualifying_threshold() {
        let items = staircase();
        let result = recalibrate_accept_threshold(&items, 0.25, 1).expect("qualifies");
        assert_eq!(result.accept_threshold, 0.8);
        assert!((result.expected_error_rate - 3.0 / 14.0).abs() < 1e-12);
        assert!((result.accepted_fraction - 14.0 / 19.0).abs() < 1e-12);
        assert_eq!(result.items_above, 14);
        assert_eq!(result.items_used, 19);

        let strict = recalibrate_accept_threshold(&items, 0.12, 1).expect("qualifies");
        assert_eq!(strict.accept_threshold, 0.9);

        let lenient = recalibrate_accept_threshold(&items, 0.5, 1).expect("qualifies");
        assert_eq!(lenient.accept_threshold, 0.7);
        assert_eq!(lenient.accepted_fraction, 1.0);
    }

    #[test]
    fn recalibration_looks_past_a_non_monotone_error_rate() {
        // >=0.95: 1/2 wrong (fails 0.2), >=0.9: 1/10 (passes), so the answer
        // is 0.9 even though the highest threshold fails.
        let mut items = vec![graded(0.95, true), graded(0.95, false)];
        items.extend((0..8).map(|_| graded(0.9, true)));
        let result = recalibrate_accept_threshold(&items, 0.2, 1).expect("qualifies");
        assert_eq!(result.accept_threshold, 0.9);
    }

    #[test]
    fn recalibration_respects_min_items_above() {
        let items = staircase();
        // Only the 1.0 tier (4 items) is error-free; demanding 5 items rules it out.
        let loose = recalibrate_accept_threshold(&items, 0.05, 4).expect("qualifies");
        assert_eq!(loose.accept_threshold, 1.0);
        let error = recalibrate_accept_threshold(&items, 0.05, 5).expect_err("impossible");
        assert!(
            error.contains("best achievable error rate was 11.1%"),
            "{error}"
        );

        let too_many = recalibrate_accept_threshold(&items, 0.5, 20).expect_err("impossible");
        assert!(too_many.contains("only 19 items"), "{too_many}");
    }

    #[test]
    fn recalibration_rejects_bad_input() {
        let items = staircase();
        assert!(recalibrate_accept_threshold(&[], 0.1, 1).is_err());
        for target in [0.0, 1.0, -0.1, 1.5, f64::NAN] {
            assert!(
                recalibrate_accept_threshold(&items, target, 1).is_err(),
                "target {target}"
            );
        }
        let all_wrong: Vec<_> = (0..10)
            .map(|i| graded(0.6 + 0.01 * i as f64, false))
            .collect();
        let error = recalibrate_accept_threshold(&all_wrong, 0.1, 1).expect_err("impossible");
        assert!(
            error.contains("best achievable error rate was 100.0%"),
            "{error}"
        );
    }

    fn assert_close(actual: f64, expected: f64, what: &str) {
        assert!(
            (actual - expected).abs() < 1e-12,
            "{what}: got {actual}, expected {expected}"
        );
    }

    /// Items at one confidence from a 2x2 table `[both pass, only the judge
    /// passes, only the human passes, both fail]`, all with `weight`.
    fn group(confidence: f64, table: [usize; 4], weight: f64) -> Vec<LabelledJudgement> {
        let cells = [(true, true), (true, false), (false, true), (false, false)];
        cells
            .iter()
            .zip(table)
            .flat_map(|(&(judge, human), n)| {
                std::iter::repeat_n(weighted(item(confidence, judge, human), weight), n)
            })
            .collect()
    }

    /// Escalated because the judge was unsure: right 60% of the time.
    const UNSURE: [usize; 4] = [300, 200, 200, 300];
    /// Escalated despite high confidence (an ensemble disagreed): right 50%.
    const DISAGREED: [usize; 4] = [25, 25, 25, 25];
    /// Accepted automatically: right 97% of the time.
    const CONFIDENT: [usize; 4] = [8000, 200, 100, 1700];
    const AUDIT_RATE: f64 = 0.02;

    /// Every judged verdict of a triaged run, as if humans had labelled all
    /// 11,100: the truth the estimates should recover.
    fn triaged_population() -> Vec<LabelledJudgement> {
        [
            group(0.65, UNSURE, 1.0),
            group(0.96, DISAGREED, 1.0),
            group(0.97, CONFIDENT, 1.0),
        ]
        .concat()
    }

    /// What humans actually label: every escalation (weight 1), and a 2%
    /// audit of the confident band (weight 50) that matches the band exactly
    /// (one in fifty of each cell), so estimates can be checked exactly.
    fn triaged_labels() -> Vec<LabelledJudgement> {
        [
            group(0.65, UNSURE, 1.0),
            group(0.96, DISAGREED, 1.0),
            group(0.97, CONFIDENT.map(|n| n / 50), 1.0 / AUDIT_RATE),
        ]
        .concat()
    }

    #[test]
    fn weighting_recovers_the_population_from_an_audited_sample() {
        let labels = triaged_labels();
        assert_eq!(labels.len(), 1300);
        let truth = judge_accuracy(&triaged_population());
        let estimate = judge_accuracy(&labels);
        let naive = judge_accuracy(&reweighted(&labels, 1.0));

        // (600 + 50 + 9700) / 11100 right; the naive rate is (600 + 50 + 194) / 1300.
        let true_accuracy = truth.accuracy.expect("items present");
        assert_close(true_accuracy, 10_350.0 / 11_100.0, "true accuracy");
        let estimated = estimate.accuracy.expect("items present");
        assert_close(estimated, true_accuracy, "weighted accuracy");
        let naive_accuracy = naive.accuracy.expect("items present");
        assert_close(naive_accuracy, 844.0 / 1300.0, "naive accuracy");
        assert!(true_accuracy - naive_accuracy > 0.25);

        // Counts stay raw: 1,300 labelled items, not 11,100.
        assert_eq!(estimate.items, 1300);

        let true_kappa = truth.kappa.expect("defined");
        assert_close(
            estimate.kappa.expect("defined"),
            true_kappa,
            "weighted kappa",
        );
        assert!((naive.kappa.expect("defined") - true_kappa).abs() > 0.1);

        let true_ece = truth.expected_calibration_error.expect("items present");
        let ece = estimate.expected_calibration_error.expect("items present");
        assert_close(ece, true_ece, "weighted ECE");
        let naive_ece = naive.expected_calibration_error.expect("items present");
        assert!(
            (naive_ece - true_ece).abs() > 0.05,
            "{naive_ece} vs {true_ece}"
        );

        // Bin [0.95, 1.0] mixes 100 escalations (weight 1) with 200 audited
        // items (weight 50): only weighting gets its accuracy right.
        let true_bins = reliability_bins(&triaged_population(), 10);
        let bins = reliability_bins(&labels, 10);
        for (bin, true_bin) in bins.iter().zip(&true_bins) {
            assert_eq!(bin.accuracy.is_some(), true_bin.accuracy.is_some());
            if let (Some(a), Some(b)) = (bin.accuracy, true_bin.accuracy) {
                assert_close(a, b, "bin accuracy");
            }
            if let (Some(a), Some(b)) = (bin.mean_confidence, true_bin.mean_confidence) {
                assert_close(a, b, "bin mean confidence");
            }
        }
        assert_eq!((bins[9].count, true_bins[9].count), (300, 10_100));
        assert_close(
            bins[9].accuracy.expect("non-empty"),
            9750.0 / 10_100.0,
            "top bin",
        );
        let naive_top = reliability_bins(&reweighted(&labels, 1.0), 10)[9];
        assert_close(
            naive_top.accuracy.expect("non-empty"),
            244.0 / 300.0,
            "naive top bin",
        );
    }

    /// Random labelled items with two-decimal confidences, so thresholds tie.
    fn random_items(seed: u64, n: usize) -> Vec<LabelledJudgement> {
        let mut rng = Lcg(seed);
        (0..n)
            .map(|_| {
                let confidence = (50.0 + 50.0 * rng.next_f64()).floor() / 100.0;
                let judge_pass = rng.next_f64() < 0.6;
                let correct = rng.next_f64() < confidence;
                item(
                    confidence,
                    judge_pass,
                    if correct { judge_pass } else { !judge_pass },
                )
            })
            .collect()
    }

    #[test]
    fn unit_weights_reproduce_the_unweighted_statistics_exactly() {
        let mut recalibrated = 0;
        for seed in 0..20u64 {
            let items = random_items(seed, 50 + 37 * seed as usize);
            let n = items.len() as f64;

            // Plain counting, as the module did before weights existed;
            // compared bit for bit, not within a tolerance.
            let summary = judge_accuracy(&items);
            let correct = items.iter().filter(|i| i.is_correct()).count();
            assert_eq!(summary.accuracy, Some(correct as f64 / n));
            let pairs = items.iter().map(|i| (i.judge_pass, i.human_pass));
            assert_eq!(summary.kappa, cohen_kappa_binary(pairs));

            let bins = reliability_bins(&items, 10);
            for (index, bin) in bins.iter().enumerate() {
                let inside: Vec<_> = items
                    .iter()
                    .filter(|i| bin_index(i.normalised_confidence(), 10) == index)
                    .collect();
                let count = inside.len() as f64;
                let confidence_sum: f64 = inside.iter().map(|i| i.normalised_confidence()).sum();
                let right = inside.iter().filter(|i| i.is_correct()).count() as f64;
                assert_eq!(bin.count, inside.len() as u64);
                assert_eq!(
                    bin.mean_confidence,
                    (count > 0.0).then(|| confidence_sum / count)
                );
                assert_eq!(bin.accuracy, (count > 0.0).then(|| right / count));
            }
            let ece: f64 = bins
                .iter()
                .filter_map(|bin| {
                    Some(bin.count as f64 / n * (bin.accuracy? - bin.mean_confidence?).abs())
                })
                .sum();
            assert_eq!(summary.expected_calibration_error, Some(ece));

            let result = recalibrate_accept_threshold(&items, 0.3, 5);
            if let Ok(result) = result {
                recalibrated += 1;
                let above: Vec<_> = items
                    .iter()
                    .filter(|i| i.normalised_confidence() >= result.accept_threshold)
                    .collect();
                let errors = above.iter().filter(|i| !i.is_correct()).count() as f64;
                assert_eq!(result.items_above, above.len() as u64);
                assert_eq!(result.expected_error_rate, errors / above.len() as f64);
                assert_eq!(result.accepted_fraction, above.len() as f64 / n);
            }

            // Any weight shared by all items gives the very same answers.
            for weight in [50.0, 0.37, 1e300] {
                let same = reweighted(&items, weight);
                assert_eq!(judge_accuracy(&same), summary, "weight {weight}");
                assert_eq!(reliability_bins(&same, 10), bins, "weight {weight}");
                assert_eq!(recalibrate_accept_threshold(&same, 0.3, 5), result);
            }
        }
        assert!(recalibrated >= 10, "only {recalibrated} seeds recalibrated");
    }

    #[test]
    fn weighted_kappa_with_unit_weights_matches_the_integer_one_on_every_small_table() {
        for table in 0..5usize.pow(4) {
            let counts = [table % 5, table / 5 % 5, table / 25 % 5, table / 125];
            let items = group(0.8, counts, 1.0);
            let pairs = items.iter().map(|i| (i.judge_pass, i.human_pass));
            assert_eq!(
                judge_accuracy(&items).kappa,
                cohen_kappa_binary(pairs),
                "{counts:?}"
            );
        }
    }

    #[test]
    fn kappa_is_undefined_when_chance_agreement_is_perfect_up_to_rounding() {
        // Judge always passes; the humans fail one item whose weight is a
        // negligible share of the total, so 1 - pe is about 1e-15.
        let mut items = group(0.9, [10, 0, 0, 0], 1.0);
        items.push(weighted(item(0.9, true, false), 1e-14));
        assert_eq!(judge_accuracy(&items).kappa, None);
        // With a share well above the tolerance, kappa is defined (and 0:
        // a judge that always passes does no better than chance).
        let last = items.len() - 1;
        items[last].weight = 1e-9;
        let kappa = judge_accuracy(&items).kappa.expect("defined");
        assert!(kappa.abs() < 1e-6, "kappa {kappa}");
    }

    #[test]
    fn recalibration_weights_rates_but_counts_items_raw() {
        let labels = triaged_labels();
        // From the top: >=0.97 holds 200 labelled items standing for 10,000
        // verdicts, 3.0% of them wrong; >=0.96 holds 300 standing for 10,100,
        // 350/10,100 = 3.5% wrong; >=0.65 holds all 1,300, 750/11,100 = 6.8%.
        let result = recalibrate_accept_threshold(&labels, 0.05, 300).expect("qualifies");
        assert_eq!(result.accept_threshold, 0.96);
        assert_close(result.expected_error_rate, 350.0 / 10_100.0, "error rate");
        assert_close(result.accepted_fraction, 10_100.0 / 11_100.0, "accepted");
        assert_eq!((result.items_above, result.items_used), (300, 1300));

        // The same answer as if every verdict had been labelled.
        let truth = recalibrate_accept_threshold(&triaged_population(), 0.05, 1).expect("ok");
        assert_eq!(truth.accept_threshold, result.accept_threshold);
        assert_close(
            truth.expected_error_rate,
            result.expected_error_rate,
            "truth",
        );
        assert_close(truth.accepted_fraction, result.accepted_fraction, "truth");

        // min_items_above counts labelled items: 0.96 has 300, not the
        // 10,100 its weight stands for, so asking for 301 rules it out.
        let error = recalibrate_accept_threshold(&labels, 0.05, 301).expect_err("too few");
        assert!(
            error.contains("best achievable error rate was 6.8%"),
            "{error}"
        );

        // Unweighted, the over-sampled disagreements (50% wrong) would push
        // the threshold up to 0.97 and claim it accepts 200/1300 = 15% of
        // traffic instead of 10,000/11,100 = 90%.
        let naive = recalibrate_accept_threshold(&reweighted(&labels, 1.0), 0.05, 1).expect("ok");
        assert_eq!(naive.accept_threshold, 0.97);
        assert_close(naive.accepted_fraction, 200.0 / 1300.0, "naive accepted");

        // The lowest threshold accepts all traffic: exactly 1.0, not 0.99…
        let lenient = recalibrate_accept_threshold(&labels, 0.5, 1).expect("qualifies");
        assert_eq!(lenient.accept_threshold, 0.65);
        assert_eq!(lenient.accepted_fraction, 1.0);
    }

    #[test]
    fn unusable_weights_count_as_one() {
        let labels = triaged_labels();
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, -3.0] {
            // Spoil every third weight-1 item; the results must not change.
            let spoiled: Vec<_> = labels
                .iter()
                .enumerate()
                .map(|(i, &item)| {
                    if item.weight == 1.0 && i % 3 == 0 {
                        weighted(item, bad)
                    } else {
                        item
                    }
                })
                .collect();
            assert_eq!(judge_accuracy(&spoiled), judge_accuracy(&labels), "{bad}");
            assert_eq!(
                reliability_bins(&spoiled, 10),
                reliability_bins(&labels, 10)
            );
            assert_eq!(
                recalibrate_accept_threshold(&spoiled, 0.05, 300),
                recalibrate_accept_threshold(&labels, 0.05, 300)
            );
        }
        // All weights unusable: the unweighted statistics.
        let all_bad = reweighted(&staircase(), f64::NAN);
        assert_eq!(judge_accuracy(&all_bad), judge_accuracy(&staircase()));

        // Weights below 1 are valid (only relative weights matter) and kept.
        let light = [weighted(graded(0.9, true), 0.25), graded(0.9, false)];
        assert_close(
            judge_accuracy(&light).accuracy.expect("items"),
            0.2,
            "light",
        );
    }

    #[test]
    fn extreme_weights_never_give_nan() {
        // Summed directly, these weights would overflow to infinity.
        let huge = [
            weighted(graded(0.9, true), f64::MAX),
            weighted(graded(0.9, false), f64::MAX),
            graded(0.6, false),
        ];
        let summary = judge_accuracy(&huge);
        assert_close(summary.accuracy.expect("items"), 0.5, "huge accuracy");
        assert!(summary.kappa.expect("defined").is_finite());
        let ece = summary.expected_calibration_error.expect("items");
        assert_close(ece, 0.4, "huge ece");
        let bins = reliability_bins(&huge, 10);
        assert_close(bins[8].accuracy.expect("non-empty"), 0.5, "huge bin");
        assert_eq!(bins[2].accuracy, Some(0.0));
        let result = recalibrate_accept_threshold(&huge, 0.6, 3).expect("qualifies");
        assert_eq!(result.accept_threshold, 0.6);
        assert_close(result.expected_error_rate, 0.5, "huge error rate");
        assert_eq!(result.accepted_fraction, 1.0);

        // Weights so far apart that their ratio underflows to zero.
        let tiny = [
            weighted(graded(0.6, true), f64::from_bits(1)),
            weighted(graded(0.9, false), 1e300),
        ];
        let bins = reliability_bins(&tiny, 10);
        assert_eq!(bins[2].count, 1);
        assert_eq!(bins[2].accuracy, Some(1.0));
        assert_close(bins[2].mean_confidence.expect("non-empty"), 0.6, "tiny");
        let summary = judge_accuracy(&tiny);
        assert_close(summary.accuracy.expect("items"), 0.0, "tiny accuracy");
        assert!(summary.kappa.expect("defined").is_finite());
        assert!(summary
            .expected_calibration_error
            .expect("items")
            .is_finite());
    }

    #[test]
    fn public_structs_round_trip_through_serde() {
        // Only checks the derives exist and are usable; JSON shape is serde's.
        fn assert_serde<T: Serialize + for<'de> Deserialize<'de>>() {}
        assert_serde::<LabelledJudgement>();
        assert_serde::<ReliabilityBin>();
        assert_serde::<JudgeAccuracy>();
        assert_serde::<Recalibration>();
    }
}
