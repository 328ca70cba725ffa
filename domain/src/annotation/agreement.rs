//! Inter-rater agreement statistics for the human annotation queue.
//!
//! Agreement figures tell a reviewer whether a label set is trustworthy enough to grade models
//! against. This module implements, from their textbook definitions:
//!
//! * Krippendorff's alpha (nominal, ordinal, interval, ratio) via the coincidence matrix. It is
//!   the default for the queue because it tolerates missing ratings and any number of raters.
//! * Fleiss' kappa, for the classic design where every item has the same number of raters.
//! * Cohen's kappa for two raters, unweighted or with linear / quadratic disagreement weights.
//! * Percent agreement, always reported beside a chance-corrected statistic so that a reader can
//!   tell "raters agree on everything" (statistic undefined, agreement 100 %) from "raters
//!   disagree" (statistic low).
//! * Percentile bootstrap confidence intervals for alpha.
//!
//! Every statistic here is a sum over units, so each has an accumulator with `add_*` and
//! `remove_*`: when an annotator changes a label, the queue removes the old unit and adds the new
//! one instead of recomputing from scratch. Accumulators hold exact integer tallies (never running
//! float sums), so any order of additions and removals gives bit-for-bit the same figure as the
//! batch functions, which are thin wrappers over the accumulators.
//!
//! Degenerate data is reported as [`Statistic::Undefined`] with a human-readable reason rather
//! than as an error or a misleading 1.0: when every rating is the same, expected disagreement is
//! zero and chance-corrected agreement is 0/0.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::stats::quantile;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Identifies an annotator. Only used to reject a rater rating one unit twice and to pair up two
/// raters for Cohen's kappa; the statistics themselves are symmetric in raters.
pub type RaterId = u64;

/// Level of measurement: decides how far apart two different values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Any two different values disagree equally (labels such as "YES"/"NO").
    Nominal,
    /// Only the order of values matters; the distance between two values grows with how many
    /// ratings fall between them (Krippendorff's ordinal metric).
    Ordinal,
    /// Differences are meaningful: squared difference of the numbers.
    Interval,
    /// Ratios are meaningful (true zero): squared relative difference.
    Ratio,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Nominal => "nominal",
            Level::Ordinal => "ordinal",
            Level::Interval => "interval",
            Level::Ratio => "ratio",
        }
    }
}

/// Disagreement weights for Cohen's kappa on ordered categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Weighting {
    /// Every disagreement counts fully.
    Unweighted,
    /// Disagreement proportional to the rank distance |i − j|.
    Linear,
    /// Disagreement proportional to the squared rank distance (i − j)².
    Quadratic,
}

/// A chance-corrected statistic, or the reason it cannot be computed.
///
/// Undefined is a normal outcome (for example a batch where everyone chose the same label), not
/// an error: the UI shows the reason and the percent agreement beside it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// The statistic's value (1 = perfect agreement, 0 = chance level, negative = worse).
    Defined(f64),
    /// Why there is no value.
    Undefined {
        /// A sentence fit to show to a user.
        reason: &'static str,
    },
}

impl Statistic {
    /// The value, if defined.
    pub fn value(&self) -> Option<f64> {
        match self {
            Statistic::Defined(v) => Some(*v),
            Statistic::Undefined { .. } => None,
        }
    }

    /// Whether a value is available.
    pub fn is_defined(&self) -> bool {
        matches!(self, Statistic::Defined(_))
    }
}

/// A statistic together with the raw agreement it corrects, so one is never shown without the
/// other.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    /// The chance-corrected statistic.
    pub statistic: Statistic,
    /// Share of agreeing rater pairs, averaged over pairable units; `None` if nothing is
    /// pairable.
    pub percent_agreement: Option<f64>,
    /// Units that entered the statistic (pairable units for alpha, items for Fleiss, rating pairs
    /// for Cohen).
    pub units: u64,
}

/// Reasons shown for undefined statistics; shared so that tests and UI can match on them.
pub mod reasons {
    /// All ratings equal: expected disagreement (or 1 − chance agreement) is zero.
    pub const ALL_IDENTICAL: &str =
        "every rating has the same value, so expected disagreement is zero and agreement beyond \
         chance is undefined";
    /// No unit has two or more ratings.
    pub const NO_PAIRABLE_UNITS: &str =
        "no unit has two or more ratings, so there is nothing to compare";
    /// Ordinal / interval / ratio alpha on values that are not finite numbers.
    pub const NEEDS_NUMBERS: &str =
        "ordinal, interval and ratio levels need every value to be a finite number";
    /// Ratio alpha with a negative value.
    pub const RATIO_NEEDS_NON_NEGATIVE: &str = "the ratio level needs non-negative values";
    /// Fleiss' kappa on items with different numbers of raters.
    pub const FLEISS_UNEQUAL_RATERS: &str =
        "Fleiss' kappa needs the same number of raters on every item; use Krippendorff's alpha \
         instead";
    /// Fleiss' kappa with fewer than two raters per item.
    pub const FLEISS_NEEDS_TWO_RATERS: &str = "Fleiss' kappa needs at least two ratings per item";
    /// Fleiss' kappa with no items.
    pub const NO_ITEMS: &str = "no items have been rated";
    /// Cohen's kappa with no pairs.
    pub const NO_PAIRS: &str = "no unit was rated by both raters";
    /// Weighted Cohen's kappa on categories without an order.
    pub const WEIGHTED_NEEDS_NUMBERS: &str =
        "weighted kappa needs ordered categories: every category must be a finite number";
    /// Contingency table that is not k × k.
    pub const TABLE_NOT_SQUARE: &str =
        "the contingency table must be square (the same categories for both raters)";
}

/// Problems with the input that are the caller's to fix, as opposed to undefined statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgreementError {
    /// One rater appears twice in a unit; counting both would inflate agreement.
    DuplicateRater {
        /// The repeated rater.
        rater: RaterId,
    },
    /// A removal asked for ratings the accumulator does not hold (it was never added, or was
    /// already removed); nothing was changed.
    NotHeld,
}

impl fmt::Display for AgreementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgreementError::DuplicateRater { rater } => {
                write!(f, "rater {rater} rated the same unit more than once")
            }
            AgreementError::NotHeld => {
                write!(f, "cannot remove ratings that were never added")
            }
        }
    }
}

impl std::error::Error for AgreementError {}

/// A rating value. Nominal statistics only need equality and a stable order; the other levels
/// also need the value's number.
///
/// Implemented for strings (no number), integers (their value) and [`Value`]. A custom ordered
/// scale (an enum of severities, say) implements this with `numeric` returning its position.
pub trait Label: Ord + Clone {
    /// The number this value stands for on a numeric scale; `None` for pure labels. Ordinal,
    /// interval and ratio statistics, and weighted kappa, are undefined unless every value has a
    /// finite number.
    fn numeric(&self) -> Option<f64>;
}

impl Label for String {
    fn numeric(&self) -> Option<f64> {
        None
    }
}

impl Label for &str {
    fn numeric(&self) -> Option<f64> {
        None
    }
}

impl Label for char {
    fn numeric(&self) -> Option<f64> {
        None
    }
}

impl Label for bool {
    fn numeric(&self) -> Option<f64> {
        None
    }
}

macro_rules! integer_label {
    ($($t:ty),*) => {$(
        impl Label for $t {
            fn numeric(&self) -> Option<f64> {
                Some(*self as f64)
            }
        }
    )*};
}

integer_label!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

/// A rating as stored by the annotation queue: a number (scores, Likert points) or a text label.
///
/// It exists because `f64` is not `Ord`; `Value` gives numbers a total order (−0 equals 0) so
/// they can key the tallies. Deserialises from plain JSON numbers and strings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A numeric rating.
    Number(f64),
    /// A categorical rating.
    Label(String),
}

impl Value {
    /// The number used for ordering and hashing: folds −0 into 0 so they compare equal.
    fn number_key(x: f64) -> f64 {
        if x == 0.0 {
            0.0
        } else {
            x
        }
    }
}

impl Ord for Value {
    /// Numbers (in numeric order) sort before labels (in byte order).
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Value::Number(a), Value::Number(b)) => {
                Value::number_key(*a).total_cmp(&Value::number_key(*b))
            }
            (Value::Number(_), Value::Label(_)) => Ordering::Less,
            (Value::Label(_), Value::Number(_)) => Ordering::Greater,
            (Value::Label(a), Value::Label(b)) => a.cmp(b),
        }
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Value::Number(x) => {
                0u8.hash(state);
                Value::number_key(*x).to_bits().hash(state);
            }
            Value::Label(s) => {
                1u8.hash(state);
                s.hash(state);
            }
        }
    }
}

impl Label for Value {
    fn numeric(&self) -> Option<f64> {
        match self {
            Value::Number(x) if x.is_finite() => Some(*x),
            _ => None,
        }
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Self {
        Value::Number(x)
    }
}

impl From<i64> for Value {
    fn from(x: i64) -> Self {
        Value::Number(x as f64)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Label(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Label(s)
    }
}

/// One annotated item: who rated it and what they said. Missing ratings are simply absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit<V> {
    /// `(rater, value)`; each rater at most once.
    pub ratings: Vec<(RaterId, V)>,
}

impl<V> Unit<V> {
    /// A unit from its ratings.
    pub fn new(ratings: Vec<(RaterId, V)>) -> Self {
        Unit { ratings }
    }

    /// The values, without rater ids.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.ratings.iter().map(|(_, v)| v)
    }
}

impl<V: Ord + Clone> Unit<V> {
    /// How often each value occurs. All pair-based statistics depend on a unit only through
    /// these counts. Rejects a rater appearing twice.
    fn value_counts(&self) -> Result<BTreeMap<V, u64>, AgreementError> {
        let mut raters = BTreeSet::new();
        let mut counts = BTreeMap::new();
        for (rater, value) in &self.ratings {
            if !raters.insert(*rater) {
                return Err(AgreementError::DuplicateRater { rater: *rater });
            }
            *counts.entry(value.clone()).or_insert(0) += 1;
        }
        Ok(counts)
    }
}

/// Units from a reliability-data matrix (one row per rater, one column per unit, `None` where
/// the rater did not rate the unit), the layout used in the literature and in exports. Rater ids
/// are row indices.
pub fn units_from_rows<V: Clone>(rows: &[Vec<Option<V>>]) -> Vec<Unit<V>> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..width)
        .map(|column| {
            let ratings = rows
                .iter()
                .enumerate()
                .filter_map(|(rater, row)| {
                    let value = row.get(column)?.as_ref()?;
                    Some((rater as RaterId, value.clone()))
                })
                .collect();
            Unit::new(ratings)
        })
        .collect()
}

/// The rating pairs of two raters over the units both of them rated, for Cohen's kappa.
pub fn paired_ratings<V: Clone>(units: &[Unit<V>], first: RaterId, second: RaterId) -> Vec<(V, V)> {
    let rating_of = |unit: &Unit<V>, rater: RaterId| {
        unit.ratings
            .iter()
            .find(|(r, _)| *r == rater)
            .map(|(_, v)| v.clone())
    };
    units
        .iter()
        .filter_map(|unit| Some((rating_of(unit, first)?, rating_of(unit, second)?)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Percent agreement
// ---------------------------------------------------------------------------------------------

/// Total ratings and agreeing unordered rater pairs of a unit with the given value counts.
fn unit_shape<V>(counts: &BTreeMap<V, u64>) -> (u64, u64) {
    let ratings = counts.values().sum();
    let agreeing = counts.values().map(|&c| c * c.saturating_sub(1) / 2).sum();
    (ratings, agreeing)
}

/// Exact tally behind percent agreement: for each unit size `m`, how many units and how many
/// agreeing rater pairs. Grouping by size keeps the mean of per-unit fractions exact under
/// removal (no float running sums).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PairwiseTally {
    by_size: BTreeMap<u64, SizeTally>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SizeTally {
    units: u64,
    agreeing_pairs: u64,
}

impl PairwiseTally {
    /// Records `times` units of `ratings` ratings with `agreeing` agreeing pairs (`ratings` ≥ 2).
    fn add(&mut self, ratings: u64, agreeing: u64, times: u64) {
        let entry = self.by_size.entry(ratings).or_default();
        entry.units += times;
        entry.agreeing_pairs += agreeing * times;
    }

    fn can_remove(&self, ratings: u64, agreeing: u64) -> bool {
        self.by_size
            .get(&ratings)
            .is_some_and(|t| t.units >= 1 && t.agreeing_pairs >= agreeing)
    }

    /// Removes one unit; callers check [`PairwiseTally::can_remove`] first.
    fn remove(&mut self, ratings: u64, agreeing: u64) {
        if let Some(entry) = self.by_size.get_mut(&ratings) {
            entry.units = entry.units.saturating_sub(1);
            entry.agreeing_pairs = entry.agreeing_pairs.saturating_sub(agreeing);
            if entry.units == 0 {
                self.by_size.remove(&ratings);
            }
        }
    }

    fn units(&self) -> u64 {
        self.by_size.values().map(|t| t.units).sum()
    }

    /// Mean over units of the share of agreeing rater pairs in the unit. Unit-weighted so that a
    /// heavily-rated item does not dominate; for two raters it is the usual share of matches.
    fn percent(&self) -> Option<f64> {
        let units = self.units();
        if units == 0 {
            return None;
        }
        let agreeing_share_sum: f64 = self
            .by_size
            .iter()
            .map(|(&m, t)| t.agreeing_pairs as f64 / (m * (m - 1) / 2) as f64)
            .sum();
        Some(agreeing_share_sum / units as f64)
    }
}

/// Percent agreement over the units with at least two ratings (see [`Agreement::percent_agreement`]).
pub fn percent_agreement<V: Ord + Clone>(units: &[Unit<V>]) -> Result<Option<f64>, AgreementError> {
    let mut tally = CoincidenceTally::default();
    for unit in units {
        tally.add_counts(&unit.value_counts()?, 1);
    }
    Ok(tally.agreement.percent())
}

// ---------------------------------------------------------------------------------------------
// Krippendorff's alpha
// ---------------------------------------------------------------------------------------------

/// Exact form of the coincidence matrix. A unit with `m` ratings adds `n_c·n_k` (or `n_c(n_c−1)`
/// on the diagonal) ordered value pairs, each weighing `1/(m−1)`. Counting pairs per `m` keeps
/// the tally in integers; `o_ck = Σ_m pairs_ck(m)/(m−1)` is formed only when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CoincidenceTally<K> {
    pairs: BTreeMap<(K, K), BTreeMap<u64, u64>>,
    agreement: PairwiseTally,
}

impl<K> Default for CoincidenceTally<K> {
    fn default() -> Self {
        CoincidenceTally {
            pairs: BTreeMap::new(),
            agreement: PairwiseTally::default(),
        }
    }
}

/// Ordered value pairs within a unit, with multiplicity.
fn ordered_pairs<K: Ord + Clone>(counts: &BTreeMap<K, u64>) -> Vec<((K, K), u64)> {
    let mut out = Vec::new();
    for (c, &nc) in counts {
        for (k, &nk) in counts {
            let n = if c == k {
                nc * nc.saturating_sub(1)
            } else {
                nc * nk
            };
            if n > 0 {
                out.push(((c.clone(), k.clone()), n));
            }
        }
    }
    out
}

impl<K: Ord + Clone> CoincidenceTally<K> {
    /// Adds `times` copies of a unit; units with fewer than two ratings are not pairable and are
    /// ignored.
    fn add_counts(&mut self, counts: &BTreeMap<K, u64>, times: u64) {
        let (m, agreeing) = unit_shape(counts);
        if m < 2 || times == 0 {
            return;
        }
        for (key, n) in ordered_pairs(counts) {
            *self.pairs.entry(key).or_default().entry(m).or_insert(0) += n * times;
        }
        self.agreement.add(m, agreeing, times);
    }

    /// Removes one unit, or changes nothing and fails if the tally does not hold it.
    fn remove_counts(&mut self, counts: &BTreeMap<K, u64>) -> Result<(), AgreementError> {
        let (m, agreeing) = unit_shape(counts);
        if m < 2 {
            return Ok(());
        }
        let pairs = ordered_pairs(counts);
        let held = pairs.iter().all(|(key, n)| {
            self.pairs
                .get(key)
                .and_then(|by_size| by_size.get(&m))
                .is_some_and(|held| held >= n)
        }) && self.agreement.can_remove(m, agreeing);
        if !held {
            return Err(AgreementError::NotHeld);
        }
        for (key, n) in pairs {
            let mut empty = false;
            if let Some(by_size) = self.pairs.get_mut(&key) {
                if let Some(held) = by_size.get_mut(&m) {
                    *held -= n;
                    if *held == 0 {
                        by_size.remove(&m);
                    }
                }
                empty = by_size.is_empty();
            }
            if empty {
                // Drop emptied cells so the tally is canonical: same data, same state.
                self.pairs.remove(&key);
            }
        }
        self.agreement.remove(m, agreeing);
        Ok(())
    }

    /// Krippendorff's alpha, `1 − (n−1)·Σ o_ck δ²_ck / Σ n_c n_k δ²_ck`, where `numeric` gives each
    /// value's number for the non-nominal levels.
    fn alpha(&self, level: Level, numeric: impl Fn(&K) -> Option<f64>) -> Statistic {
        if self.pairs.is_empty() {
            return Statistic::Undefined {
                reason: reasons::NO_PAIRABLE_UNITS,
            };
        }
        // Distinct values in order, their marginals n_c, and the coincidences o_ck by index.
        let values: Vec<&K> = {
            let set: BTreeSet<&K> = self.pairs.keys().map(|(c, _)| c).collect();
            set.into_iter().collect()
        };
        let index_of = |k: &K| values.binary_search(&k).ok();
        let mut marginals = vec![0.0; values.len()];
        let mut cells = Vec::with_capacity(self.pairs.len());
        for ((c, k), by_size) in &self.pairs {
            let o: f64 = by_size
                .iter()
                .map(|(&m, &n)| n as f64 / (m - 1) as f64)
                .sum();
            let (Some(ci), Some(ki)) = (index_of(c), index_of(k)) else {
                continue;
            };
            if let Some(slot) = marginals.get_mut(ci) {
                *slot += o;
            }
            cells.push((ci, ki, o));
        }
        if values.len() < 2 {
            return Statistic::Undefined {
                reason: reasons::ALL_IDENTICAL,
            };
        }
        let metric = match Metric::new(level, &values, &marginals, numeric) {
            Ok(metric) => metric,
            Err(reason) => return Statistic::Undefined { reason },
        };
        let total: f64 = marginals.iter().sum();
        let observed: f64 = cells.iter().map(|&(c, k, o)| o * metric.delta2(c, k)).sum();
        let expected = metric.expected_sum(&marginals);
        if expected.is_nan() || expected <= 0.0 {
            return Statistic::Undefined {
                reason: reasons::ALL_IDENTICAL,
            };
        }
        Statistic::Defined(1.0 - (total - 1.0) * observed / expected)
    }
}

/// The squared distance δ² between value indices at one level of measurement.
enum Metric {
    Nominal,
    /// Squared difference of positions: the numbers themselves for interval, midranks for
    /// ordinal.
    Positions(Vec<f64>),
    Ratio(Vec<f64>),
}

impl Metric {
    fn new<K>(
        level: Level,
        values: &[&K],
        marginals: &[f64],
        numeric: impl Fn(&K) -> Option<f64>,
    ) -> Result<Metric, &'static str> {
        if level == Level::Nominal {
            return Ok(Metric::Nominal);
        }
        let numbers: Vec<f64> = values
            .iter()
            .map(|v| numeric(v).filter(|x| x.is_finite()))
            .collect::<Option<_>>()
            .ok_or(reasons::NEEDS_NUMBERS)?;
        match level {
            Level::Nominal => Ok(Metric::Nominal),
            Level::Interval => Ok(Metric::Positions(numbers)),
            Level::Ordinal => Ok(Metric::Positions(midranks(&numbers, marginals))),
            Level::Ratio => {
                if numbers.iter().any(|&x| x < 0.0) {
                    Err(reasons::RATIO_NEEDS_NON_NEGATIVE)
                } else {
                    Ok(Metric::Ratio(numbers))
                }
            }
        }
    }

    fn delta2(&self, c: usize, k: usize) -> f64 {
        match self {
            Metric::Nominal => f64::from(u8::from(c != k)),
            Metric::Positions(p) => match (p.get(c), p.get(k)) {
                (Some(a), Some(b)) => (a - b) * (a - b),
                _ => 0.0,
            },
            Metric::Ratio(x) => match (x.get(c), x.get(k)) {
                (Some(a), Some(b)) if a + b > 0.0 => ((a - b) / (a + b)).powi(2),
                _ => 0.0,
            },
        }
    }

    /// `Σ_c Σ_k n_c n_k δ²_ck`. Closed forms keep nominal, ordinal and interval linear in the
    /// number of distinct values (continuous scores have many); ratio has none and is quadratic.
    fn expected_sum(&self, marginals: &[f64]) -> f64 {
        let total: f64 = marginals.iter().sum();
        match self {
            Metric::Nominal => total * total - marginals.iter().map(|n| n * n).sum::<f64>(),
            Metric::Positions(p) => {
                if p.windows(2).all(|w| w[0] == w[1]) {
                    // Distinct values at one position: no spread, exactly (not roughly) zero.
                    return 0.0;
                }
                // Σ Σ n_c n_k (p_c − p_k)² = 2n Σ n_c (p_c − p̄)², centred for accuracy.
                let mean = p.iter().zip(marginals).map(|(p, n)| p * n).sum::<f64>() / total;
                let spread: f64 = p
                    .iter()
                    .zip(marginals)
                    .map(|(p, n)| n * (p - mean) * (p - mean))
                    .sum();
                2.0 * total * spread
            }
            Metric::Ratio(_) => {
                let mut sum = 0.0;
                for (c, nc) in marginals.iter().enumerate() {
                    for (k, nk) in marginals.iter().enumerate() {
                        sum += nc * nk * self.delta2(c, k);
                    }
                }
                sum
            }
        }
    }
}

/// Krippendorff's ordinal metric, `δ_ck = Σ_{g=c..k} n_g − (n_c + n_k)/2`, is the difference of
/// midranks `cum_before(g) + n_g/2` in the pooled ratings. Values with equal numbers share a rank.
fn midranks(numbers: &[f64], marginals: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..numbers.len()).collect();
    order.sort_by(|&a, &b| numbers[a].total_cmp(&numbers[b]));
    let mut ranks = vec![0.0; numbers.len()];
    let mut below = 0.0;
    let mut start = 0;
    while start < order.len() {
        let x = numbers[order[start]];
        let end = order[start..]
            .iter()
            .position(|&i| numbers[i] != x)
            .map_or(order.len(), |offset| start + offset);
        let group = &order[start..end];
        let in_group: f64 = group.iter().map(|&i| marginals[i]).sum();
        for &i in group {
            ranks[i] = below + in_group / 2.0;
        }
        below += in_group;
        start = end;
    }
    ranks
}

/// Running Krippendorff's alpha over units that may gain, lose or change ratings.
///
/// Holds the coincidence matrix in exact integer form and computes alpha at any level on
/// request; a changed label is `remove_unit(old)` then `add_unit(new)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KrippendorffAccumulator<V> {
    tally: CoincidenceTally<V>,
}

impl<V> Default for KrippendorffAccumulator<V> {
    fn default() -> Self {
        KrippendorffAccumulator {
            tally: CoincidenceTally::default(),
        }
    }
}

impl<V: Label> KrippendorffAccumulator<V> {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a unit. A unit with fewer than two ratings is accepted but changes nothing: it has no
    /// pair to compare.
    pub fn add_unit(&mut self, unit: &Unit<V>) -> Result<(), AgreementError> {
        self.tally.add_counts(&unit.value_counts()?, 1);
        Ok(())
    }

    /// Removes a unit previously added with the same values (rater ids do not matter). Leaves
    /// the accumulator unchanged on error.
    pub fn remove_unit(&mut self, unit: &Unit<V>) -> Result<(), AgreementError> {
        self.tally.remove_counts(&unit.value_counts()?)
    }

    /// Krippendorff's alpha at `level`.
    pub fn statistic(&self, level: Level) -> Statistic {
        self.tally.alpha(level, V::numeric)
    }

    /// See [`Agreement::percent_agreement`].
    pub fn percent_agreement(&self) -> Option<f64> {
        self.tally.agreement.percent()
    }

    /// Units with at least two ratings.
    pub fn pairable_units(&self) -> u64 {
        self.tally.agreement.units()
    }

    /// Alpha with percent agreement and unit count.
    pub fn report(&self, level: Level) -> Agreement {
        Agreement {
            statistic: self.statistic(level),
            percent_agreement: self.percent_agreement(),
            units: self.pairable_units(),
        }
    }
}

/// Krippendorff's alpha over `units`; missing ratings allowed, units with fewer than two ratings
/// dropped.
pub fn krippendorff_alpha<V: Label>(
    units: &[Unit<V>],
    level: Level,
) -> Result<Agreement, AgreementError> {
    let mut acc = KrippendorffAccumulator::new();
    for unit in units {
        acc.add_unit(unit)?;
    }
    Ok(acc.report(level))
}

// ---------------------------------------------------------------------------------------------
// Bootstrap
// ---------------------------------------------------------------------------------------------

/// Share of resamples that must give a defined alpha for an interval to be reported. Below it,
/// the defined resamples are a biased subset (the skipped ones are all-agreeing resamples) and
/// an interval would mislead.
const MIN_DEFINED_SHARE: f64 = 0.5;

/// Percentile bootstrap confidence interval for Krippendorff's alpha.
///
/// Resamples the pairable units with replacement (`resamples` times, as many units as there
/// are), skips resamples where alpha is undefined, and returns the `(1 − confidence)/2` and
/// `(1 + confidence)/2` quantiles (linear interpolation between order statistics). `None` if
/// the arguments are out of range, a unit is invalid, there are no pairable units, or fewer than
/// half of the resamples (and fewer than two) gave a defined alpha. Deterministic for a seed.
pub fn bootstrap_ci<V: Label>(
    units: &[Unit<V>],
    level: Level,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<(f64, f64)> {
    if resamples == 0 || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let (numbers, contributions) = intern_units(units)?;
    if contributions.is_empty() {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut multiplicity = vec![0u64; contributions.len()];
    let mut estimates = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        multiplicity.fill(0);
        for _ in 0..contributions.len() {
            // Draw as u64, not usize, so the stream is the same on 32- and 64-bit targets.
            let pick = rng.gen_range(0..contributions.len() as u64) as usize;
            if let Some(slot) = multiplicity.get_mut(pick) {
                *slot += 1;
            }
        }
        let mut tally = CoincidenceTally::default();
        for (counts, &times) in contributions.iter().zip(&multiplicity) {
            tally.add_counts(counts, times);
        }
        let alpha = tally.alpha(level, |&i| numbers.get(i).copied().flatten());
        if let Some(value) = alpha.value() {
            estimates.push(value);
        }
    }
    let needed = ((resamples as f64 * MIN_DEFINED_SHARE).ceil() as usize).max(2);
    if estimates.len() < needed {
        return None;
    }
    estimates.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    Some((quantile(&estimates, tail), quantile(&estimates, 1.0 - tail)))
}

/// Replaces values by their index in sorted order (cheap keys for the many resamples), keeping
/// only pairable units. Returns each index's number and each unit's value counts.
#[allow(clippy::type_complexity)]
fn intern_units<V: Label>(
    units: &[Unit<V>],
) -> Option<(Vec<Option<f64>>, Vec<BTreeMap<usize, u64>>)> {
    let mut pairable = Vec::new();
    for unit in units {
        let counts = unit.value_counts().ok()?;
        if unit_shape(&counts).0 >= 2 {
            pairable.push(counts);
        }
    }
    let distinct: BTreeSet<&V> = pairable.iter().flat_map(|c| c.keys()).collect();
    let index: BTreeMap<&V, usize> = distinct.iter().enumerate().map(|(i, v)| (*v, i)).collect();
    let numbers = distinct.iter().map(|v| v.numeric()).collect();
    let contributions = pairable
        .iter()
        .map(|counts| {
            counts
                .iter()
                .filter_map(|(v, &n)| Some((*index.get(v)?, n)))
                .collect()
        })
        .collect();
    Some((numbers, contributions))
}

// ---------------------------------------------------------------------------------------------
// Fleiss' kappa
// ---------------------------------------------------------------------------------------------

/// Running Fleiss' kappa: per-category rating totals, the number of items per rater count, and
/// the agreeing rater pairs. All integers, so removal is exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleissAccumulator<V> {
    totals: BTreeMap<V, u64>,
    items_by_raters: BTreeMap<u64, u64>,
    agreement: PairwiseTally,
}

impl<V> Default for FleissAccumulator<V> {
    fn default() -> Self {
        FleissAccumulator {
            totals: BTreeMap::new(),
            items_by_raters: BTreeMap::new(),
            agreement: PairwiseTally::default(),
        }
    }
}

fn counts_of<V: Ord + Clone>(ratings: &[V]) -> BTreeMap<V, u64> {
    let mut counts = BTreeMap::new();
    for v in ratings {
        *counts.entry(v.clone()).or_insert(0) += 1;
    }
    counts
}

fn merge_counts<V: Ord + Clone>(counts: &[(V, u64)]) -> BTreeMap<V, u64> {
    let mut merged = BTreeMap::new();
    for (v, n) in counts {
        if *n > 0 {
            *merged.entry(v.clone()).or_insert(0) += n;
        }
    }
    merged
}

impl<V: Ord + Clone> FleissAccumulator<V> {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an item from its ratings (rater identity plays no part in Fleiss' kappa).
    pub fn add_item(&mut self, ratings: &[V]) {
        self.add(&counts_of(ratings));
    }

    /// Adds an item from `(category, count)` rows, the layout of published tables.
    pub fn add_item_counts(&mut self, counts: &[(V, u64)]) {
        self.add(&merge_counts(counts));
    }

    /// Removes an item added with the same ratings; unchanged on error.
    pub fn remove_item(&mut self, ratings: &[V]) -> Result<(), AgreementError> {
        self.remove(&counts_of(ratings))
    }

    /// Removes an item added with the same counts; unchanged on error.
    pub fn remove_item_counts(&mut self, counts: &[(V, u64)]) -> Result<(), AgreementError> {
        self.remove(&merge_counts(counts))
    }

    fn add(&mut self, counts: &BTreeMap<V, u64>) {
        let (m, agreeing) = unit_shape(counts);
        if m == 0 {
            return;
        }
        for (v, n) in counts {
            *self.totals.entry(v.clone()).or_insert(0) += n;
        }
        *self.items_by_raters.entry(m).or_insert(0) += 1;
        if m >= 2 {
            self.agreement.add(m, agreeing, 1);
        }
    }

    fn remove(&mut self, counts: &BTreeMap<V, u64>) -> Result<(), AgreementError> {
        let (m, agreeing) = unit_shape(counts);
        if m == 0 {
            return Ok(());
        }
        let held = counts
            .iter()
            .all(|(v, n)| self.totals.get(v).is_some_and(|t| t >= n))
            && self.items_by_raters.get(&m).is_some_and(|&i| i >= 1)
            && (m < 2 || self.agreement.can_remove(m, agreeing));
        if !held {
            return Err(AgreementError::NotHeld);
        }
        for (v, n) in counts {
            if let Some(total) = self.totals.get_mut(v) {
                *total -= n;
                if *total == 0 {
                    self.totals.remove(v);
                }
            }
        }
        if let Some(items) = self.items_by_raters.get_mut(&m) {
            *items -= 1;
            if *items == 0 {
                self.items_by_raters.remove(&m);
            }
        }
        if m >= 2 {
            self.agreement.remove(m, agreeing);
        }
        Ok(())
    }

    /// Items held (with at least one rating).
    pub fn items(&self) -> u64 {
        self.items_by_raters.values().sum()
    }

    /// Fleiss' kappa `(P̄ − P̄e)/(1 − P̄e)`, with `P̄` the mean per-item pairwise agreement and
    /// `P̄e = Σ_j p_j²` from the pooled category shares. Undefined unless every item has the same
    /// number (≥ 2) of ratings and at least two categories were used.
    pub fn statistic(&self) -> Statistic {
        let mut sizes = self.items_by_raters.iter();
        let (raters, items) = match (sizes.next(), sizes.next()) {
            (None, _) => {
                return Statistic::Undefined {
                    reason: reasons::NO_ITEMS,
                }
            }
            (Some(_), Some(_)) => {
                return Statistic::Undefined {
                    reason: reasons::FLEISS_UNEQUAL_RATERS,
                }
            }
            (Some((&raters, &items)), None) => (raters, items),
        };
        if raters < 2 {
            return Statistic::Undefined {
                reason: reasons::FLEISS_NEEDS_TWO_RATERS,
            };
        }
        let ratings = u128::from(raters) * u128::from(items);
        let sum_sq: u128 = self
            .totals
            .values()
            .map(|&t| u128::from(t) * u128::from(t))
            .sum();
        // (1 − P̄e)·N² in integers, so "all one category" is detected exactly.
        let squared_ratings = ratings.saturating_mul(ratings);
        let chance_disagreement = squared_ratings.saturating_sub(sum_sq);
        let Some(observed) = self.agreement.percent() else {
            return Statistic::Undefined {
                reason: reasons::NO_ITEMS,
            };
        };
        if chance_disagreement == 0 {
            return Statistic::Undefined {
                reason: reasons::ALL_IDENTICAL,
            };
        }
        let squared = squared_ratings as f64;
        let chance = sum_sq as f64 / squared;
        Statistic::Defined((observed - chance) / (chance_disagreement as f64 / squared))
    }

    /// See [`Agreement::percent_agreement`]; this is Fleiss' `P̄`.
    pub fn percent_agreement(&self) -> Option<f64> {
        self.agreement.percent()
    }

    /// Kappa with percent agreement and item count.
    pub fn report(&self) -> Agreement {
        Agreement {
            statistic: self.statistic(),
            percent_agreement: self.percent_agreement(),
            units: self.items(),
        }
    }
}

/// Fleiss' kappa from each item's ratings (items × raters).
pub fn fleiss_kappa<V: Ord + Clone>(items: &[Vec<V>]) -> Agreement {
    let mut acc = FleissAccumulator::new();
    for item in items {
        acc.add_item(item);
    }
    acc.report()
}

/// Fleiss' kappa from an items × categories count matrix (category = column index).
pub fn fleiss_kappa_from_counts(counts: &[Vec<u64>]) -> Agreement {
    let mut acc = FleissAccumulator::new();
    for row in counts {
        let item: Vec<(usize, u64)> = row.iter().copied().enumerate().collect();
        acc.add_item_counts(&item);
    }
    acc.report()
}

// ---------------------------------------------------------------------------------------------
// Cohen's kappa
// ---------------------------------------------------------------------------------------------

/// Running Cohen's kappa for two raters: the confusion counts (first rater's value, second
/// rater's value), plus categories declared up front.
///
/// Declaring the full scale matters for weighted kappa, whose weights depend on the rank of a
/// category among all categories, used or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CohenAccumulator<V> {
    table: BTreeMap<(V, V), u64>,
    declared: BTreeSet<V>,
}

impl<V> Default for CohenAccumulator<V> {
    fn default() -> Self {
        CohenAccumulator {
            table: BTreeMap::new(),
            declared: BTreeSet::new(),
        }
    }
}

impl<V: Label> CohenAccumulator<V> {
    /// An empty accumulator whose categories are those observed.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty accumulator on a fixed scale (observed values outside it are added to it).
    pub fn with_categories(categories: impl IntoIterator<Item = V>) -> Self {
        CohenAccumulator {
            table: BTreeMap::new(),
            declared: categories.into_iter().collect(),
        }
    }

    /// Adds one unit rated `first` by the first rater and `second` by the second.
    pub fn add_pair(&mut self, first: V, second: V) {
        self.add_pairs(first, second, 1);
    }

    /// Adds `count` identical pairs (a contingency-table cell).
    pub fn add_pairs(&mut self, first: V, second: V, count: u64) {
        if count > 0 {
            *self.table.entry((first, second)).or_insert(0) += count;
        }
    }

    /// Removes one pair; unchanged on error.
    pub fn remove_pair(&mut self, first: &V, second: &V) -> Result<(), AgreementError> {
        let key = (first.clone(), second.clone());
        match self.table.get_mut(&key) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    self.table.remove(&key);
                }
                Ok(())
            }
            _ => Err(AgreementError::NotHeld),
        }
    }

    /// Rating pairs held.
    pub fn pairs(&self) -> u64 {
        self.table.values().sum()
    }

    /// Share of pairs on which the raters agree.
    pub fn percent_agreement(&self) -> Option<f64> {
        let total = self.pairs();
        if total == 0 {
            return None;
        }
        let agreeing: u64 = self
            .table
            .iter()
            .filter(|((a, b), _)| a == b)
            .map(|(_, n)| n)
            .sum();
        Some(agreeing as f64 / total as f64)
    }

    /// Cohen's kappa in disagreement form, `1 − N·Σ d_ij n_ij / Σ d_ij r_i c_j`, with `d` = 1 off
    /// the diagonal (unweighted), `|i−j|` (linear) or `(i−j)²` (quadratic) on category ranks.
    /// Equal to `(p_o − p_e)/(1 − p_e)` with agreement weights `1 − d/d_max`; the scale `d_max`
    /// cancels, so everything up to the final division is exact integer arithmetic.
    pub fn statistic(&self, weighting: Weighting) -> Statistic {
        let total = self.pairs();
        if total == 0 {
            return Statistic::Undefined {
                reason: reasons::NO_PAIRS,
            };
        }
        let ranks = match self.ranks(weighting) {
            Ok(ranks) => ranks,
            Err(reason) => return Statistic::Undefined { reason },
        };
        let distance = |a: &V, b: &V| -> u128 {
            match (ranks.get(a), ranks.get(b)) {
                (Some(&ra), Some(&rb)) => {
                    let gap = u128::from(ra.abs_diff(rb));
                    match weighting {
                        Weighting::Unweighted => u128::from(a != b),
                        Weighting::Linear => gap,
                        Weighting::Quadratic => gap * gap,
                    }
                }
                _ => u128::from(a != b),
            }
        };
        let mut rows: BTreeMap<&V, u128> = BTreeMap::new();
        let mut columns: BTreeMap<&V, u128> = BTreeMap::new();
        let mut observed = 0u128;
        for ((a, b), &n) in &self.table {
            *rows.entry(a).or_insert(0) += u128::from(n);
            *columns.entry(b).or_insert(0) += u128::from(n);
            observed += distance(a, b) * u128::from(n);
        }
        let mut expected = 0u128;
        for (a, r) in &rows {
            for (b, c) in &columns {
                expected += distance(a, b) * r * c;
            }
        }
        if expected == 0 {
            return Statistic::Undefined {
                reason: reasons::ALL_IDENTICAL,
            };
        }
        Statistic::Defined(1.0 - total as f64 * observed as f64 / expected as f64)
    }

    /// Rank of each category (declared or observed) by its number, equal numbers sharing a rank.
    /// Unweighted kappa needs no order, so it gets an empty map.
    fn ranks(&self, weighting: Weighting) -> Result<BTreeMap<V, u64>, &'static str> {
        if weighting == Weighting::Unweighted {
            return Ok(BTreeMap::new());
        }
        let mut categories: BTreeSet<&V> = self.declared.iter().collect();
        for (a, b) in self.table.keys() {
            categories.insert(a);
            categories.insert(b);
        }
        let mut numbered = categories
            .into_iter()
            .map(|v| Some((v.numeric().filter(|x| x.is_finite())?, v)))
            .collect::<Option<Vec<_>>>()
            .ok_or(reasons::WEIGHTED_NEEDS_NUMBERS)?;
        numbered.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut ranks = BTreeMap::new();
        let mut rank = 0u64;
        let mut previous: Option<f64> = None;
        for (x, v) in numbered {
            if previous.is_some_and(|p| p != x) {
                rank += 1;
            }
            previous = Some(x);
            ranks.insert(v.clone(), rank);
        }
        Ok(ranks)
    }

    /// Kappa with percent agreement and pair count.
    pub fn report(&self, weighting: Weighting) -> Agreement {
        Agreement {
            statistic: self.statistic(weighting),
            percent_agreement: self.percent_agreement(),
            units: self.pairs(),
        }
    }
}

/// Cohen's kappa from paired ratings `(first rater, second rater)`; categories are the values
/// observed (use [`CohenAccumulator::with_categories`] to fix the scale for weighted kappa).
pub fn cohen_kappa<V: Label>(pairs: &[(V, V)], weighting: Weighting) -> Agreement {
    let mut acc = CohenAccumulator::new();
    for (a, b) in pairs {
        acc.add_pair(a.clone(), b.clone());
    }
    acc.report(weighting)
}

/// Cohen's kappa from a k × k contingency table (rows: first rater, columns: second rater,
/// categories ordered by index).
pub fn cohen_kappa_from_table(table: &[Vec<u64>], weighting: Weighting) -> Agreement {
    let k = table.len();
    if table.iter().any(|row| row.len() != k) {
        return Agreement {
            statistic: Statistic::Undefined {
                reason: reasons::TABLE_NOT_SQUARE,
            },
            percent_agreement: None,
            units: 0,
        };
    }
    let mut acc = CohenAccumulator::with_categories(0..k);
    for (i, row) in table.iter().enumerate() {
        for (j, &n) in row.iter().enumerate() {
            acc.add_pairs(i, j, n);
        }
    }
    acc.report(weighting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use serde::Deserialize;

    /// The published reference values. In the engine crate this is
    /// `concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/golden/agreement.json")`.
    const GOLDEN_PATH: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/golden/agreement.json"
    );

    #[derive(Deserialize)]
    struct Golden {
        krippendorff_alpha: Vec<AlphaCase>,
        fleiss_kappa: Vec<FleissCase>,
        cohen_kappa: Vec<CohenCase>,
        edge_cases: BTreeMap<String, String>,
    }

    #[derive(Deserialize)]
    struct AlphaCase {
        name: String,
        coders: Vec<Vec<Option<Value>>>,
        expected: BTreeMap<Level, f64>,
    }

    #[derive(Deserialize)]
    struct FleissCase {
        name: String,
        counts: Option<Vec<Vec<u64>>>,
        ratings: Option<Vec<Vec<Value>>>,
        categories: Option<Vec<Value>>,
        expected: f64,
    }

    #[derive(Deserialize)]
    struct CohenCase {
        name: String,
        table: Vec<Vec<u64>>,
        expected: BTreeMap<Weighting, f64>,
    }

    fn golden() -> (Golden, String) {
        let raw = std::fs::read_to_string(GOLDEN_PATH)
            .unwrap_or_else(|e| panic!("cannot read {GOLDEN_PATH}: {e}"));
        let parsed = serde_json::from_str(&raw).expect("golden file parses");
        (parsed, raw)
    }

    /// Half a unit in the last published decimal. The decimals are those of the shortest
    /// round-trip form of the parsed number, which is the JSON text unless the text had trailing
    /// zeros; the check that this text appears as a whole number in the file guards that case.
    fn published_tolerance(published: f64, raw: &str) -> f64 {
        let text = format!("{published}");
        let bytes = raw.as_bytes();
        let whole = raw.match_indices(&text).any(|(at, _)| {
            let before = at.checked_sub(1).and_then(|i| bytes.get(i)).copied();
            let after = bytes.get(at + text.len()).copied();
            let numeric = |b: Option<u8>| {
                b.is_some_and(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'E'))
            };
            !numeric(before) && !numeric(after)
        });
        assert!(
            whole,
            "{text} is not written that way in the golden file; set its tolerance by hand"
        );
        let decimals = text.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
        0.5 * 10f64.powi(-decimals) * (1.0 + 1e-9)
    }

    fn assert_published(what: &str, got: Statistic, published: f64, raw: &str) {
        let tolerance = published_tolerance(published, raw);
        let value = got
            .value()
            .unwrap_or_else(|| panic!("{what}: undefined ({got:?})"));
        let error = (value - published).abs();
        assert!(
            error <= tolerance,
            "{what}: got {value}, published {published}, |diff| {error:e} > {tolerance:e}"
        );
        println!(
            "{what}: got {value:.12} published {published} |diff| {error:.1e} <= {tolerance:.1e}"
        );
    }

    #[test]
    fn golden_krippendorff_alpha() {
        let (golden, raw) = golden();
        assert!(!golden.krippendorff_alpha.is_empty());
        for case in &golden.krippendorff_alpha {
            let units = units_from_rows(&case.coders);
            for (&level, &published) in &case.expected {
                let report = krippendorff_alpha(&units, level).expect("valid units");
                assert_published(
                    &format!("alpha {} {level:?}", case.name),
                    report.statistic,
                    published,
                    &raw,
                );
                assert!(report.percent_agreement.is_some());
            }
        }
    }

    #[test]
    fn golden_fleiss_kappa() {
        let (golden, raw) = golden();
        assert!(!golden.fleiss_kappa.is_empty());
        for case in &golden.fleiss_kappa {
            let report = match (&case.counts, &case.ratings) {
                (Some(counts), None) => fleiss_kappa_from_counts(counts),
                (None, Some(ratings)) => {
                    if let Some(categories) = &case.categories {
                        assert!(ratings.iter().flatten().all(|r| categories.contains(r)));
                    }
                    fleiss_kappa(ratings)
                }
                _ => panic!("{}: needs exactly one of counts / ratings", case.name),
            };
            assert_published(
                &format!("fleiss {}", case.name),
                report.statistic,
                case.expected,
                &raw,
            );
        }
    }

    #[test]
    fn golden_cohen_kappa() {
        let (golden, raw) = golden();
        assert!(!golden.cohen_kappa.is_empty());
        for case in &golden.cohen_kappa {
            let pairs = expand_table(&case.table);
            for (&weighting, &published) in &case.expected {
                let from_table = cohen_kappa_from_table(&case.table, weighting);
                assert_published(
                    &format!("cohen {} {weighting:?}", case.name),
                    from_table.statistic,
                    published,
                    &raw,
                );
                // Paired ratings on the same scale give exactly the same figure.
                let mut acc = CohenAccumulator::with_categories(0..case.table.len());
                for (a, b) in &pairs {
                    acc.add_pair(*a, *b);
                }
                assert_eq!(acc.report(weighting), from_table);
            }
        }
    }

    fn expand_table(table: &[Vec<u64>]) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for (i, row) in table.iter().enumerate() {
            for (j, &n) in row.iter().enumerate() {
                pairs.extend(std::iter::repeat_n((i, j), n as usize));
            }
        }
        pairs
    }

    /// Weighted kappa the textbook way, `(p_o − p_e)/(1 − p_e)` with agreement weights, as an
    /// independent check of the integer disagreement form (quadratic has no published value).
    fn textbook_weighted_kappa(table: &[Vec<u64>], power: i32) -> f64 {
        let k = table.len();
        let n: f64 = table.iter().flatten().map(|&x| x as f64).sum();
        let row: Vec<f64> = table
            .iter()
            .map(|r| r.iter().map(|&x| x as f64).sum())
            .collect();
        let col: Vec<f64> = (0..k)
            .map(|j| table.iter().map(|r| r[j] as f64).sum())
            .collect();
        let weight = |i: usize, j: usize| {
            if power == 0 {
                f64::from(u8::from(i == j))
            } else {
                1.0 - ((i as f64 - j as f64).abs() / (k as f64 - 1.0)).powi(power)
            }
        };
        let (mut po, mut pe) = (0.0, 0.0);
        for i in 0..k {
            for j in 0..k {
                po += weight(i, j) * table[i][j] as f64 / n;
                pe += weight(i, j) * row[i] * col[j] / (n * n);
            }
        }
        (po - pe) / (1.0 - pe)
    }

    #[test]
    fn weighted_kappa_matches_textbook_form() {
        let (golden, _) = golden();
        for case in &golden.cohen_kappa {
            for (weighting, power) in [
                (Weighting::Unweighted, 0),
                (Weighting::Linear, 1),
                (Weighting::Quadratic, 2),
            ] {
                let got = cohen_kappa_from_table(&case.table, weighting)
                    .statistic
                    .value();
                let want = textbook_weighted_kappa(&case.table, power);
                assert!(
                    (got.expect("defined") - want).abs() < 1e-12,
                    "{weighting:?}"
                );
            }
        }
        let square_missing = cohen_kappa_from_table(&[vec![1, 2], vec![3]], Weighting::Linear);
        assert_eq!(
            square_missing.statistic,
            Statistic::Undefined {
                reason: reasons::TABLE_NOT_SQUARE
            }
        );
    }

    #[test]
    fn golden_edge_cases_each_have_a_test() {
        let (golden, _) = golden();
        assert!(!golden.edge_cases.is_empty());
        for (name, rule) in &golden.edge_cases {
            println!("edge case {name}: {rule}");
            match name.as_str() {
                "single_value_everywhere" => single_value_everywhere(),
                "unit_with_one_rating" => unit_with_one_rating(),
                "fleiss_unequal_raters" => fleiss_unequal_raters(),
                other => panic!("edge case `{other}` in the golden file has no test"),
            }
        }
    }

    fn single_value_everywhere() {
        let identical =
            |v: Value| units_from_rows(&vec![vec![Some(v.clone()), Some(v.clone()), None]; 3]);
        let cases = [
            (identical(Value::from("YES")), vec![Level::Nominal]),
            (
                identical(Value::from(3.0)),
                vec![
                    Level::Nominal,
                    Level::Ordinal,
                    Level::Interval,
                    Level::Ratio,
                ],
            ),
        ];
        for (units, levels) in cases {
            for level in levels {
                let report = krippendorff_alpha(&units, level).expect("valid");
                assert_eq!(
                    report.statistic,
                    Statistic::Undefined {
                        reason: reasons::ALL_IDENTICAL
                    }
                );
                assert_eq!(report.percent_agreement, Some(1.0));
                // Serialised for the UI it is data, not an error and not 1.0.
                let json = serde_json::to_value(report).expect("serialises");
                assert_eq!(
                    json["statistic"]["undefined"]["reason"],
                    reasons::ALL_IDENTICAL
                );
                assert_eq!(json["percent_agreement"], 1.0);
            }
            assert_eq!(bootstrap_ci(&units, Level::Nominal, 200, 0.95, 1), None);
        }
        let fleiss = fleiss_kappa(&vec![vec!["A"; 4]; 5]);
        assert_eq!(
            fleiss.statistic,
            Statistic::Undefined {
                reason: reasons::ALL_IDENTICAL
            }
        );
        assert_eq!(fleiss.percent_agreement, Some(1.0));
        for weighting in [
            Weighting::Unweighted,
            Weighting::Linear,
            Weighting::Quadratic,
        ] {
            let cohen = cohen_kappa(&[(2i64, 2i64); 6], weighting);
            assert_eq!(
                cohen.statistic,
                Statistic::Undefined {
                    reason: reasons::ALL_IDENTICAL
                }
            );
            assert_eq!(cohen.percent_agreement, Some(1.0));
            // A declared scale does not rescue it: both raters still used one category.
            let mut acc = CohenAccumulator::with_categories(1i64..=5);
            acc.add_pairs(2, 2, 6);
            assert!(!acc.statistic(weighting).is_defined());
        }
    }

    fn unit_with_one_rating() {
        let (golden, _) = golden();
        for case in &golden.krippendorff_alpha {
            let units = units_from_rows(&case.coders);
            let pairable: Vec<Unit<Value>> = units
                .iter()
                .filter(|u| u.ratings.len() >= 2)
                .cloned()
                .collect();
            let mut with_extra = units.clone();
            with_extra.push(Unit::new(vec![(0, Value::from(42.0))]));
            with_extra.push(Unit::new(vec![]));
            for level in [
                Level::Nominal,
                Level::Ordinal,
                Level::Interval,
                Level::Ratio,
            ] {
                let all = krippendorff_alpha(&with_extra, level).expect("valid");
                assert_eq!(all, krippendorff_alpha(&pairable, level).expect("valid"));
                assert_eq!(all.units, pairable.len() as u64);
            }
        }
        let singletons = units_from_rows(&[vec![Some(1i64), None], vec![None, Some(2)]]);
        let report = krippendorff_alpha(&singletons, Level::Interval).expect("valid");
        assert_eq!(
            report.statistic,
            Statistic::Undefined {
                reason: reasons::NO_PAIRABLE_UNITS
            }
        );
        assert_eq!(report.percent_agreement, None);
        assert_eq!(report.units, 0);
    }

    fn fleiss_unequal_raters() {
        let items = vec![vec!["a", "a", "b"], vec!["a", "b"], vec!["b", "b", "b"]];
        let report = fleiss_kappa(&items);
        assert_eq!(
            report.statistic,
            Statistic::Undefined {
                reason: reasons::FLEISS_UNEQUAL_RATERS
            }
        );
        assert!(reasons::FLEISS_UNEQUAL_RATERS.contains("Krippendorff's alpha"));
        assert!(report.percent_agreement.is_some());
        // The advice holds: alpha handles the same data.
        let units: Vec<Unit<&str>> = items
            .iter()
            .map(|item| {
                Unit::new(
                    item.iter()
                        .enumerate()
                        .map(|(r, v)| (r as RaterId, *v))
                        .collect(),
                )
            })
            .collect();
        assert!(krippendorff_alpha(&units, Level::Nominal)
            .expect("valid")
            .statistic
            .is_defined());
        // Removing the odd item makes Fleiss defined again.
        let mut acc = FleissAccumulator::new();
        for item in &items {
            acc.add_item(item);
        }
        acc.remove_item(&items[1]).expect("held");
        assert!(acc.statistic().is_defined());
    }

    /// Adds `units` in a shuffled order interleaved with decoys, removes the decoys, and checks
    /// the result is identical to the batch figure.
    #[test]
    fn krippendorff_accumulator_is_order_free() {
        let (golden, _) = golden();
        let mut rng = StdRng::seed_from_u64(7);
        for case in &golden.krippendorff_alpha {
            let units = units_from_rows(&case.coders);
            let mut decoys: Vec<Unit<Value>> = (0..5)
                .map(|i| {
                    let pool: Vec<Value> = units.iter().flat_map(|u| u.values().cloned()).collect();
                    let ratings = (0..(2 + i % 3))
                        .map(|r| {
                            (
                                r as RaterId,
                                pool.choose(&mut rng).cloned().unwrap_or(Value::from(0.0)),
                            )
                        })
                        .collect();
                    Unit::new(ratings)
                })
                .collect();
            decoys.push(Unit::new(vec![
                (0, Value::from(99.0)),
                (1, Value::from(98.0)),
            ]));
            for _ in 0..10 {
                let mut ops: Vec<(bool, &Unit<Value>)> = units
                    .iter()
                    .map(|u| (true, u))
                    .chain(decoys.iter().map(|u| (false, u)))
                    .collect();
                ops.shuffle(&mut rng);
                let mut acc = KrippendorffAccumulator::new();
                for (_, unit) in &ops {
                    acc.add_unit(unit).expect("valid");
                }
                ops.shuffle(&mut rng);
                for (keep, unit) in &ops {
                    if !keep {
                        acc.remove_unit(unit).expect("held");
                    }
                }
                for level in [
                    Level::Nominal,
                    Level::Ordinal,
                    Level::Interval,
                    Level::Ratio,
                ] {
                    assert_eq!(
                        acc.report(level),
                        krippendorff_alpha(&units, level).expect("valid")
                    );
                }
            }
        }
    }

    #[test]
    fn krippendorff_changed_label_is_remove_then_add() {
        let (golden, _) = golden();
        let case = golden
            .krippendorff_alpha
            .iter()
            .find(|c| c.expected.len() == 4)
            .expect("a case with all four levels");
        let units = units_from_rows(&case.coders);
        let mut acc = KrippendorffAccumulator::new();
        for unit in &units {
            acc.add_unit(unit).expect("valid");
        }
        let mut changed = units.clone();
        changed[5].ratings[0].1 = Value::from(5.0);
        acc.remove_unit(&units[5]).expect("held");
        acc.add_unit(&changed[5]).expect("valid");
        for level in [
            Level::Nominal,
            Level::Ordinal,
            Level::Interval,
            Level::Ratio,
        ] {
            let batch = krippendorff_alpha(&changed, level).expect("valid");
            assert_eq!(acc.report(level), batch);
            assert_ne!(batch, krippendorff_alpha(&units, level).expect("valid"));
        }
        // Removing what is not held fails and changes nothing.
        let before = acc.clone();
        let stranger = Unit::new(vec![(0, Value::from(7.0)), (1, Value::from(8.0))]);
        assert_eq!(acc.remove_unit(&stranger), Err(AgreementError::NotHeld));
        assert_eq!(acc, before);
        // A rater may not rate a unit twice.
        let twice = Unit::new(vec![(3, Value::from(1.0)), (3, Value::from(1.0))]);
        assert_eq!(
            acc.add_unit(&twice),
            Err(AgreementError::DuplicateRater { rater: 3 })
        );
        assert_eq!(acc, before);
    }

    #[test]
    fn fleiss_accumulator_is_order_free() {
        let (golden, _) = golden();
        let mut rng = StdRng::seed_from_u64(11);
        for case in &golden.fleiss_kappa {
            let items: Vec<Vec<(usize, u64)>> = match (&case.counts, &case.ratings) {
                (Some(counts), _) => counts
                    .iter()
                    .map(|r| r.iter().copied().enumerate().collect())
                    .collect(),
                (_, Some(ratings)) => ratings
                    .iter()
                    .map(|r| {
                        let numbers: Vec<usize> = r
                            .iter()
                            .filter_map(|v| v.numeric())
                            .map(|x| x as usize)
                            .collect();
                        counts_of(&numbers).into_iter().collect()
                    })
                    .collect(),
                _ => unreachable!(),
            };
            let mut batch = FleissAccumulator::new();
            for item in &items {
                batch.add_item_counts(item);
            }
            let decoys = [vec![(0usize, 1u64), (3, 2)], items[0].clone(), vec![(9, 1)]];
            for _ in 0..10 {
                let mut ops: Vec<(bool, &Vec<(usize, u64)>)> = items
                    .iter()
                    .map(|i| (true, i))
                    .chain(decoys.iter().map(|i| (false, i)))
                    .collect();
                ops.shuffle(&mut rng);
                let mut acc = FleissAccumulator::new();
                for (_, item) in &ops {
                    acc.add_item_counts(item);
                }
                assert_eq!(
                    acc.statistic(),
                    Statistic::Undefined {
                        reason: reasons::FLEISS_UNEQUAL_RATERS
                    }
                );
                ops.shuffle(&mut rng);
                for (keep, item) in &ops {
                    if !keep {
                        acc.remove_item_counts(item).expect("held");
                    }
                }
                assert_eq!(acc, batch);
                assert_eq!(acc.report(), batch.report());
            }
            assert_eq!(
                batch.remove_item_counts(&[(0, 99)]),
                Err(AgreementError::NotHeld)
            );
        }
        // Ratings and counts are two spellings of the same item.
        let mut by_ratings = FleissAccumulator::new();
        by_ratings.add_item(&[2usize, 2, 0]);
        let mut by_counts = FleissAccumulator::new();
        by_counts.add_item_counts(&[(0usize, 1), (2, 2), (1, 0)]);
        assert_eq!(by_ratings, by_counts);
    }

    #[test]
    fn cohen_accumulator_is_order_free() {
        let (golden, _) = golden();
        let mut rng = StdRng::seed_from_u64(13);
        for case in &golden.cohen_kappa {
            let pairs = expand_table(&case.table);
            let decoys = [(0usize, 2usize), (2, 0), (1, 1)];
            for _ in 0..10 {
                let mut ops: Vec<(bool, (usize, usize))> = pairs
                    .iter()
                    .map(|p| (true, *p))
                    .chain(decoys.iter().map(|p| (false, *p)))
                    .collect();
                ops.shuffle(&mut rng);
                let mut acc = CohenAccumulator::with_categories(0..case.table.len());
                for (_, (a, b)) in &ops {
                    acc.add_pair(*a, *b);
                }
                ops.shuffle(&mut rng);
                for (keep, (a, b)) in &ops {
                    if !keep {
                        acc.remove_pair(a, b).expect("held");
                    }
                }
                for weighting in [
                    Weighting::Unweighted,
                    Weighting::Linear,
                    Weighting::Quadratic,
                ] {
                    assert_eq!(
                        acc.report(weighting),
                        cohen_kappa_from_table(&case.table, weighting)
                    );
                }
            }
        }
        let mut acc = CohenAccumulator::<i64>::new();
        assert_eq!(acc.remove_pair(&1, &2), Err(AgreementError::NotHeld));
        // Weighted kappa needs ordered categories; unweighted does not.
        let labels = cohen_kappa(&[("a", "b"), ("b", "b"), ("a", "a")], Weighting::Linear);
        assert_eq!(
            labels.statistic,
            Statistic::Undefined {
                reason: reasons::WEIGHTED_NEEDS_NUMBERS
            }
        );
        assert!(
            cohen_kappa(&[("a", "b"), ("b", "b"), ("a", "a")], Weighting::Unweighted)
                .statistic
                .is_defined()
        );
    }

    #[test]
    fn paired_ratings_feed_cohen() {
        let units = units_from_rows(&[
            vec![Some(1i64), Some(2), None, Some(3)],
            vec![Some(1), Some(3), Some(2), Some(3)],
        ]);
        assert_eq!(paired_ratings(&units, 0, 1), vec![(1, 1), (2, 3), (3, 3)]);
        let report = cohen_kappa(&paired_ratings(&units, 0, 1), Weighting::Unweighted);
        assert_eq!(report.units, 3);
        assert_eq!(report.percent_agreement, Some(2.0 / 3.0));
    }

    #[test]
    fn percent_agreement_is_mean_pairwise_share() {
        // Unit 1: 3 raters, 1 of 3 pairs agree; unit 2: 2 raters agree; unit 3: one rating (dropped).
        let units = units_from_rows(&[
            vec![Some("a"), Some("x"), Some("z")],
            vec![Some("a"), Some("x"), None],
            vec![Some("b"), None, None],
        ]);
        let share = percent_agreement(&units).expect("valid").expect("pairable");
        assert!((share - (1.0 / 3.0 + 1.0) / 2.0).abs() < 1e-15);
    }

    #[test]
    fn values_compare_sensibly() {
        assert_eq!(Value::from(-0.0), Value::from(0.0));
        assert_eq!(Value::from(3i64), Value::from(3.0));
        assert_ne!(Value::from("3"), Value::from(3.0));
        assert!(Value::from(2.0) < Value::from(10.0));
        assert_eq!(Value::Number(f64::NAN).numeric(), None);
        let parsed: Vec<Option<Value>> =
            serde_json::from_str(r#"[1, "YES", null, 2.5]"#).expect("parses");
        assert_eq!(
            parsed,
            vec![
                Some(Value::from(1.0)),
                Some(Value::from("YES")),
                None,
                Some(Value::from(2.5))
            ]
        );
        // Non-numeric values make the numeric levels undefined, not wrong.
        let units = units_from_rows(&[
            vec![Some(Value::from("a")), Some(Value::from(1.0))],
            vec![Some(Value::from("b")), Some(Value::from(2.0))],
        ]);
        let interval = krippendorff_alpha(&units, Level::Interval).expect("valid");
        assert_eq!(
            interval.statistic,
            Statistic::Undefined {
                reason: reasons::NEEDS_NUMBERS
            }
        );
        let negative = units_from_rows(&[vec![Some(-1i64), Some(2)], vec![Some(-1), Some(3)]]);
        assert_eq!(
            krippendorff_alpha(&negative, Level::Ratio)
                .expect("valid")
                .statistic,
            Statistic::Undefined {
                reason: reasons::RATIO_NEEDS_NON_NEGATIVE
            }
        );
        assert!(krippendorff_alpha(&negative, Level::Interval)
            .expect("valid")
            .statistic
            .is_defined());
    }

    #[test]
    fn ordinal_distance_is_krippendorff_sum_form() {
        // δ_ck = Σ_{g=c..k} n_g − (n_c + n_k)/2, checked directly against the midrank shortcut.
        let numbers = [1.0, 2.0, 4.0, 5.0];
        let marginals = [3.0, 0.5, 7.0, 2.5];
        let ranks = midranks(&numbers, &marginals);
        for c in 0..4 {
            for k in c..4 {
                let sum: f64 = marginals[c..=k].iter().sum();
                let delta = sum - (marginals[c] + marginals[k]) / 2.0;
                assert!((delta - (ranks[k] - ranks[c])).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn bootstrap_contains_point_estimate_and_is_deterministic() {
        let (golden, _) = golden();
        for case in &golden.krippendorff_alpha {
            let units = units_from_rows(&case.coders);
            for &level in case.expected.keys() {
                let point = krippendorff_alpha(&units, level)
                    .expect("valid")
                    .statistic
                    .value()
                    .expect("defined");
                let ci = bootstrap_ci(&units, level, 1000, 0.95, 2024).expect("interval");
                println!(
                    "bootstrap {} {level:?}: {point:.4} in [{:.4}, {:.4}]",
                    case.name, ci.0, ci.1
                );
                assert!(
                    ci.0 <= point && point <= ci.1,
                    "{}: {point} not in {ci:?}",
                    case.name
                );
                assert_eq!(Some(ci), bootstrap_ci(&units, level, 1000, 0.95, 2024));
            }
        }
        let units = units_from_rows(&golden.krippendorff_alpha[0].coders);
        assert_eq!(bootstrap_ci(&units, Level::Nominal, 0, 0.95, 1), None);
        assert_eq!(bootstrap_ci(&units, Level::Nominal, 100, 1.0, 1), None);
        assert_eq!(bootstrap_ci(&units, Level::Nominal, 100, f64::NAN, 1), None);
        assert_eq!(
            bootstrap_ci::<Value>(&[], Level::Nominal, 100, 0.9, 1),
            None
        );
    }

    /// Three raters on a 1–5 scale who report the true value 70 % of the time.
    fn synthetic_units(count: usize, seed: u64) -> Vec<Unit<i64>> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..count)
            .map(|_| {
                let truth = rng.gen_range(1..=5i64);
                let ratings = (0..3)
                    .map(|r| {
                        let value = if rng.gen_bool(0.7) {
                            truth
                        } else {
                            rng.gen_range(1..=5)
                        };
                        (r as RaterId, value)
                    })
                    .collect();
                Unit::new(ratings)
            })
            .collect()
    }

    #[test]
    fn bootstrap_narrows_as_data_grows() {
        for level in [
            Level::Nominal,
            Level::Ordinal,
            Level::Interval,
            Level::Ratio,
        ] {
            let width = |n: usize| {
                let units = synthetic_units(n, 5);
                let (lo, hi) = bootstrap_ci(&units, level, 500, 0.95, 99).expect("interval");
                hi - lo
            };
            let (small, large) = (width(25), width(400));
            println!("bootstrap width {level:?}: 25 units {small:.4}, 400 units {large:.4}");
            assert!(large < small / 2.0, "{level:?}: {large} vs {small}");
        }
    }
}
