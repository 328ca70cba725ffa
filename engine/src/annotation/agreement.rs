//! Agreement between raters on a run's items (on the verdict and on each dimension of the
//! run's rubric, at the dimension's level of measurement) or on a queue's recent verdicts, with
//! a bootstrap interval sized to what the server can afford.

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::annotation::agreement::{
    bootstrap_ci, cohen_kappa, fleiss_kappa, krippendorff_alpha, Agreement, CohenAccumulator,
    Level, Statistic, Unit, Value, Weighting,
};
use arbiter_domain::annotation::rubric::{
    DimensionAnswer, DimensionKind, Rubric, RubricAnswer, RubricVersion,
};
use arbiter_domain::ids::RunId;
use arbiter_store::{now_ms, Store};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Rater pairs need this many shared items before their kappa is shown.
const MIN_SHARED_ITEMS: usize = 5;

/// Resamples of the bootstrap interval around alpha, for up to 5,000 items.
const BOOTSTRAP_RESAMPLES: usize = 1_000;

/// Item draws one interval may cost (resamples × items): about 0.6 s here (`bench agreement`
/// measured 117 ns per draw), so a run or queue page stays quick.
const BOOTSTRAP_BUDGET: usize = 5_000_000;

/// Fewer resamples than this make the interval's ends too noisy to show.
const MIN_BOOTSTRAP_RESAMPLES: usize = 200;

/// Resamples for an interval over `items` items: the full count for small sets, fewer for
/// larger ones, and none (no interval) beyond 25,000 items, where the budget would allow fewer
/// than the minimum. Intervals there are narrow anyway: ±0.002 at 333,000 items in
/// `bench agreement`.
pub fn bootstrap_resamples(items: usize) -> usize {
    let affordable = BOOTSTRAP_BUDGET / items.max(1);
    if affordable < MIN_BOOTSTRAP_RESAMPLES {
        0
    } else {
        affordable.min(BOOTSTRAP_RESAMPLES)
    }
}

/// Agreement between the raters of one run's human items on one dimension.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgreementReport {
    /// The rubric dimension's key, or `verdict` for the pass or fail every label gives.
    pub dimension: String,
    /// The level of measurement the statistics are computed at.
    pub level: Level,
    /// Items with at least two standing labels.
    pub items: u64,
    pub labels: u64,
    /// Krippendorff's alpha at the dimension's level: any number of raters per item, missing
    /// labels allowed.
    pub alpha: Agreement,
    /// 95% bootstrap interval over items, when alpha is defined often enough to have one.
    pub alpha_interval: Option<(f64, f64)>,
    /// Fleiss' kappa over the items with the most common number of raters (nominal dimensions;
    /// undefined for others, whose distances it would ignore).
    pub fleiss: Agreement,
    /// Cohen's kappa of each rater pair with enough shared items (weighted linearly over the
    /// scale for ordinal dimensions; undefined for numeric ones).
    pub pairs: Vec<PairAgreement>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairAgreement {
    pub first: String,
    pub second: String,
    pub shared_items: u64,
    pub kappa: Agreement,
}

/// The dimension name the pass or fail of every label goes by.
pub const VERDICT: &str = "verdict";

/// One set of ratings to compute agreement over: the verdict, a dimension, or one option of a
/// dimension that takes several.
struct RatingSet {
    name: String,
    level: Level,
    /// The declared scale of an ordinal dimension, so weights follow its points and not only
    /// the points a pair of raters happened to use.
    scale: Option<Vec<Value>>,
    ratings: Vec<Rating>,
}

/// A label as the rating sets read it: who gave it on which item, its pass or fail, and its
/// rubric answers (`None` for a pass/fail label).
#[derive(Clone, Copy)]
struct LabelAnswers<'a> {
    item: i64,
    rater: i64,
    rater_name: &'a str,
    pass: bool,
    answers: Option<&'a RubricAnswer>,
}

impl LabelAnswers<'_> {
    fn rating(&self, value: Value) -> Rating {
        Rating {
            item: self.item,
            rater: self.rater,
            rater_name: self.rater_name.to_string(),
            value,
        }
    }
}

/// The verdict's rating set over `labels`.
fn verdict_set(labels: &[LabelAnswers<'_>]) -> RatingSet {
    RatingSet {
        name: VERDICT.to_string(),
        level: Level::Nominal,
        scale: None,
        ratings: labels
            .iter()
            .map(|label| label.rating(verdict_value(label.pass)))
            .collect(),
    }
}

/// A rating set per dimension of `rubric` that has a level, named by its key after `prefix`;
/// a dimension that takes several options is one yes/no set per option (a rater who answered
/// the rubric but chose none says no to each).
fn dimension_sets(labels: &[LabelAnswers<'_>], rubric: &Rubric, prefix: &str) -> Vec<RatingSet> {
    let mut sets = Vec::new();
    for dimension in &rubric.dimensions {
        let Some(level) = dimension.kind.level() else {
            continue;
        };
        match &dimension.kind {
            DimensionKind::Categorical {
                options,
                multiple: true,
            } => {
                for option in options {
                    let ratings = labels
                        .iter()
                        .filter_map(|label| {
                            let chosen = matches!(
                                label.answers?.get(&dimension.key),
                                Some(DimensionAnswer::Texts(chosen)) if chosen.contains(option)
                            );
                            Some(label.rating(yes_or_no(chosen)))
                        })
                        .collect();
                    sets.push(RatingSet {
                        name: format!("{prefix}{}: {option}", dimension.key),
                        level: Level::Nominal,
                        scale: None,
                        ratings,
                    });
                }
            }
            kind => sets.push(RatingSet {
                name: format!("{prefix}{}", dimension.key),
                level,
                scale: match kind {
                    DimensionKind::Ordinal { scale } => Some(
                        (1..=scale.len())
                            .map(|point| Value::Number(point as f64))
                            .collect(),
                    ),
                    _ => None,
                },
                ratings: labels
                    .iter()
                    .filter_map(|label| {
                        let answer = label.answers?.get(&dimension.key)?;
                        Some(label.rating(kind.agreement_value(answer)?))
                    })
                    .collect(),
            }),
        }
    }
    sets
}

/// The statistics of each set, off the async threads (a bootstrap per report, sharing one
/// budget when `with_interval`).
async fn agreement_of_sets(
    sets: Vec<RatingSet>,
    with_interval: bool,
) -> ServiceResult<Vec<AgreementReport>> {
    let shares = sets.len();
    tokio::task::spawn_blocking(move || {
        sets.iter()
            .map(|set| {
                agreement_of(
                    &set.ratings,
                    &set.name,
                    set.level,
                    set.scale.as_deref(),
                    with_interval.then_some(shares),
                )
            })
            .collect()
    })
    .await
    .map_err(|err| {
        tracing::error!(error = %err, "computing agreement failed");
        ServiceError::Internal
    })?
}

/// Agreement on a run's verdicts, then on each dimension of its rubric that has a level (see
/// [`dimension_sets`]).
pub async fn run_agreement(
    store: &dyn Store,
    run_id: RunId,
) -> ServiceResult<Vec<AgreementReport>> {
    let labels = store.run_labels(run_id).await?;
    let labels: Vec<LabelAnswers<'_>> = labels
        .iter()
        .map(|label| LabelAnswers {
            item: label.task_id.get(),
            rater: label.rater_id.get(),
            rater_name: &label.rater,
            pass: label.pass,
            answers: label.answers.as_ref(),
        })
        .collect();
    let mut sets = vec![verdict_set(&labels)];
    let rubric = store
        .run_manifest(run_id)
        .await?
        .and_then(|manifest| manifest.triage)
        .and_then(|triage| triage.rubric);
    if let Some(frozen) = rubric {
        sets.extend(dimension_sets(&labels, &frozen.rubric, ""));
    }
    agreement_of_sets(sets, true).await
}

fn yes_or_no(yes: bool) -> Value {
    Value::Label(if yes { "yes" } else { "no" }.to_string())
}

fn verdict_value(pass: bool) -> Value {
    Value::Label(if pass { "pass" } else { "fail" }.to_string())
}

/// Agreement per queue (an eval, or the items pushed to a named queue) over the labels of the
/// last `days` days, queues by name: on the verdict, on each dimension of each rubric version
/// its labels answered (named `rubric vN: dimension`; versions apart, as a scale may differ
/// between them), and on pairs' choices.
pub async fn queue_agreement(
    store: &dyn Store,
    days: i64,
    with_interval: bool,
) -> ServiceResult<Vec<(String, AgreementReport)>> {
    let since = now_ms() - days * 24 * 3_600_000;
    let labels = store.queue_labels(since).await?;
    let mut rubrics: HashMap<i64, RubricVersion> = HashMap::new();
    for rubric_id in labels.iter().filter_map(|label| label.rubric_id) {
        if let std::collections::hash_map::Entry::Vacant(slot) = rubrics.entry(rubric_id) {
            if let Some(version) = store.get_rubric(rubric_id).await? {
                slot.insert(version);
            }
        }
    }
    let mut by_queue: BTreeMap<&str, Vec<(Option<i64>, LabelAnswers<'_>)>> = BTreeMap::new();
    let mut preferences: BTreeMap<&str, Vec<Rating>> = BTreeMap::new();
    for label in &labels {
        if let Some(choice) = label.preference {
            preferences.entry(&label.queue).or_default().push(Rating {
                item: label.task_id.get(),
                rater: label.rater_id.get(),
                rater_name: label.rater.clone(),
                value: Value::Label(choice.as_str().to_string()),
            });
            continue;
        }
        let rubric = label.rubric_id.filter(|id| rubrics.contains_key(id));
        by_queue.entry(&label.queue).or_default().push((
            rubric,
            LabelAnswers {
                item: label.task_id.get(),
                rater: label.rater_id.get(),
                rater_name: &label.rater,
                pass: label.pass,
                answers: label.answers.as_ref(),
            },
        ));
    }
    let mut reports = Vec::new();
    for (queue, labels) in by_queue {
        let mut by_rubric: BTreeMap<i64, Vec<LabelAnswers<'_>>> = BTreeMap::new();
        let mut all = Vec::with_capacity(labels.len());
        for (rubric, label) in labels {
            if let Some(rubric) = rubric {
                by_rubric.entry(rubric).or_default().push(label);
            }
            all.push(label);
        }
        let mut sets = vec![verdict_set(&all)];
        // Each rubric version apart: a dimension's scale may differ between versions.
        for (rubric_id, labels) in &by_rubric {
            let version = &rubrics[rubric_id];
            let prefix = format!("{} v{}: ", version.name, version.version);
            sets.extend(dimension_sets(labels, &version.rubric, &prefix));
        }
        if let Some(ratings) = preferences.remove(queue) {
            sets.push(preference_set(ratings));
        }
        for report in agreement_of_sets(sets, with_interval).await? {
            reports.push((queue.to_string(), report));
        }
    }
    // Queues with pairs and no single items.
    for (queue, ratings) in preferences {
        for report in agreement_of_sets(vec![preference_set(ratings)], with_interval).await? {
            reports.push((queue.to_string(), report));
        }
    }
    // By queue, each queue's reports in the order made (stable).
    reports.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reports)
}

/// The dimension name pairs' choices (a, b, tie, both bad) go by.
pub const PREFERENCE: &str = "preference";

/// Pairs' choices as a nominal set: raters of one pair see the same sides.
fn preference_set(ratings: Vec<Rating>) -> RatingSet {
    RatingSet {
        name: PREFERENCE.to_string(),
        level: Level::Nominal,
        scale: None,
        ratings,
    }
}

/// One standing label, as agreement statistics see it.
#[derive(Clone, Debug)]
pub struct Rating {
    pub item: i64,
    pub rater: i64,
    pub rater_name: String,
    pub value: Value,
}

/// Alpha (with a bootstrap interval when `interval_shares` is given: the interval gets that
/// share of the bootstrap budget, as several reports are computed together), Fleiss' kappa and
/// Cohen's kappa per rater pair over one dimension, at its level of measurement. `scale` is an
/// ordinal dimension's declared points.
pub fn agreement_of(
    ratings: &[Rating],
    dimension: &str,
    level: Level,
    scale: Option<&[Value]>,
    interval_shares: Option<usize>,
) -> ServiceResult<AgreementReport> {
    let mut items: BTreeMap<i64, Vec<(u64, Value)>> = BTreeMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    for rating in ratings {
        let rater = rating.rater as u64;
        names
            .entry(rater)
            .or_insert_with(|| rating.rater_name.clone());
        items
            .entry(rating.item)
            .or_default()
            .push((rater, rating.value.clone()));
    }
    let units: Vec<Unit<Value>> = items
        .values()
        .map(|ratings| Unit::new(ratings.clone()))
        .collect();
    let alpha =
        krippendorff_alpha(&units, level).map_err(|err| ServiceError::Invalid(err.to_string()))?;
    let alpha_interval = interval_shares.and_then(|shares| {
        // Only items with two or more labels enter the resampling.
        let pairable = items.values().filter(|ratings| ratings.len() >= 2).count();
        bootstrap_ci(
            &units,
            level,
            bootstrap_resamples(pairable * shares.max(1)),
            0.95,
            7,
        )
    });
    // Fleiss needs one number of raters: take the items with the most common count.
    let fleiss = if level == Level::Nominal {
        let mut by_count: BTreeMap<usize, Vec<Vec<Value>>> = BTreeMap::new();
        for ratings in items.values().filter(|ratings| ratings.len() >= 2) {
            by_count
                .entry(ratings.len())
                .or_default()
                .push(ratings.iter().map(|(_, value)| value.clone()).collect());
        }
        let fleiss_items = by_count
            .into_values()
            .max_by_key(|items| items.len())
            .unwrap_or_default();
        fleiss_kappa(&fleiss_items)
    } else {
        Agreement {
            statistic: Statistic::Undefined {
                reason:
                    "Fleiss' kappa treats every value as a category; see alpha for this dimension",
            },
            percent_agreement: None,
            units: 0,
        }
    };

    // Pairs from the items they share, in one pass over the items.
    let mut shared: BTreeMap<(u64, u64), Vec<(Value, Value)>> = BTreeMap::new();
    for ratings in items.values() {
        for (index, (first, first_value)) in ratings.iter().enumerate() {
            for (second, second_value) in &ratings[index + 1..] {
                let (key, value) = if first < second {
                    (
                        (*first, *second),
                        (first_value.clone(), second_value.clone()),
                    )
                } else {
                    (
                        (*second, *first),
                        (second_value.clone(), first_value.clone()),
                    )
                };
                shared.entry(key).or_default().push(value);
            }
        }
    }
    let pairs = shared
        .into_iter()
        .filter(|(_, shared)| shared.len() >= MIN_SHARED_ITEMS)
        .map(|((first, second), shared)| PairAgreement {
            first: names[&first].clone(),
            second: names[&second].clone(),
            shared_items: shared.len() as u64,
            kappa: pair_kappa(&shared, level, scale),
        })
        .collect();
    Ok(AgreementReport {
        dimension: dimension.to_string(),
        level,
        items: items.values().filter(|ratings| ratings.len() >= 2).count() as u64,
        labels: ratings.len() as u64,
        alpha,
        alpha_interval,
        fleiss,
        pairs,
    })
}

/// Cohen's kappa of one rater pair: unweighted on nominal values, linearly weighted over the
/// declared points of an ordinal scale; undefined on numbers, whose distances kappa (which
/// weighs ranks) would not respect: alpha is the statistic there.
fn pair_kappa(pairs: &[(Value, Value)], level: Level, scale: Option<&[Value]>) -> Agreement {
    match level {
        Level::Nominal => cohen_kappa(pairs, Weighting::Unweighted),
        Level::Ordinal => {
            let mut accumulator =
                CohenAccumulator::with_categories(scale.unwrap_or_default().to_vec());
            for (first, second) in pairs {
                accumulator.add_pair(first.clone(), second.clone());
            }
            accumulator.report(Weighting::Linear)
        }
        Level::Interval | Level::Ratio => Agreement {
            statistic: Statistic::Undefined {
                reason:
                    "Cohen's kappa weighs ranks, not distances; see alpha for a numeric dimension",
            },
            percent_agreement: None,
            units: pairs.len() as u64,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_sets_get_fewer_bootstrap_resamples_and_then_none() {
        assert_eq!(bootstrap_resamples(0), 1_000);
        assert_eq!(bootstrap_resamples(5_000), 1_000);
        assert_eq!(bootstrap_resamples(10_000), 500);
        assert_eq!(bootstrap_resamples(25_000), 200);
        assert_eq!(
            bootstrap_resamples(25_001),
            0,
            "no interval beyond the budget"
        );
        assert_eq!(bootstrap_resamples(10_000_000), 0);
    }
}
