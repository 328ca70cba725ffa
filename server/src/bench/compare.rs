//! `arbiter bench compare`: a checkpoint comparison over two million-item runs.
//!
//! Two runs of one eval (ten categories) are filled with recorded answers: the candidate keeps
//! the baseline's verdict on most items and flips about 3% each way. The benchmark then times
//! what a researcher waits for: the comparison summary (reports, paired tests, correction) when
//! both runs' snapshots must first be built, and again once they are stored; the per-prompt
//! diff's first page unfiltered, filtered to one category's regressions, and with a text search.
//! It prints the process's peak resident memory, which must not grow with whole runs.

use arbiter_domain::answer::{Generation, Outcome};
use arbiter_domain::grading::grade_exact_match;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::ids::RunId;
use arbiter_domain::reports::compare::{Change, DiffFilter};
use arbiter_domain::reports::trend::BaselinePolicy;
use arbiter_domain::run::Priority;
use arbiter_domain::stats::correction::Correction;
use arbiter_engine::reports::trends;
use arbiter_store::{Database, FinishedIdentity, Store};
use std::time::Instant;

const FILL_BATCH: i64 = 1000;
const CATEGORIES: usize = 10;

/// Runs on SQLite, then on PostgreSQL when `postgres_admin_url` is given.
pub async fn run(items: usize, postgres_admin_url: Option<String>) -> anyhow::Result<()> {
    crate::bench::support::on_sqlite_then_postgres(
        "arbiter_compare",
        postgres_admin_url,
        |backend, url| async move { one_backend(backend, &url, items).await },
    )
    .await
}

/// A stable pseudo-random number in [0, 1) for (item, salt).
fn draw(index: usize, salt: u64) -> f64 {
    let hash = xxhash_rust::xxh3::xxh3_64_with_seed(&index.to_le_bytes(), salt);
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether the baseline (`candidate = false`) or candidate answers item `index` right. The
/// baseline passes 70%. The candidate loses 3% of the baseline's passes and gains 7% of its
/// fails (as many each way, so no net change), except in category 3, where it loses 8%.
fn passes(index: usize, candidate: bool) -> bool {
    let base = draw(index, 1) < 0.7;
    if !candidate {
        return base;
    }
    let flip_rate = match (base, index % CATEGORIES == 3) {
        (true, true) => 0.08,
        (true, false) => 0.03,
        (false, _) => 0.07,
    };
    if draw(index, 2) < flip_rate {
        !base
    } else {
        base
    }
}

async fn one_backend(backend: &str, url: &str, items: usize) -> anyhow::Result<()> {
    println!("== compare on {backend}: two runs of {items} items, {CATEGORIES} categories");
    let database = Database::open(url).await?;
    let store = database.store();
    let store = store.as_ref();
    let started = Instant::now();
    let jsonl: String = (0..items)
        .map(|index| {
            format!(
                "{{\"id\": \"q{index}\", \"input\": \"Question {index}: what is {index} plus zero?\", \"target\": \"{index}\", \"category\": \"cat{}\"}}\n",
                index % CATEGORIES
            )
        })
        .collect();
    let eval = crate::bench::support::bench_eval(store, "compare", jsonl.as_bytes()).await?;
    drop(jsonl);
    let mut runs = Vec::new();
    for (name, candidate) in [("baseline", false), ("candidate", true)] {
        let checkpoint = crate::bench::support::answerless_checkpoint(store, name, name).await?;
        let launched = arbiter_engine::runs::launch_run(
            store,
            eval,
            checkpoint,
            Priority::Scheduled,
            "bench",
            None,
        )
        .await
        .map_err(|err| anyhow::anyhow!("launch: {err}"))?;
        fill(store, launched.run_id, items, candidate, name).await?;
        runs.push(launched.run_id);
    }
    println!(
        "set-up (dataset, two launches, {} answers recorded): {:.1} s",
        2 * items,
        started.elapsed().as_secs_f64()
    );

    let (baseline, candidate) = (runs[0], runs[1]);
    // From here on, the peak is what a researcher's pages cost, not the benchmark's set-up.
    let (_, after_setup, _, _) = crate::bench::support::memory_mib();
    let peak_was_reset = crate::bench::support::reset_peak_memory();
    for label in ["cold (both snapshots built)", "warm (snapshots stored)"] {
        let started = Instant::now();
        let summary = arbiter_engine::reports::compare::compare_checkpoints(
            store,
            baseline,
            &[candidate],
            Correction::Holm,
        )
        .await
        .map_err(|err| anyhow::anyhow!("compare: {err}"))?;
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        let overall = &summary.candidates[0].comparison.overall;
        let regressions = summary.candidates[0]
            .comparison
            .categories
            .iter()
            .filter(|c| c.is_regression())
            .map(|c| c.category.as_str())
            .collect::<Vec<_>>();
        println!(
            "comparison summary, {label}: {elapsed:.0} ms (target < 1,000 ms warm) — pass→fail {}, fail→pass {}, p {:.2e}, significant regressions in {regressions:?}",
            overall.table.pass_to_fail, overall.table.fail_to_pass, overall.p_value
        );
    }
    let pages = [
        ("first diff page, unfiltered", DiffFilter::default(), ""),
        (
            "first diff page, cat3 regressions",
            DiffFilter {
                category: Some("cat3".into()),
                change: Some(Change::Regression),
                outcome: None,
            },
            "",
        ),
        (
            "first diff page, text search \"99\"",
            DiffFilter::default(),
            "99",
        ),
    ];
    for (label, filter, search) in pages {
        let started = Instant::now();
        let page = arbiter_engine::reports::diff::diff_page(
            store, baseline, candidate, &filter, search, 0,
        )
        .await
        .map_err(|err| anyhow::anyhow!("diff: {err}"))?;
        println!(
            "{label}: {:.0} ms (target < 300 ms) — {} rows of {} matching",
            started.elapsed().as_secs_f64() * 1000.0,
            page.rows.len(),
            page.matching
        );
    }
    for (label, policy) in [
        (
            "trend over both checkpoints, previous",
            BaselinePolicy::Previous,
        ),
        ("trend over both checkpoints, best", BaselinePolicy::Best),
    ] {
        let started = Instant::now();
        let trend = trends::trend(store, eval, "", policy)
            .await
            .map_err(|err| anyhow::anyhow!("trend: {err}"))?;
        println!(
            "{label}: {:.0} ms — {} points, regressions at the last: {:?}",
            started.elapsed().as_secs_f64() * 1000.0,
            trend.points.len(),
            trend
                .points
                .last()
                .map(|point| point.regressions())
                .unwrap_or_default()
        );
    }
    let started = Instant::now();
    let flaky = trends::flaky_prompts(store, eval, "", trends::FLAKY_LIMIT)
        .await
        .map_err(|err| anyhow::anyhow!("flaky: {err}"))?;
    println!(
        "flaky prompts over both checkpoints: {:.0} ms — {} listed, the first flipped {} time(s)",
        started.elapsed().as_secs_f64() * 1000.0,
        flaky.prompts.len(),
        flaky.prompts.first().map_or(0, |p| p.record.flips)
    );
    // The System page and /metrics over every answer of both runs, all in the last hour: the
    // worst case of the health figures (one grouped scan of the hour, one join over the day).
    let started = Instant::now();
    let health = arbiter_engine::health::system_health(store, arbiter_store::now_ms())
        .await
        .map_err(|err| anyhow::anyhow!("system health: {err}"))?;
    println!(
        "system health over {} answers in the last hour: {:.0} ms — p99 about {:.0} ms, spending rows {}, queue {}",
        health.last_hour.answers,
        started.elapsed().as_secs_f64() * 1000.0,
        health.p99_latency_ms.unwrap_or(0.0),
        health.costs_last_day.len(),
        health.queue_depth
    );
    let (peak, current, _, _) = crate::bench::support::memory_mib();
    if peak_was_reset {
        println!(
            "process memory: {after_setup:.0} MiB after the set-up; peak {peak:.0} MiB over the comparisons, diffs, trends and flaky view (+{:.0} MiB); now {current:.0} MiB",
            peak - after_setup
        );
    } else {
        println!("process memory: peak {peak:.0} MiB, now {current:.0} MiB (includes the set-up)");
    }
    drop(database);
    Ok(())
}

/// Claims every identity of `run_id` and records an answer for each.
async fn fill(
    store: &dyn Store,
    run_id: RunId,
    items: usize,
    candidate: bool,
    name: &str,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let jobs = store
            .claim_identities("bench", run_id, FILL_BATCH, 600_000, true)
            .await?;
        if jobs.is_empty() {
            break;
        }
        let finished: Vec<FinishedIdentity> = jobs
            .into_iter()
            .map(|job| {
                let index: usize = job.case_id.trim_start_matches('q').parse().unwrap_or(0);
                let output = if passes(index, candidate) {
                    format!("Answer: {}", job.item.target)
                } else {
                    "Answer: something else".to_string()
                };
                let grade = grade_exact_match(&output, &job.item.target);
                FinishedIdentity {
                    identity_id: job.identity_id,
                    generation: Generation {
                        outcome: Outcome::Ok,
                        output,
                        finish_reason: Some("stop".into()),
                        attempts: 1,
                        model_used: Some(name.into()),
                        ..Generation::default()
                    },
                    grading: Grading::deterministic_only(Some(grade)),
                    generation_key: None,
                    cached_from: None,
                    next_turn_waits: false,
                }
            })
            .collect();
        store.record_results(&finished).await?;
    }
    store.finish_run_if_done(run_id).await?;
    println!(
        "{name}: {items} answers recorded in {:.1} s ({:.0}/s, tallies kept by triggers)",
        started.elapsed().as_secs_f64(),
        items as f64 / started.elapsed().as_secs_f64()
    );
    Ok(())
}
