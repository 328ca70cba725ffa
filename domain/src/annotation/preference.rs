//! Side-by-side preference: a rater reads one input and two outputs, shown as A (left) and B
//! (right) with the sides drawn at random per pair, and says which is better. From the labels:
//! win rates per pair of checkpoints, Bradley–Terry ratings across all of them, and how often
//! each rater (and everyone) picks the left side, which sides drawn at random make 50% for a
//! rater without position bias.
//!
//! Intervals come from one bootstrap that resamples pairs (all of a pair's labels together,
//! since raters of one pair read the same two outputs), so win rates and ratings are honest
//! when each pair has several raters.

use crate::stats::proportion::wilson;
use crate::stats::{quantile, Interval, DEFAULT_CONFIDENCE};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A rater's answer on a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preference {
    /// The left output (A) is better.
    A,
    /// The right output (B) is better.
    B,
    /// Equally good.
    Tie,
    /// Neither is acceptable: a tie for ratings, counted apart.
    BothBad,
}

impl Preference {
    pub const ALL: [Preference; 4] = [
        Preference::A,
        Preference::B,
        Preference::Tie,
        Preference::BothBad,
    ];

    /// The stored and sent form: `a`, `b`, `tie` or `both_bad`.
    pub fn as_str(self) -> &'static str {
        match self {
            Preference::A => "a",
            Preference::B => "b",
            Preference::Tie => "tie",
            Preference::BothBad => "both_bad",
        }
    }

    pub fn parse(text: &str) -> Result<Preference, String> {
        Preference::ALL
            .into_iter()
            .find(|choice| choice.as_str() == text)
            .ok_or_else(|| format!("a preference is `a`, `b`, `tie` or `both_bad`, not `{text}`"))
    }

    /// In words, for people.
    pub fn words(self) -> &'static str {
        match self {
            Preference::A => "A is better",
            Preference::B => "B is better",
            Preference::Tie => "tie",
            Preference::BothBad => "both bad",
        }
    }
}

/// The most pairs one request may send.
pub const MAX_PAIRS_PER_REQUEST: usize = 5_000;
/// The most raters a pair may ask for.
pub const MAX_RATERS_PER_PAIR: i64 = 5;

/// Which pairs a researcher sends from the Compare page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairSelection {
    /// The two checkpoints' verdicts differ.
    Differ,
    /// Triage escalated either side past its first judge (a judge was unsure), or left it
    /// uncertain.
    Unsure,
    /// A uniform sample of the cases both runs answered.
    Random,
}

impl PairSelection {
    pub const ALL: [PairSelection; 3] = [
        PairSelection::Differ,
        PairSelection::Unsure,
        PairSelection::Random,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PairSelection::Differ => "differ",
            PairSelection::Unsure => "unsure",
            PairSelection::Random => "random",
        }
    }

    pub fn parse(text: &str) -> Result<PairSelection, String> {
        PairSelection::ALL
            .into_iter()
            .find(|selection| selection.as_str() == text)
            .ok_or_else(|| {
                format!("pairs are chosen by `differ`, `unsure` or `random`, not `{text}`")
            })
    }
}

/// A request and how far its raters are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRequestSummary {
    pub id: i64,
    pub eval_id: i64,
    pub eval_name: String,
    pub run_a: i64,
    pub run_b: i64,
    pub checkpoint_a: String,
    pub checkpoint_b: String,
    pub selection: String,
    pub pairs: i64,
    pub labels_needed: i64,
    /// Pairs with all their labels.
    pub pairs_done: i64,
    pub labels: i64,
    pub note: String,
    pub requested_by: String,
    pub created_at: i64,
    /// The rubric (`name@version`) whose dimensions raters compare the outputs on, if any.
    #[serde(default)]
    pub rubric: Option<String>,
    /// The pairwise judge asked first (its grader id), if any, and the pairs it decided alone.
    #[serde(default)]
    pub judge: Option<String>,
    #[serde(default)]
    pub judge_decided: i64,
}

/// One pair to create: the work item shown on the left (as A) and on the right (as B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrawnPair {
    pub left: i64,
    pub right: i64,
}

/// Draws up to `count` of the candidate pairs (`(run A's item, run B's item)`), uniformly with
/// `seed`, and for each draws which run's output is shown on the left.
pub fn draw_pairs(candidates: &[(i64, i64)], count: usize, seed: u64) -> Vec<DrawnPair> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut chosen: Vec<(i64, i64)> = candidates.to_vec();
    // Sorted first, so the draw depends on the seed and the set, not the database's order.
    chosen.sort_unstable();
    chosen.shuffle(&mut rng);
    chosen.truncate(count);
    chosen
        .into_iter()
        .map(|(a, b)| {
            if rng.gen::<bool>() {
                DrawnPair { left: a, right: b }
            } else {
                DrawnPair { left: b, right: a }
            }
        })
        .collect()
}

/// A pair's verdict from its labels, each weighted by its rater's record: the choice with the
/// most weight; `None` when two choices share the most (a split).
pub fn decide_pair(votes: &[(Preference, f64)]) -> Option<Preference> {
    let mut weights = [0.0f64; 4];
    for (choice, weight) in votes {
        weights[*choice as usize] += weight;
    }
    let best = weights.iter().cloned().fold(0.0f64, f64::max);
    if best <= 0.0 {
        return None;
    }
    let mut leaders = Preference::ALL
        .into_iter()
        .filter(|choice| (weights[*choice as usize] - best).abs() <= 1e-9);
    let leader = leaders.next();
    match leaders.next() {
        Some(_) => None,
        None => leader,
    }
}

/// A rater's choices per dimension of the rubric a pair asks, by dimension key.
pub type DimensionChoices = std::collections::BTreeMap<String, Preference>;

/// Checks a rater's choices per dimension against the rubric their pair asks: one choice for
/// each of its dimensions, and none for a dimension it lacks.
pub fn check_dimension_choices(
    rubric: &crate::annotation::rubric::Rubric,
    choices: &DimensionChoices,
) -> Result<(), String> {
    if let Some(key) = choices.keys().find(|key| rubric.dimension(key).is_none()) {
        return Err(format!("the rubric has no dimension `{key}`"));
    }
    match rubric
        .dimensions
        .iter()
        .find(|dimension| !choices.contains_key(&dimension.key))
    {
        Some(missing) => Err(format!(
            "say which output is better on dimension `{}` ({})",
            missing.key, missing.question
        )),
        None => Ok(()),
    }
}

/// Choices per dimension in words, in the rubric's order: (question, choice).
pub fn choices_in_words(
    rubric: &crate::annotation::rubric::Rubric,
    choices: &DimensionChoices,
) -> Vec<(String, String)> {
    rubric
        .dimensions
        .iter()
        .filter_map(|dimension| {
            let choice = choices.get(&dimension.key)?;
            Some((dimension.question.clone(), choice.words().to_string()))
        })
        .collect()
}

/// A pair's consensus as kept on its task: the decided choice (by the raters, or a reviewer's
/// correction), or a split waiting for a reviewer.
pub fn pair_consensus(decided: Option<Preference>) -> serde_json::Value {
    match decided {
        Some(choice) => serde_json::json!({ "choice": choice.as_str() }),
        None => serde_json::json!({ "split": true }),
    }
}

/// The decided choice in a pair's consensus (`None`: a split, or unreadable).
pub fn decided_choice(consensus: &str) -> Option<Preference> {
    let value: serde_json::Value = serde_json::from_str(consensus).ok()?;
    Preference::parse(value.get("choice")?.as_str()?).ok()
}

/// One label on a pair, placed among the contestants (checkpoints, numbered from 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judgement {
    /// The pair (its task): labels of one pair are resampled together.
    pub pair: i64,
    pub left: usize,
    pub right: usize,
    pub rater: u64,
    pub choice: Preference,
}

/// How one checkpoint fared against another over the labels between them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WinRate {
    pub first: usize,
    pub second: usize,
    pub first_wins: u64,
    pub second_wins: u64,
    pub ties: u64,
    pub both_bad: u64,
    pub pairs: u64,
    /// The first's share of the decisive labels (ties and both-bad apart).
    pub rate: Option<f64>,
    /// Bootstrap percentile interval over pairs.
    pub interval: Option<Interval>,
}

/// A checkpoint's Bradley–Terry rating on the Elo scale (400 points: 10 to 1 odds), where
/// 1000 is the strength of the reference every checkpoint is tied with once (see
/// [`fit_bradley_terry`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rating {
    pub contestant: usize,
    pub rating: f64,
    pub interval: Option<Interval>,
    /// Labels this checkpoint appears in.
    pub labels: u64,
}

/// How often the left output won among decisive labels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PositionBias {
    /// The rater (`None`: everyone).
    pub rater: Option<u64>,
    pub left_wins: u64,
    pub decisive: u64,
    pub rate: Option<f64>,
    /// A rater's Wilson interval, or everyone's from the bootstrap over pairs; an interval
    /// without 50% says the side shown first sways the choice.
    pub interval: Option<Interval>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreferenceReport {
    pub pairs: u64,
    pub labels: u64,
    pub win_rates: Vec<WinRate>,
    /// Best first.
    pub ratings: Vec<Rating>,
    pub position_bias: PositionBias,
    pub position_bias_by_rater: Vec<PositionBias>,
    pub resamples: usize,
}

/// A pair's labels folded into what the statistics need.
#[derive(Clone, Copy, Debug, Default)]
struct PairTally {
    left: usize,
    right: usize,
    left_wins: u64,
    right_wins: u64,
    ties: u64,
    both_bad: u64,
}

impl PairTally {
    fn games(&self) -> u64 {
        self.left_wins + self.right_wins + self.ties + self.both_bad
    }
}

/// Sums over some pairs: per ordered contestant pair, the points the first earned (a tie is
/// half a point each) and the games; per unordered pair, decisive wins.
struct Table {
    contestants: usize,
    points: Vec<f64>,
    games: Vec<f64>,
    wins: Vec<u64>,
    /// Decisive labels, and those the left side won.
    decisive: u64,
    left_won: u64,
}

impl Table {
    fn new(contestants: usize) -> Table {
        let cells = contestants * contestants;
        Table {
            contestants,
            points: vec![0.0; cells],
            games: vec![0.0; cells],
            wins: vec![0; cells],
            decisive: 0,
            left_won: 0,
        }
    }

    fn clear(&mut self) {
        self.points.fill(0.0);
        self.games.fill(0.0);
        self.wins.fill(0);
        self.decisive = 0;
        self.left_won = 0;
    }

    fn add(&mut self, tally: &PairTally) {
        self.add_times(tally, 1);
    }

    /// Adds `times` pairs with the same labels as `tally`.
    fn add_times(&mut self, tally: &PairTally, times: u64) {
        let n = self.contestants;
        let (i, j) = (tally.left, tally.right);
        if times == 0 {
            return;
        }
        if i == j {
            // Both sides one checkpoint: no rating or win rate, but the sides still count.
            self.decisive += (tally.left_wins + tally.right_wins) * times;
            self.left_won += tally.left_wins * times;
            return;
        }
        let weight = times as f64;
        let draws = (tally.ties + tally.both_bad) as f64 / 2.0;
        let games = tally.games() as f64;
        self.points[i * n + j] += (tally.left_wins as f64 + draws) * weight;
        self.points[j * n + i] += (tally.right_wins as f64 + draws) * weight;
        self.games[i * n + j] += games * weight;
        self.games[j * n + i] += games * weight;
        self.wins[i * n + j] += tally.left_wins * times;
        self.wins[j * n + i] += tally.right_wins * times;
        self.decisive += (tally.left_wins + tally.right_wins) * times;
        self.left_won += tally.left_wins * times;
    }

    /// The first's share of decisive games against the second.
    fn win_rate(&self, first: usize, second: usize) -> Option<f64> {
        let n = self.contestants;
        let won = self.wins[first * n + second];
        let lost = self.wins[second * n + first];
        (won + lost > 0).then(|| won as f64 / (won + lost) as f64)
    }
}

/// Bradley–Terry ratings on the Elo scale by maximum likelihood: `points[i·n + j]` is what
/// contestant `i` earned against `j` (a tie is half a point each), `games[i·n + j]` how often
/// they met. Every contestant also plays one tied game against a fixed reference of strength 1
/// (rating 1000): a weak prior that keeps a checkpoint that never lost (or never won, or met no
/// one) at a finite rating and fixes the scale's origin.
pub fn fit_bradley_terry(contestants: usize, points: &[f64], games: &[f64]) -> Vec<f64> {
    let mut log_strength = vec![0.0f64; contestants];
    fit_log_strengths(contestants, points, games, &mut log_strength);
    elo_ratings(&log_strength)
}

/// Log-strengths on the Elo scale: 1000 + 400 · log10(strength).
fn elo_ratings(log_strength: &[f64]) -> Vec<f64> {
    log_strength
        .iter()
        .map(|theta| 1000.0 + 400.0 * theta / std::f64::consts::LN_10)
        .collect()
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Newton's method on the log-strengths θ from their values in `theta`. The log-likelihood
/// (with the reference games) is strictly concave, so each step solves the Hessian's system
/// and a few steps converge; Hunter's MM updates, the textbook alternative, crawl along the
/// overall scale, which only the reference games pin down (thousands of rounds at 100,000
/// games). A bootstrap refit starting from the point estimate takes two or three steps.
fn fit_log_strengths(contestants: usize, points: &[f64], games: &[f64], theta: &mut [f64]) {
    const MAX_STEPS: usize = 100;
    const TOLERANCE: f64 = 1e-10;
    let n = contestants;
    let mut gradient = vec![0.0f64; n];
    let mut curvature = vec![0.0f64; n * n];
    for _ in 0..MAX_STEPS {
        // The gradient, and minus the Hessian (positive definite).
        gradient.fill(0.0);
        curvature.fill(0.0);
        for i in 0..n {
            let reference = logistic(theta[i]);
            gradient[i] += 0.5 - reference;
            curvature[i * n + i] += reference * (1.0 - reference);
            for j in 0..n {
                let played = games[i * n + j];
                if i == j || played <= 0.0 {
                    continue;
                }
                let expected = logistic(theta[i] - theta[j]);
                gradient[i] += points[i * n + j] - played * expected;
                let weight = played * expected * (1.0 - expected);
                curvature[i * n + i] += weight;
                curvature[i * n + j] -= weight;
            }
        }
        let Some(step) = solve_positive_definite(&mut curvature, &gradient, n) else {
            return;
        };
        let mut largest = 0.0f64;
        for (theta, step) in theta.iter_mut().zip(&step) {
            // Bounded steps: far from the optimum a full Newton step can overshoot.
            let step = step.clamp(-5.0, 5.0);
            *theta += step;
            largest = largest.max(step.abs());
        }
        if largest < TOLERANCE {
            return;
        }
    }
}

/// Solves `matrix · x = rhs` for a symmetric positive definite `n × n` matrix by Cholesky
/// (the matrix is overwritten); `None` if it is not positive definite.
fn solve_positive_definite(matrix: &mut [f64], rhs: &[f64], n: usize) -> Option<Vec<f64>> {
    for j in 0..n {
        let mut diagonal = matrix[j * n + j];
        for k in 0..j {
            diagonal -= matrix[j * n + k] * matrix[j * n + k];
        }
        if diagonal <= 0.0 || !diagonal.is_finite() {
            return None;
        }
        let diagonal = diagonal.sqrt();
        matrix[j * n + j] = diagonal;
        for i in j + 1..n {
            let mut value = matrix[i * n + j];
            for k in 0..j {
                value -= matrix[i * n + k] * matrix[j * n + k];
            }
            matrix[i * n + j] = value / diagonal;
        }
    }
    // L y = rhs, then Lᵀ x = y.
    let mut x = rhs.to_vec();
    for i in 0..n {
        for k in 0..i {
            x[i] -= matrix[i * n + k] * x[k];
        }
        x[i] /= matrix[i * n + i];
    }
    for i in (0..n).rev() {
        for k in i + 1..n {
            x[i] -= matrix[k * n + i] * x[k];
        }
        x[i] /= matrix[i * n + i];
    }
    Some(x)
}

/// Win rates, ratings and position bias from the labels on pairs among `contestants`
/// checkpoints, with `resamples` bootstrap rounds over pairs drawn with `seed`.
pub fn preference_report(
    contestants: usize,
    judgements: &[Judgement],
    resamples: usize,
    seed: u64,
) -> PreferenceReport {
    let tallies = tally_pairs(judgements);
    let mut table = Table::new(contestants);
    for tally in &tallies {
        table.add(tally);
    }
    let mut point_estimate = vec![0.0f64; contestants];
    fit_log_strengths(
        contestants,
        &table.points,
        &table.games,
        &mut point_estimate,
    );
    let estimate = elo_ratings(&point_estimate);
    let met: Vec<(usize, usize)> = (0..contestants)
        .flat_map(|i| (i + 1..contestants).map(move |j| (i, j)))
        .filter(|&(i, j)| table.games[i * contestants + j] > 0.0)
        .collect();

    // One bootstrap for every figure: resample pairs, refit, record. Pairs with the same
    // checkpoints on the same sides and the same labels are interchangeable, so a resample
    // draws how many of each kind it holds (a multinomial, as conditional binomials) instead of
    // drawing every pair: a few hundred draws per resample instead of one per pair.
    let mut kinds: std::collections::HashMap<(usize, usize, u64, u64, u64, u64), u64> =
        Default::default();
    for tally in &tallies {
        let key = (
            tally.left,
            tally.right,
            tally.left_wins,
            tally.right_wins,
            tally.ties,
            tally.both_bad,
        );
        *kinds.entry(key).or_default() += 1;
    }
    let mut kinds: Vec<(PairTally, u64)> = kinds
        .into_iter()
        .map(
            |((left, right, left_wins, right_wins, ties, both_bad), count)| {
                let tally = PairTally {
                    left,
                    right,
                    left_wins,
                    right_wins,
                    ties,
                    both_bad,
                };
                (tally, count)
            },
        )
        .collect();
    // In a fixed order, so the seed alone decides the draws.
    kinds.sort_by_key(|(tally, _)| {
        (
            tally.left,
            tally.right,
            tally.left_wins,
            tally.right_wins,
            tally.ties,
            tally.both_bad,
        )
    });
    let mut rng = StdRng::seed_from_u64(seed);
    let mut rating_draws: Vec<Vec<f64>> = vec![Vec::with_capacity(resamples); contestants];
    let mut rate_draws: Vec<Vec<f64>> = vec![Vec::with_capacity(resamples); met.len()];
    let mut left_share_draws: Vec<f64> = Vec::with_capacity(resamples);
    let mut resampled = Table::new(contestants);
    if !tallies.is_empty() {
        for _ in 0..resamples {
            resampled.clear();
            let mut pairs_left = tallies.len() as u64;
            let mut weight_left = tallies.len() as u64;
            for (tally, count) in &kinds {
                let drawn = if weight_left <= *count {
                    pairs_left
                } else {
                    let share = *count as f64 / weight_left as f64;
                    rand_distr::Binomial::new(pairs_left, share).map_or(0, |b| rng.sample(b))
                };
                resampled.add_times(tally, drawn);
                pairs_left -= drawn;
                weight_left -= count;
            }
            let mut theta = point_estimate.clone();
            fit_log_strengths(contestants, &resampled.points, &resampled.games, &mut theta);
            let ratings = elo_ratings(&theta);
            for (draws, rating) in rating_draws.iter_mut().zip(ratings) {
                draws.push(rating);
            }
            for (draws, &(i, j)) in rate_draws.iter_mut().zip(&met) {
                if let Some(rate) = resampled.win_rate(i, j) {
                    draws.push(rate);
                }
            }
            if resampled.decisive > 0 {
                left_share_draws.push(resampled.left_won as f64 / resampled.decisive as f64);
            }
        }
    }
    let percentile = |draws: &mut Vec<f64>| -> Option<Interval> {
        if draws.len() < 2 {
            return None;
        }
        draws.sort_by(f64::total_cmp);
        let tail = (1.0 - DEFAULT_CONFIDENCE) / 2.0;
        Some(Interval {
            lower: quantile(draws, tail),
            upper: quantile(draws, 1.0 - tail),
        })
    };

    let mut labels_per_contestant = vec![0u64; contestants];
    for tally in &tallies {
        labels_per_contestant[tally.left] += tally.games();
        labels_per_contestant[tally.right] += tally.games();
    }
    let mut ratings: Vec<Rating> = estimate
        .iter()
        .enumerate()
        .map(|(contestant, &rating)| Rating {
            contestant,
            rating,
            interval: percentile(&mut rating_draws[contestant]),
            labels: labels_per_contestant[contestant],
        })
        .collect();
    ratings.sort_by(|a, b| b.rating.total_cmp(&a.rating));

    // Each pair's counts added to its two checkpoints' row, the lower index first.
    let mut between: std::collections::HashMap<(usize, usize), WinRate> = Default::default();
    for tally in &tallies {
        let (first, second) = (tally.left.min(tally.right), tally.left.max(tally.right));
        let rate = between.entry((first, second)).or_insert_with(|| WinRate {
            first,
            second,
            first_wins: 0,
            second_wins: 0,
            ties: 0,
            both_bad: 0,
            pairs: 0,
            rate: None,
            interval: None,
        });
        let (first_wins, second_wins) = if tally.left == first {
            (tally.left_wins, tally.right_wins)
        } else {
            (tally.right_wins, tally.left_wins)
        };
        rate.first_wins += first_wins;
        rate.second_wins += second_wins;
        rate.ties += tally.ties;
        rate.both_bad += tally.both_bad;
        rate.pairs += 1;
    }
    let win_rates = met
        .iter()
        .zip(rate_draws.iter_mut())
        .filter_map(|(&(first, second), draws)| {
            let mut rate = between.remove(&(first, second))?;
            rate.rate = table.win_rate(first, second);
            rate.interval = percentile(draws);
            Some(rate)
        })
        .collect();

    let (mut position_bias, position_bias_by_rater) = position_bias(judgements);
    // Everyone's labels on one pair share its side draw (and its outputs), so they are not
    // independent: the interval comes from the bootstrap over pairs. Each rater sees a pair
    // once, so theirs stay Wilson intervals.
    position_bias.interval = percentile(&mut left_share_draws);
    PreferenceReport {
        pairs: tallies.len() as u64,
        labels: judgements.len() as u64,
        win_rates,
        ratings,
        position_bias,
        position_bias_by_rater,
        resamples,
    }
}

/// Each pair's labels summed, in pair order.
fn tally_pairs(judgements: &[Judgement]) -> Vec<PairTally> {
    let mut sorted: Vec<&Judgement> = judgements.iter().collect();
    sorted.sort_by_key(|judgement| judgement.pair);
    let mut tallies: Vec<PairTally> = Vec::new();
    let mut current: Option<i64> = None;
    for judgement in sorted {
        if current != Some(judgement.pair) {
            current = Some(judgement.pair);
            tallies.push(PairTally {
                left: judgement.left,
                right: judgement.right,
                ..PairTally::default()
            });
        }
        let tally = tallies.last_mut().expect("pushed above");
        match judgement.choice {
            Preference::A => tally.left_wins += 1,
            Preference::B => tally.right_wins += 1,
            Preference::Tie => tally.ties += 1,
            Preference::BothBad => tally.both_bad += 1,
        }
    }
    tallies
}

/// The left side's share of decisive labels: everyone's, then each rater's (by rater id).
fn position_bias(judgements: &[Judgement]) -> (PositionBias, Vec<PositionBias>) {
    let mut by_rater: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    let mut overall = (0u64, 0u64);
    for judgement in judgements {
        let left_won = match judgement.choice {
            Preference::A => true,
            Preference::B => false,
            Preference::Tie | Preference::BothBad => continue,
        };
        let entry = by_rater.entry(judgement.rater).or_default();
        for (left_wins, decisive) in [entry, &mut overall] {
            *left_wins += u64::from(left_won);
            *decisive += 1;
        }
    }
    let bias = |rater: Option<u64>, (left_wins, decisive): (u64, u64)| PositionBias {
        rater,
        left_wins,
        decisive,
        rate: (decisive > 0).then(|| left_wins as f64 / decisive as f64),
        interval: wilson(left_wins, decisive, DEFAULT_CONFIDENCE),
    };
    (
        bias(None, overall),
        by_rater
            .into_iter()
            .map(|(rater, counts)| bias(Some(rater), counts))
            .collect(),
    )
}

#[cfg(test)]
mod dimension_tests {
    use super::*;
    use crate::annotation::rubric::parse_rubric;

    #[test]
    fn choices_cover_every_dimension_and_no_other() {
        let rubric = parse_rubric(
            r#"{"dimensions": [
                {"key": "helpful", "question": "More helpful?", "kind": "binary"},
                {"key": "safe", "question": "Safer?", "kind": "binary", "required": false}]}"#,
        )
        .unwrap();
        let choices = |pairs: &[(&str, Preference)]| -> DimensionChoices {
            pairs
                .iter()
                .map(|(key, choice)| (key.to_string(), *choice))
                .collect()
        };
        let both = choices(&[("helpful", Preference::A), ("safe", Preference::Tie)]);
        assert_eq!(check_dimension_choices(&rubric, &both), Ok(()));
        assert_eq!(
            choices_in_words(&rubric, &both),
            [
                ("More helpful?".to_string(), "A is better".to_string()),
                ("Safer?".to_string(), "tie".to_string())
            ]
        );
        // A preference has no "not applicable": every dimension is answered.
        let missing = check_dimension_choices(&rubric, &choices(&[("helpful", Preference::B)]));
        assert!(missing.unwrap_err().contains("`safe` (Safer?)"));
        let unknown = check_dimension_choices(
            &rubric,
            &choices(&[
                ("helpful", Preference::A),
                ("safe", Preference::A),
                ("tone", Preference::B),
            ]),
        );
        assert!(unknown.unwrap_err().contains("no dimension `tone`"));
    }

    #[test]
    fn a_pairs_consensus_reads_back() {
        for decided in Preference::ALL.map(Some).into_iter().chain([None]) {
            assert_eq!(
                decided_choice(&pair_consensus(decided).to_string()),
                decided
            );
        }
        assert_eq!(decided_choice("not json"), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferences_and_selections_parse_their_stored_forms() {
        for choice in Preference::ALL {
            assert_eq!(Preference::parse(choice.as_str()), Ok(choice));
        }
        assert!(Preference::parse("left").unwrap_err().contains("`left`"));
        for selection in PairSelection::ALL {
            assert_eq!(PairSelection::parse(selection.as_str()), Ok(selection));
        }
        assert!(PairSelection::parse("all").is_err());
    }

    #[test]
    fn pairs_are_drawn_by_seed_with_both_sides_on_the_left() {
        let candidates: Vec<(i64, i64)> = (0..1_000).map(|i| (i, 10_000 + i)).collect();
        let drawn = draw_pairs(&candidates, 400, 7);
        assert_eq!(drawn.len(), 400);
        // The same seed draws the same pairs whatever order the database returned.
        let mut reversed = candidates.clone();
        reversed.reverse();
        assert_eq!(draw_pairs(&reversed, 400, 7), drawn);
        assert_ne!(draw_pairs(&candidates, 400, 8), drawn);
        // No candidate twice, each pair keeps its two items.
        let mut firsts: Vec<i64> = drawn.iter().map(|p| p.left.min(p.right)).collect();
        firsts.sort_unstable();
        firsts.dedup();
        assert_eq!(firsts.len(), 400);
        assert!(drawn.iter().all(|p| (p.left - p.right).abs() == 10_000));
        // Run A's output is on the left about half the time (400 fair coins: 200 ± 40 covers
        // 99.99%).
        let a_left = drawn.iter().filter(|p| p.left < 10_000).count();
        assert!((160..=240).contains(&a_left), "{a_left}");
        // Asking for more than there are gives them all.
        assert_eq!(draw_pairs(&candidates[..3], 10, 1).len(), 3);
    }

    #[test]
    fn a_pair_is_decided_by_weighted_plurality_and_splits_stay_open() {
        use Preference::*;
        assert_eq!(decide_pair(&[(A, 1.0), (A, 1.0), (B, 1.0)]), Some(A));
        assert_eq!(decide_pair(&[(A, 1.0), (B, 1.0)]), None);
        // A trusted rater outweighs a doubtful one.
        assert_eq!(decide_pair(&[(A, 0.9), (B, 0.4)]), Some(A));
        assert_eq!(decide_pair(&[(Tie, 0.5), (BothBad, 0.6)]), Some(BothBad));
        assert_eq!(decide_pair(&[]), None);
    }

    /// Bradley–Terry's maximum-likelihood condition: each contestant's points equal its
    /// expected points, Σ_j n_ij · p_i / (p_i + p_j) (here with the reference game too).
    #[test]
    fn ratings_satisfy_the_likelihood_equations() {
        let n = 3;
        // 0 beats 1 7–3, 1 beats 2 6–4, 0 beats 2 8–2 (ten games each).
        let mut points = vec![0.0; 9];
        let mut games = vec![0.0; 9];
        for (i, j, won) in [(0, 1, 7.0), (1, 2, 6.0), (0, 2, 8.0)] {
            points[i * n + j] = won;
            points[j * n + i] = 10.0 - won;
            games[i * n + j] = 10.0;
            games[j * n + i] = 10.0;
        }
        let ratings = fit_bradley_terry(n, &points, &games);
        assert!(
            ratings[0] > ratings[1] && ratings[1] > ratings[2],
            "{ratings:?}"
        );
        let strength: Vec<f64> = ratings
            .iter()
            .map(|r| 10f64.powf((r - 1000.0) / 400.0))
            .collect();
        for i in 0..n {
            let earned = 0.5 + (0..n).map(|j| points[i * n + j]).sum::<f64>();
            let expected = strength[i] / (strength[i] + 1.0)
                + (0..n)
                    .filter(|&j| j != i)
                    .map(|j| games[i * n + j] * strength[i] / (strength[i] + strength[j]))
                    .sum::<f64>();
            assert!(
                (earned - expected).abs() < 1e-6,
                "{i}: {earned} vs {expected}"
            );
        }
    }

    #[test]
    fn a_checkpoint_that_never_lost_keeps_a_finite_rating() {
        let points = vec![0.0, 20.0, 0.0, 0.0];
        let games = vec![0.0, 20.0, 20.0, 0.0];
        let ratings = fit_bradley_terry(2, &points, &games);
        assert!(ratings.iter().all(|r| r.is_finite()));
        assert!(ratings[0] - ratings[1] > 400.0, "{ratings:?}");
    }

    /// Labels simulated from known strengths: the ratings come back in order, their
    /// differences near the truth and inside their intervals; win rates and position bias add up.
    #[test]
    fn the_report_recovers_known_strengths() {
        // Elo differences of 0, 100 and 300 points against contestant 0.
        let truth = [0.0f64, 100.0, 300.0];
        let mut rng = StdRng::seed_from_u64(11);
        let mut judgements = Vec::new();
        for pair in 0..6_000i64 {
            let (x, y) = match pair % 3 {
                0 => (0, 1),
                1 => (1, 2),
                _ => (0, 2),
            };
            let (left, right) = if rng.gen::<bool>() { (x, y) } else { (y, x) };
            let p_left = 1.0 / (1.0 + 10f64.powf((truth[right] - truth[left]) / 400.0));
            let choice = if rng.gen::<f64>() < p_left {
                Preference::A
            } else {
                Preference::B
            };
            judgements.push(Judgement {
                pair,
                left,
                right,
                rater: (pair % 4) as u64,
                choice,
            });
        }
        let report = preference_report(3, &judgements, 200, 5);
        assert_eq!((report.pairs, report.labels), (6_000, 6_000));
        let order: Vec<usize> = report.ratings.iter().map(|r| r.contestant).collect();
        assert_eq!(order, vec![2, 1, 0]);
        let rating = |c: usize| report.ratings.iter().find(|r| r.contestant == c).unwrap();
        for (c, true_gap) in truth.iter().enumerate().skip(1) {
            let gap = rating(c).rating - rating(0).rating;
            assert!((gap - true_gap).abs() < 30.0, "{c}: {gap}");
            let interval = rating(c).interval.unwrap();
            assert!(interval.lower < rating(c).rating && rating(c).rating < interval.upper);
        }
        // 0 against 2: expected 1 / (1 + 10^(300/400)) = 15.1%.
        let against = report
            .win_rates
            .iter()
            .find(|w| (w.first, w.second) == (0, 2))
            .unwrap();
        assert_eq!(against.first_wins + against.second_wins, 2_000);
        assert_eq!(against.pairs, 2_000);
        let rate = against.rate.unwrap();
        assert!((rate - 0.151).abs() < 0.03, "{rate}");
        assert!(against.interval.unwrap().contains(rate));
        // Sides were drawn at random: nobody favours the left (0.03 is 4.6 standard errors).
        assert_eq!(report.position_bias.decisive, 6_000);
        let left = report.position_bias.rate.unwrap();
        assert!((left - 0.5).abs() < 0.03, "{left}");
        assert_eq!(report.position_bias_by_rater.len(), 4);
    }

    #[test]
    fn position_bias_counts_decisive_labels_per_rater() {
        let label = |pair, rater, choice| Judgement {
            pair,
            left: 0,
            right: 1,
            rater,
            choice,
        };
        let judgements = [
            label(1, 7, Preference::A),
            label(2, 7, Preference::A),
            label(3, 7, Preference::A),
            label(4, 7, Preference::Tie),
            label(1, 8, Preference::B),
            label(2, 8, Preference::BothBad),
        ];
        let (overall, by_rater) = position_bias(&judgements);
        assert_eq!((overall.left_wins, overall.decisive), (3, 4));
        assert_eq!(by_rater[0].rater, Some(7));
        assert_eq!(by_rater[0].rate, Some(1.0));
        assert_eq!((by_rater[1].left_wins, by_rater[1].decisive), (0, 1));
        // Ties and both-bad count as half a win each for ratings, and apart in win rates.
        let report = preference_report(2, &judgements, 50, 1);
        assert_eq!(report.win_rates[0].ties, 1);
        assert_eq!(report.win_rates[0].both_bad, 1);
        assert_eq!(report.win_rates[0].rate, Some(0.75));
    }
}
