//! `arbiter bench annotators`: simulated annotators against a large human queue.
//!
//! A run's identities are recorded as undecided answers whose human tasks each need two raters,
//! half of them asking a three-dimension rubric (pass/fail, a four-point scale, a category)
//! instead of pass or fail, then 200 annotators claim and label concurrently, each pausing a
//! moment between items as a person would. Gold items are mixed in at the default gold rate, as
//! in production. It prints claim and submission latency (p50, p99), overall and for the rubric
//! items apart (a rubric label is checked against its rubric, and the last one of an item
//! computes the consensus per dimension), submissions per second, and checks that no item got
//! more labels than its overlap or a rater twice. Then it times the lead's queue report over
//! the queue left, and the open-queue scan summed by slot against the same scan task by task
//! (which must agree).

use super::support::percentile;
use anyhow::bail;
use arbiter_domain::accounts::{PasswordHash, Role};
use arbiter_domain::answer::{Generation, Outcome};
use arbiter_domain::grading::grade_exact_match;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::triage::HumanRouting;
use arbiter_domain::ids::{RunId, TaskId, UserId};
use arbiter_domain::run::Priority;
use arbiter_store::{Database, FinishedIdentity, Store};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ANNOTATORS: usize = 200;
const OVERLAP: i64 = 2;
/// How long the annotators work.
const SESSION: Duration = Duration::from_secs(20);
/// A rater's pause between items, spread over this range so they do not move in lock step.
const THINK_MS: std::ops::Range<u64> = 200..1800;
const FILL_BATCH: i64 = 500;
/// Gold items spread over the queue (served at the default gold rate of 5% of claims).
const GOLD_ITEMS: usize = 500;
/// Claims in the first seconds, when every rater asks at once, are reported apart.
const WARM_UP: Duration = Duration::from_secs(2);
/// What the rubric items ask.
const RUBRIC: &str = r#"{
  "dimensions": [
    {"key": "correct", "question": "Is the answer right?", "kind": "binary"},
    {"key": "helpful", "question": "How helpful?", "kind": "ordinal", "scale": [
      {"label": "Poor", "description": "p"}, {"label": "Fair", "description": "f"},
      {"label": "Good", "description": "g"}, {"label": "Great", "description": "e"}]},
    {"key": "tone", "question": "Tone?", "kind": "categorical", "options": ["formal", "casual"]}
  ],
  "verdict": {"dimension": "correct"}
}"#;

/// One claim: when it was asked (since the start), how long it took, and whether the item
/// asked the rubric.
type Claim = (Duration, f64, bool);

/// Runs the benchmark on SQLite, then on PostgreSQL when `postgres_admin_url` is given.
pub async fn run(tasks: usize, postgres_admin_url: Option<String>) -> anyhow::Result<()> {
    crate::bench::support::on_sqlite_then_postgres(
        "arbiter_annotators",
        postgres_admin_url,
        |backend, url| async move { one_backend(backend, &url, tasks).await },
    )
    .await
}

async fn one_backend(backend: &str, url: &str, tasks: usize) -> anyhow::Result<()> {
    println!(
        "== annotators on {backend}: {ANNOTATORS} raters, {tasks} tasks of {OVERLAP} raters each"
    );
    let database = Database::open(url).await?;
    let store = database.store();
    let rubric = arbiter_engine::rubrics::create_rubric(store.as_ref(), "bench", RUBRIC, "", None)
        .await
        .map_err(|err| anyhow::anyhow!("rubric: {err}"))?;
    let run_id = fill_queue(store.as_ref(), tasks, rubric.id).await?;
    let lead = {
        let hash = PasswordHash::from_stored("$argon2id$v=19$bench$lead".into());
        store.create_user("bench-lead", &hash, Role::Lead).await?
    };
    // Task ids start at 1 in a fresh database; spread the gold over the whole queue.
    let stride = (tasks / GOLD_ITEMS).max(1);
    for task_id in (1..=tasks).step_by(stride).take(GOLD_ITEMS) {
        store
            .create_gold(
                TaskId(task_id as i64),
                arbiter_domain::annotation::gold::GoldAnswer::Verdict(false),
                "",
                lead,
            )
            .await?;
    }
    let mut raters = Vec::with_capacity(ANNOTATORS);
    for index in 0..ANNOTATORS {
        let name = format!("rater{index}");
        let hash = PasswordHash::from_stored(format!("$argon2id$v=19$bench${name}"));
        raters.push(store.create_user(&name, &hash, Role::Annotator).await?);
    }
    let started = Instant::now();
    let handles: Vec<_> = raters
        .into_iter()
        .enumerate()
        .map(|(index, rater)| tokio::spawn(annotate(store.clone(), rater, index as u64, started)))
        .collect();
    let (mut claims, mut submits, mut steady) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rubric_claims, mut rubric_submits) = (Vec::new(), Vec::new());
    for handle in handles {
        let (claim, submit) = handle.await??;
        steady.extend(
            claim
                .iter()
                .filter(|(at, _, _)| *at >= WARM_UP)
                .map(|(_, ms, _)| *ms),
        );
        rubric_claims.extend(
            claim
                .iter()
                .filter(|(at, _, rubric)| *at >= WARM_UP && *rubric)
                .map(|(_, ms, _)| *ms),
        );
        claims.extend(claim.into_iter().map(|(_, ms, _)| ms));
        rubric_submits.extend(
            submit
                .iter()
                .filter(|(_, rubric)| *rubric)
                .map(|(ms, _)| *ms),
        );
        submits.extend(submit.into_iter().map(|(ms, _)| ms));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let labels = store.run_labels(run_id).await?;
    let mut per_task: HashMap<TaskId, HashSet<UserId>> = HashMap::new();
    for label in &labels {
        if !per_task
            .entry(label.task_id)
            .or_default()
            .insert(label.rater_id)
        {
            bail!("a rater labelled task {} twice", label.task_id);
        }
    }
    if let Some((task, raters)) = per_task
        .iter()
        .find(|(_, raters)| raters.len() as i64 > OVERLAP)
    {
        bail!(
            "task {task} has {} labels, more than its overlap of {OVERLAP}",
            raters.len()
        );
    }
    println!(
        "claims: p50 {:.2} ms, p99 {:.2} ms (target p99 under 25 ms); submissions: p50 {:.2} ms, p99 {:.2} ms",
        percentile(&mut claims, 0.50),
        percentile(&mut claims, 0.99),
        percentile(&mut submits, 0.50),
        percentile(&mut submits, 0.99),
    );
    println!(
        "claims after the first {} s (all 200 raters asking in the same instant is over): p50 {:.2} ms, p99 {:.2} ms",
        WARM_UP.as_secs(),
        percentile(&mut steady, 0.50),
        percentile(&mut steady, 0.99),
    );
    println!(
        "rubric items ({} claims, {} labels): claims after the first {} s p50 {:.2} ms, p99 {:.2} ms; submissions p50 {:.2} ms, p99 {:.2} ms",
        rubric_claims.len(),
        rubric_submits.len(),
        WARM_UP.as_secs(),
        percentile(&mut rubric_claims, 0.50),
        percentile(&mut rubric_claims, 0.99),
        percentile(&mut rubric_submits, 0.50),
        percentile(&mut rubric_submits, 0.99),
    );
    // The lead's queue page and each queue monitor round read the whole open queue.
    let report_started = Instant::now();
    let report = arbiter_engine::annotation::queue::queue_report(
        store.as_ref(),
        arbiter_store::now_ms(),
        false,
    )
    .await
    .map_err(|err| anyhow::anyhow!("queue report: {err}"))?;
    println!(
        "queue report over {} open tasks ({} labels to go, {} at risk): {:.2} s",
        report.backlog_tasks,
        report.backlog_labels,
        report.at_risk + report.breached,
        report_started.elapsed().as_secs_f64()
    );
    // Back to back: the open queue summed by serving slot (what the report reads) against the
    // same scan task by task, which must find the same figures.
    let (now, velocity) = (report.now, report.labels_per_hour);
    let grouped_started = Instant::now();
    let grouped = arbiter_engine::annotation::queue::scan_open_queue(store.as_ref(), now, velocity)
        .await
        .map_err(|err| anyhow::anyhow!("grouped scan: {err}"))?;
    let grouped_s = grouped_started.elapsed().as_secs_f64();
    let one_by_one_started = Instant::now();
    let one_by_one =
        arbiter_engine::annotation::queue::scan_task_by_task(store.as_ref(), now, velocity)
            .await
            .map_err(|err| anyhow::anyhow!("task-by-task scan: {err}"))?;
    let one_by_one_s = one_by_one_started.elapsed().as_secs_f64();
    if grouped.figures != one_by_one.figures {
        bail!("the grouped scan's figures differ from the task-by-task scan's");
    }
    println!(
        "open queue scan: summed by slot {grouped_s:.3} s, task by task {one_by_one_s:.3} s ({:.1}x), same figures",
        one_by_one_s / grouped_s
    );
    let gold_answers: u64 = store
        .raters()
        .await?
        .iter()
        .map(|rater| rater.gold_answered)
        .sum();
    println!(
        "{} labels and {gold_answers} gold answers in {elapsed:.1} s = {:.0} submissions/s; {} tasks labelled, none past its overlap",
        labels.len(),
        (labels.len() as u64 + gold_answers) as f64 / elapsed,
        per_task.len()
    );
    Ok(())
}

/// A run of `tasks` identities, each recorded as an undecided answer with a two-rater task;
/// every other one asks rubric version `rubric_id`.
async fn fill_queue(store: &dyn Store, tasks: usize, rubric_id: i64) -> anyhow::Result<RunId> {
    let started = Instant::now();
    let jsonl: String = (0..tasks)
        .map(|index| {
            format!(
                "{{\"id\": \"t{index}\", \"input\": \"item {index}\", \"target\": \"{index}\"}}\n"
            )
        })
        .collect();
    let eval = crate::bench::support::bench_eval(store, "annotators", jsonl.as_bytes()).await?;
    let checkpoint =
        crate::bench::support::answerless_checkpoint(store, "unanswering", "none").await?;
    // Paused at once: only this benchmark answers its identities.
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
    let unsure = "I am not sure.\nIt could be several things.";
    let grade = grade_exact_match(unsure, "0");
    loop {
        let ids = store.claim_work("bench", FILL_BATCH, 600_000).await?;
        if ids.is_empty() {
            break;
        }
        let finished: Vec<FinishedIdentity> = ids
            .into_iter()
            .map(|identity_id| {
                let mut grading = Grading::deterministic_only(Some(grade.clone()));
                if let Some(task) = grading.human.as_mut() {
                    task.routing = HumanRouting {
                        labels_needed: OVERLAP,
                        rubric_id: (identity_id.get() % 2 == 0).then_some(rubric_id),
                        ..HumanRouting::default()
                    };
                }
                FinishedIdentity {
                    identity_id,
                    generation: Generation {
                        outcome: Outcome::Ok,
                        output: unsure.into(),
                        finish_reason: Some("stop".into()),
                        attempts: 1,
                        ..Generation::default()
                    },
                    grading,
                    generation_key: None,
                    cached_from: None,
                    next_turn_waits: false,
                }
            })
            .collect();
        store.record_results(&finished).await?;
    }
    println!(
        "queue of {tasks} tasks filled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(launched.run_id)
}

/// One annotator: claim, think, label (pass or fail, or the rubric's three dimensions), until
/// the session ends or the queue is empty. Returns the claims and the submission latencies in
/// milliseconds, each with whether the item asked the rubric.
async fn annotate(
    store: Arc<dyn Store>,
    rater: UserId,
    seed: u64,
    started: Instant,
) -> anyhow::Result<(Vec<Claim>, Vec<(f64, bool)>)> {
    let (mut claims, mut submits) = (Vec::new(), Vec::new());
    let mut draw = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while started.elapsed() < SESSION {
        let asked = Instant::now();
        let Some(task) = store.next_annotation_task(rater, 60_000).await? else {
            break;
        };
        let rubric = task.rubric.is_some();
        claims.push((asked - started, asked.elapsed().as_secs_f64() * 1e3, rubric));
        draw ^= draw << 13;
        draw ^= draw >> 7;
        draw ^= draw << 17;
        let think = THINK_MS.start + draw % (THINK_MS.end - THINK_MS.start);
        tokio::time::sleep(Duration::from_millis(think)).await;
        let sent = Instant::now();
        if rubric {
            // Through the engine, as the page submits it: checked against the rubric first.
            let answers = format!(
                r#"{{"correct": {}, "helpful": {}, "tone": ["{}"]}}"#,
                !draw.is_multiple_of(5),
                1 + draw % 4,
                if draw.is_multiple_of(3) {
                    "casual"
                } else {
                    "formal"
                }
            );
            arbiter_engine::rubrics::submit_answers(
                store.as_ref(),
                &task.handle,
                rater,
                &answers,
                "",
                None,
            )
            .await
            .map_err(|err| anyhow::anyhow!("rubric label: {err}"))?;
        } else {
            store
                .submit_label(&task.handle, rater, !draw.is_multiple_of(5), "")
                .await?;
        }
        submits.push((sent.elapsed().as_secs_f64() * 1e3, rubric));
    }
    Ok((claims, submits))
}
