//! Agreement between raters on a run's items or on a queue's recent labels, with a bootstrap
//! interval sized to what the server can afford.

use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::annotation::agreement::{
    bootstrap_ci, cohen_kappa, fleiss_kappa, krippendorff_alpha, Agreement, Level, Unit, Weighting,
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

/// Agreement between the raters of one run's human items.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgreementReport {
    /// Items with at least two standing labels.
    pub items: u64,
    pub labels: u64,
    /// Krippendorff's alpha (nominal): any number of raters per item, missing labels allowed.
    pub alpha: Agreement,
    /// 95% bootstrap interval over items, when alpha is defined often enough to have one.
    pub alpha_interval: Option<(f64, f64)>,
    /// Fleiss' kappa over the items with the most common number of raters.
    pub fleiss: Agreement,
    /// Cohen's kappa of each rater pair with enough shared items.
    pub pairs: Vec<PairAgreement>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairAgreement {
    pub first: String,
    pub second: String,
    pub shared_items: u64,
    pub kappa: Agreement,
}

pub async fn run_agreement(store: &dyn Store, run_id: RunId) -> ServiceResult<AgreementReport> {
    let labels = store.run_labels(run_id).await?;
    let ratings: Vec<Rating> = labels
        .into_iter()
        .map(|label| Rating {
            item: label.task_id.get(),
            rater: label.rater_id.get(),
            rater_name: label.rater,
            pass: label.pass,
        })
        .collect();
    agreement_of(&ratings, true)
}

/// Agreement per queue (eval) over the labels of the last `days` days, queues by name.
pub async fn queue_agreement(
    store: &dyn Store,
    days: i64,
    with_interval: bool,
) -> ServiceResult<Vec<(String, AgreementReport)>> {
    let since = now_ms() - days * 24 * 3_600_000;
    let mut by_queue: BTreeMap<String, Vec<Rating>> = BTreeMap::new();
    for label in store.queue_labels(since).await? {
        by_queue.entry(label.queue).or_default().push(Rating {
            item: label.task_id.get(),
            rater: label.rater_id.get(),
            rater_name: label.rater,
            pass: label.pass,
        });
    }
    by_queue
        .into_iter()
        .map(|(queue, ratings)| Ok((queue, agreement_of(&ratings, with_interval)?)))
        .collect()
}

/// One standing label, as agreement statistics see it.
#[derive(Clone, Debug)]
pub struct Rating {
    pub item: i64,
    pub rater: i64,
    pub rater_name: String,
    pub pass: bool,
}

/// Alpha (with a bootstrap interval when asked: it costs a thousand resamples), Fleiss' kappa
/// and Cohen's kappa per rater pair over one rubric dimension, the pass/fail verdict.
pub fn agreement_of(ratings: &[Rating], with_interval: bool) -> ServiceResult<AgreementReport> {
    let mut items: BTreeMap<i64, Vec<(u64, bool)>> = BTreeMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    for rating in ratings {
        let rater = rating.rater as u64;
        names
            .entry(rater)
            .or_insert_with(|| rating.rater_name.clone());
        items
            .entry(rating.item)
            .or_default()
            .push((rater, rating.pass));
    }
    let units: Vec<Unit<bool>> = items
        .values()
        .map(|ratings| Unit::new(ratings.clone()))
        .collect();
    let alpha = krippendorff_alpha(&units, Level::Nominal)
        .map_err(|err| ServiceError::Invalid(err.to_string()))?;
    let alpha_interval = if with_interval {
        bootstrap_ci(
            &units,
            Level::Nominal,
            // Only items with two or more labels enter the resampling.
            bootstrap_resamples(items.values().filter(|ratings| ratings.len() >= 2).count()),
            0.95,
            7,
        )
    } else {
        None
    };
    // Fleiss needs one number of raters: take the items with the most common count.
    let mut by_count: BTreeMap<usize, Vec<Vec<bool>>> = BTreeMap::new();
    for ratings in items.values().filter(|ratings| ratings.len() >= 2) {
        by_count
            .entry(ratings.len())
            .or_default()
            .push(ratings.iter().map(|(_, pass)| *pass).collect());
    }
    let fleiss_items = by_count
        .into_values()
        .max_by_key(|items| items.len())
        .unwrap_or_default();
    let fleiss = fleiss_kappa(&fleiss_items);
    // Pairs from the items they share, in one pass over the items.
    let mut shared: BTreeMap<(u64, u64), Vec<(bool, bool)>> = BTreeMap::new();
    for ratings in items.values() {
        for (index, &(first, first_pass)) in ratings.iter().enumerate() {
            for &(second, second_pass) in &ratings[index + 1..] {
                let (key, value) = if first < second {
                    ((first, second), (first_pass, second_pass))
                } else {
                    ((second, first), (second_pass, first_pass))
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
            kappa: cohen_kappa(&shared, Weighting::Unweighted),
        })
        .collect();
    Ok(AgreementReport {
        items: items.values().filter(|ratings| ratings.len() >= 2).count() as u64,
        labels: ratings.len() as u64,
        alpha,
        alpha_interval,
        fleiss,
        pairs,
    })
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
