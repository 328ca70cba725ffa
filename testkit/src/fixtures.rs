//! Fixtures for store and engine tests: sample datasets, an eval, a launched run, answers and
//! endpoint failures recorded straight into the store, items escalated to humans.

use arbiter_domain::accounts::{PasswordHash, Role, User};
use arbiter_domain::answer::{ErrorCategory, Generation, Outcome};
use arbiter_domain::grading::grade_exact_match;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::ids::{DatasetId, IdentityId, RunId, UserId};
use arbiter_domain::run::{Priority, RunProgress};
use arbiter_engine::catalog::{EvalForm, EvalOptions};
use arbiter_store::{FinishedIdentity, Store};

/// The bundled sample: 60 cases in three categories.
pub const SAMPLE: &[u8] = include_bytes!("../../public/samples/qa-basic.jsonl");

pub const FIVE_CASES: &str = r#"{"id": "c1", "input": "What is 1 + 1?", "target": "2"}
{"id": "c2", "input": "What is 2 + 2?", "target": "4"}
{"id": "c3", "input": "What is 3 + 3?", "target": "6"}
{"id": "c4", "input": "What is 4 + 4?", "target": "8"}
{"id": "c5", "input": "What is 5 + 5?", "target": "10"}
"#;

pub const THREE_CASES: &str = r#"{"id": "q1", "input": "What is 6 times 7?", "target": "42"}
{"id": "q2", "input": "What is the capital of France?", "target": "Paris"}
{"id": "q3", "input": "How many legs has a spider?", "target": "8"}
"#;

/// A reply with no recognisable answer: the exact-match grader calls it uncertain.
pub const UNSURE: &str = "I am not sure.\nNo idea.";

pub const PROMPT_TEMPLATE: &str = "Question: {input}\nEnd with a line `Answer: <answer>`.";

/// A loopback port nothing listens on: launches probe it and find nothing, quickly.
pub const ENDPOINT: &str = "http://127.0.0.1:9";

/// Long enough that no lease expires during a test.
pub const LONG_LEASE_MS: i64 = 10 * 60 * 1000;

/// A new account of `role` (password hash a stand-in), in team `default`.
pub async fn new_user(store: &dyn Store, name: &str, role: Role) -> UserId {
    store
        .create_user(name, &stand_in_hash(name), role)
        .await
        .unwrap()
}

/// A new account of `role` in `team`.
pub async fn team_member(store: &dyn Store, name: &str, role: Role, team: &str) -> User {
    let id = new_user(store, name, role).await;
    assert!(store.set_team(name, team).await.unwrap());
    store.get_user(id).await.unwrap().unwrap()
}

/// Store-level tests need a hash, not a real one: Argon2 would only slow them down.
pub fn stand_in_hash(label: &str) -> PasswordHash {
    PasswordHash::from_stored(format!("$argon2id$v=19$stand-in${label}"))
}

pub fn eval_form(name: &str, dataset_id: DatasetId, repetitions: u32) -> EvalForm {
    EvalForm {
        name: name.to_string(),
        dataset_id,
        prompt_template: PROMPT_TEMPLATE.to_string(),
        max_tokens: 64,
        temperature: 0.0,
        repetitions,
        seed: 7,
        grader: String::new(),
        options: EvalOptions::default(),
    }
}

/// Uploads `dataset`, registers one checkpoint and one eval, and launches the run.
pub async fn launch_one_run(store: &dyn Store, dataset: &[u8], repetitions: u32) -> RunId {
    launch_with_policy(store, dataset, repetitions, None).await
}

/// As [`launch_one_run`], with a triage policy saved on the eval before the launch.
pub async fn launch_with_policy(
    store: &dyn Store,
    dataset: &[u8],
    repetitions: u32,
    policy: Option<&arbiter_engine::grading::PolicyForm>,
) -> RunId {
    let revision = arbiter_engine::catalog::upload_dataset(store, "qa", "qa.jsonl", dataset, None)
        .await
        .expect("the dataset uploads");
    let checkpoint = arbiter_engine::catalog::register_simple_checkpoint(
        store,
        "base",
        ENDPOINT,
        "base-model",
        None,
    )
    .await
    .expect("the checkpoint registers");
    let eval = arbiter_engine::catalog::define_eval(
        store,
        &eval_form("qa-exact", revision.dataset_id, repetitions),
        None,
    )
    .await
    .expect("the eval is valid");
    if let Some(policy) = policy {
        arbiter_engine::grading::save_policy(store, eval, policy, None)
            .await
            .expect("the policy is valid");
    }
    let launched = arbiter_engine::runs::launch_run(
        store,
        eval,
        checkpoint,
        Priority::Scheduled,
        "default",
        None,
    )
    .await
    .expect("the run launches");
    assert!(launched.created);
    launched.run_id
}

pub fn answered(output: &str) -> Generation {
    Generation {
        outcome: Outcome::Ok,
        output: output.to_string(),
        finish_reason: Some("stop".into()),
        error: None,
        latency_ms: 12,
        attempts: 1,
        prompt_tokens: Some(20),
        completion_tokens: Some(4),
        logprobs: None,
        ..Generation::default()
    }
}

/// The results of `ids`, each answered `output` and graded by exact match against `target`,
/// as a worker would record them.
pub fn answered_all(ids: &[IdentityId], output: &str, target: &str) -> Vec<FinishedIdentity> {
    ids.iter()
        .map(|&identity_id| FinishedIdentity {
            identity_id,
            generation: answered(output),
            grading: Grading::deterministic_only(Some(grade_exact_match(output, target))),
            generation_key: None,
            cached_from: None,
            next_turn_waits: false,
        })
        .collect()
}

pub fn endpoint_failure(error: &str) -> Generation {
    Generation {
        outcome: Outcome::EndpointError,
        output: String::new(),
        finish_reason: None,
        error: Some(error.to_string()),
        latency_ms: 3000,
        attempts: 3,
        prompt_tokens: None,
        completion_tokens: None,
        logprobs: None,
        error_category: Some(ErrorCategory::Connect),
        ..Generation::default()
    }
}

/// How a simulated model answers one item.
#[derive(Clone, Copy, Debug)]
pub enum Reply {
    Correct,
    Wrong,
    Unsure,
}

impl Reply {
    pub fn output(self, target: &str) -> String {
        match self {
            Reply::Correct => format!("Let me see.\nAnswer: {target}"),
            Reply::Wrong => "Answer: certainly not this".to_string(),
            Reply::Unsure => UNSURE.to_string(),
        }
    }
}

/// Answers a work item as a worker would: load the job, grade the reply, record both.
/// Returns what `record_result` returns (false for a duplicate commit).
pub async fn reply(store: &dyn Store, identity_id: IdentityId, answer: Reply) -> bool {
    let job = store
        .load_identity(identity_id)
        .await
        .expect("a claimed item loads");
    let output = answer.output(&job.target);
    let grade = grade_exact_match(&output, &job.target);
    store
        .record_result(identity_id, &answered(&output), Some(&grade))
        .await
        .expect("recording a result succeeds")
}

/// `rater` claims the next item of the human queue and labels it pass or fail.
pub async fn label_next(store: &dyn Store, rater: UserId, pass: bool) {
    let task = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
        .expect("an item is offered");
    store
        .submit_label(&task.handle, rater, pass, "")
        .await
        .unwrap();
}

/// Records each identity as an answer the grader cannot read, escalated to `raters` distinct
/// human raters per item (no QC review, any skill).
pub async fn escalate_to_humans(store: &dyn Store, ids: &[IdentityId], raters: i64) {
    let finished: Vec<FinishedIdentity> = ids
        .iter()
        .map(|&identity_id| {
            let mut grading = Grading::deterministic_only(Some(grade_exact_match(UNSURE, "42")));
            let task = grading
                .human
                .as_mut()
                .expect("an unreadable answer goes to humans");
            task.routing = arbiter_domain::grading::triage::HumanRouting {
                labels_needed: raters,
                skill: None,
                review_rate: 0.0,
                rubric_id: None,
            };
            FinishedIdentity {
                identity_id,
                generation: answered(UNSURE),
                grading,
                generation_key: None,
                cached_from: None,
                next_turn_waits: false,
            }
        })
        .collect();
    store.record_results(&finished).await.unwrap();
}

/// Records `ids` of `run` as answered with an unreadable answer, each sent to humans as the
/// run's frozen triage policy routes it (overlap, review rate, rubric).
pub async fn escalate_as_routed(store: &dyn Store, run: RunId, ids: &[IdentityId]) {
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    let finished: Vec<FinishedIdentity> = ids
        .iter()
        .map(|&identity_id| FinishedIdentity {
            identity_id,
            generation: answered(UNSURE),
            grading: Grading::deterministic_only(Some(grade_exact_match(UNSURE, "42")))
                .route(manifest.triage.as_ref()),
            generation_key: None,
            cached_from: None,
            next_turn_waits: false,
        })
        .collect();
    store.record_results(&finished).await.unwrap();
}

pub async fn progress(store: &dyn Store, run_id: RunId) -> RunProgress {
    store
        .run_progress(run_id)
        .await
        .expect("progress reads")
        .expect("the run exists")
}

/// A served checkpoint's newest launch.
pub async fn latest_launch(
    store: &dyn Store,
    checkpoint: arbiter_domain::ids::CheckpointId,
) -> arbiter_domain::serving::launch::Launch {
    store
        .list_launches(Some(checkpoint), 1)
        .await
        .expect("launches read")
        .into_iter()
        .next()
        .expect("the checkpoint has a launch")
}
