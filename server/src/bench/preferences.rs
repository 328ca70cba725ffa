//! `arbiter bench bradley-terry`: the preference report (Bradley–Terry ratings with their
//! bootstrap intervals, win rates, position bias) over `--items` (default 100,000) labelled
//! pairs among 20 checkpoints of known strengths, as the Preferences page computes it.

use arbiter_domain::annotation::preference::{preference_report, Judgement, Preference};
use arbiter_engine::preferences::PREFERENCE_RESAMPLES;
use std::time::Instant;

const CHECKPOINTS: usize = 20;

/// A deterministic draw in [0, 1) for draw number `i` (splitmix64).
fn draw(i: u64) -> f64 {
    let mut mixed = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (mixed ^ (mixed >> 31)) as f64 / (u64::MAX as f64 + 1.0)
}

pub(crate) fn run(pairs: usize) {
    println!("== bradley-terry: {pairs} pairs among {CHECKPOINTS} checkpoints, {PREFERENCE_RESAMPLES} bootstrap resamples");
    // Checkpoint i is 25·i Elo points stronger than checkpoint 0.
    let strength = |i: usize| 25.0 * i as f64;
    let pick = |i: u64, n: usize| (draw(i) * n as f64) as usize;
    let judgements: Vec<Judgement> = (0..pairs)
        .map(|pair| {
            let base = 4 * pair as u64;
            let left = pick(base, CHECKPOINTS);
            let right = (left + 1 + pick(base + 1, CHECKPOINTS - 1)) % CHECKPOINTS;
            let p_left = 1.0 / (1.0 + 10f64.powf((strength(right) - strength(left)) / 400.0));
            // Decisive labels only, so the estimated spread can be read against the true one
            // (ties, counted half, would pull the ratings together).
            let choice = if draw(base + 2) < p_left {
                Preference::A
            } else {
                Preference::B
            };
            Judgement {
                pair: pair as i64,
                left,
                right,
                rater: pick(base + 3, 200) as u64,
                choice,
            }
        })
        .collect();
    let started = Instant::now();
    let report = preference_report(CHECKPOINTS, &judgements, PREFERENCE_RESAMPLES, 1);
    let elapsed = started.elapsed();
    let top = &report.ratings[0];
    let bottom = &report.ratings[CHECKPOINTS - 1];
    println!(
        "report in {:.3} s: {} win rates, {} raters' position bias",
        elapsed.as_secs_f64(),
        report.win_rates.len(),
        report.position_bias_by_rater.len()
    );
    println!(
        "best checkpoint {} at {:.0} ({:.0}–{:.0}), worst {} at {:.0}; true spread {:.0} points, estimated {:.0}",
        top.contestant,
        top.rating,
        top.interval.map_or(f64::NAN, |i| i.lower),
        top.interval.map_or(f64::NAN, |i| i.upper),
        bottom.contestant,
        bottom.rating,
        strength(CHECKPOINTS - 1),
        top.rating - bottom.rating
    );
    println!(
        "left side wins {:.1}% of decisive labels",
        report.position_bias.rate.unwrap_or(f64::NAN) * 100.0
    );
}
