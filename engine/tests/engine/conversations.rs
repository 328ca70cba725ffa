//! Multi-turn conversations: each turn is its own result identity; turn n+1 is claimable only
//! once turn n is recorded and carries the model's own earlier answers; a worker that dies
//! between turns costs nothing but its lease; a turn that gets no answer stops its
//! conversation; every turn of a conversation goes to one replica; and an identical
//! conversation is answered from the cache, turn by turn. The requests are checked on the
//! wire, at two recording replicas.

use arbiter_domain::answer::{Generation, Outcome};
use arbiter_domain::fields::FieldMapping;
use arbiter_domain::grading::record::Grading;
use arbiter_domain::grading::{Grade, Verdict};
use arbiter_engine::catalog::{self, CheckpointForm, EvalForm, EvalOptions};
use arbiter_store::{FinishedIdentity, Store};
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{launch, test_worker, work_until_complete};
use arbiter_testkit::recorder::{Recorded, Recorder, REFUSE};
use arbiter_testkit::stories;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

stories!(conversations_wait_for_their_earlier_turns_and_carry_the_models_answers);

/// Three conversations: c1 and c2 with a reference per turn, c3 whose first turn the
/// endpoint refuses.
fn conversations_jsonl() -> Vec<u8> {
    [
        json!({"id": "c1", "turns": ["What is 2+2?", "Double it."], "reference": ["4", "8"], "category": "math"}),
        json!({"id": "c2", "turns": ["Name a color.", "Another one.", "And a third?"], "reference": [null, null, "green"], "category": "chat"}),
        json!({"id": "c3", "turns": ["Refuse me.", "Unreachable turn."], "category": "chat"}),
    ]
    .iter()
    .map(|item| item.to_string() + "\n")
    .collect::<String>()
    .into_bytes()
}

/// Answers each user turn from a fixed table (the last message is the turn being answered).
fn answer_turn(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    match messages.last().unwrap()["content"].as_str().unwrap() {
        "What is 2+2?" => "4".into(),
        "Double it." => "8".into(),
        "Name a color." => "red".into(),
        "Another one." => "blue".into(),
        "And a third?" => "green".into(),
        "Refuse me." => REFUSE.into(),
        other => format!("unexpected turn: {other}"),
    }
}

fn last_user_turn(request: &Recorded) -> String {
    let messages = request.body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

fn conversation_form(name: &str, dataset_id: arbiter_domain::ids::DatasetId) -> EvalForm {
    EvalForm {
        // No template: each turn is sent as it is, after the system prompt.
        prompt_template: String::new(),
        grader: "exact_match@1".into(),
        options: EvalOptions {
            system_prompt: "Answer in one word.".into(),
            mapping: Some(FieldMapping {
                input: "turns".into(),
                target: Some("reference".into()),
                ..FieldMapping::default()
            }),
            ..EvalOptions::default()
        },
        ..eval_form(name, dataset_id, 1)
    }
}

async fn conversations_wait_for_their_earlier_turns_and_carry_the_models_answers(
    store: Arc<dyn Store>,
) {
    let replica_a = Recorder::start("chat-model", answer_turn).await;
    let replica_b = Recorder::start("chat-model", answer_turn).await;
    let revision = catalog::upload_dataset(
        store.as_ref(),
        "dialogues",
        "dialogues.jsonl",
        &conversations_jsonl(),
        None,
    )
    .await
    .unwrap();
    let eval = catalog::define_eval(
        store.as_ref(),
        &conversation_form("dialogues", revision.dataset_id),
        None,
    )
    .await
    .unwrap();
    let checkpoint = catalog::register_checkpoint(
        store.as_ref(),
        &CheckpointForm {
            name: "chat".into(),
            endpoint_url: replica_a.base_url.clone(),
            replica_urls: replica_b.base_url.clone(),
            model: "chat-model".into(),
            ..CheckpointForm::default()
        },
        None,
    )
    .await
    .unwrap();
    let run = launch(store.as_ref(), eval, checkpoint).await;
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    assert_eq!(manifest.conversation_turns, Some(7), "2 + 3 + 2 turns");
    assert_eq!(manifest.expected_results(), 7);

    // Only first turns are claimable: later ones wait for the turn before them.
    let claimed = store
        .claim_identities("doomed", run, 100, 60_000, true)
        .await
        .unwrap();
    let mut first_turns: Vec<(String, i64)> = claimed
        .iter()
        .map(|job| (job.case_id.clone(), job.turn))
        .collect();
    first_turns.sort();
    assert_eq!(
        first_turns,
        vec![("c1".into(), 1), ("c2".into(), 1), ("c3".into(), 1)]
    );
    // The doomed worker answers c1's first turn itself and gives the others back.
    for job in &claimed {
        if job.case_id == "c1" {
            let generation = Generation {
                outcome: Outcome::Ok,
                output: "4".into(),
                ..Generation::default()
            };
            let grade = Grade {
                grader: "exact_match@1".into(),
                verdict: Verdict::Pass,
                extracted_answer: Some("4".into()),
                reason: "matches".into(),
            };
            let recorded = store
                .record_results(&[FinishedIdentity {
                    identity_id: job.identity_id,
                    generation,
                    grading: Grading::deterministic_only(Some(grade)),
                    generation_key: job.generation_key.clone(),
                    cached_from: None,
                    next_turn_waits: true,
                }])
                .await
                .unwrap();
            assert_eq!(recorded.inserted, 1);
        } else {
            assert!(store
                .release_lease("doomed", job.identity_id)
                .await
                .unwrap());
        }
    }
    // c1's second turn is claimable now, with the answer to its first; the doomed worker
    // takes its lease and dies before sending anything.
    let claimed = store
        .claim_identities("doomed", run, 100, 1, true)
        .await
        .unwrap();
    let second = claimed
        .iter()
        .find(|job| job.case_id == "c1")
        .expect("c1's second turn is claimable once its first is recorded");
    assert_eq!(second.turn, 2);
    assert_eq!(second.earlier_answers, vec!["4".to_string()]);
    assert!(
        claimed
            .iter()
            .all(|job| job.case_id == "c1" || job.turn == 1),
        "no other conversation has a turn recorded"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.reap_expired_leases().await.unwrap(), 3);

    // Another worker finishes the run.
    let progress = work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let progress = &progress[0];
    assert_eq!(progress.expected, 7);
    assert_eq!(progress.done, 7);
    // c1: 4 and 8 pass; c2: red and blue have no reference (undecided), green passes;
    // c3: the refused first turn is an error and its second turn stopped.
    assert_eq!(progress.passed, 3, "{progress:?}");
    assert_eq!(progress.errors, 2, "{progress:?}");

    let mut requests: Vec<(String, Recorded)> = Vec::new();
    for (replica, recorder) in [("a", &replica_a), ("b", &replica_b)] {
        requests.extend(
            recorder
                .requests()
                .into_iter()
                .map(|request| (replica.to_string(), request)),
        );
    }
    // Every turn sent exactly once, c1's first never (the doomed worker recorded it), c3's
    // second never (its conversation stopped).
    let mut sent: Vec<String> = requests
        .iter()
        .map(|(_, request)| last_user_turn(request))
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        vec![
            "And a third?",
            "Another one.",
            "Double it.",
            "Name a color.",
            "Refuse me."
        ]
    );
    // Turn 3 of c2 carries the model's own answers to turns 1 and 2.
    let (_, third) = requests
        .iter()
        .find(|(_, request)| last_user_turn(request) == "And a third?")
        .unwrap();
    assert_eq!(
        third.body["messages"],
        json!([
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "red"},
            {"role": "user", "content": "Another one."},
            {"role": "assistant", "content": "blue"},
            {"role": "user", "content": "And a third?"}
        ])
    );
    let (_, double_it) = requests
        .iter()
        .find(|(_, request)| last_user_turn(request) == "Double it.")
        .unwrap();
    assert_eq!(double_it.body["messages"][2]["content"], "4");
    // Every turn of c2 went to the same replica.
    let c2_replicas: std::collections::HashSet<&str> = requests
        .iter()
        .filter(|(_, request)| {
            ["Name a color.", "Another one.", "And a third?"]
                .contains(&last_user_turn(request).as_str())
        })
        .map(|(replica, _)| replica.as_str())
        .collect();
    assert_eq!(c2_replicas.len(), 1, "one replica per conversation");

    // Results by turn, with the stopped turn's distinct outcome.
    let results = store.run_results(run, 100).await.unwrap();
    let rows: Vec<(&str, i64, &str, &str)> = results
        .iter()
        .map(|result| {
            (
                result.case_id.as_str(),
                result.turn,
                result.outcome.as_str(),
                result.verdict.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("c1", 1, "ok", "pass"),
            ("c1", 2, "ok", "pass"),
            ("c2", 1, "ok", "uncertain"),
            ("c2", 2, "ok", "uncertain"),
            ("c2", 3, "ok", "pass"),
            ("c3", 1, "endpoint_error", "error"),
            ("c3", 2, "stopped", "error"),
        ]
    );
    // As people read them: each turn's own message and reference, not the whole item.
    let shown = arbiter_engine::runs::run_results(store.as_ref(), run, 100)
        .await
        .unwrap();
    let shown: Vec<(&str, &str)> = shown
        .iter()
        .filter(|result| result.case_id == "c1")
        .map(|result| (result.input.as_str(), result.target.as_str()))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("[system]\nAnswer in one word.\n\n[user]\nWhat is 2+2?", "4"),
            ("Double it.", "8")
        ]
    );
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), run)
        .await
        .unwrap();
    let by_turn: Vec<(u32, u64, u64, u64)> = report
        .turns
        .iter()
        .map(|turn| {
            (
                turn.turn,
                turn.counts.passed,
                turn.counts.errors,
                turn.counts.stopped,
            )
        })
        .collect();
    assert_eq!(by_turn, vec![(1, 1, 1, 0), (2, 1, 1, 1), (3, 1, 0, 0)]);

    // A rater labelling an undecided turn sees the conversation as the model had it: every
    // earlier turn with the model's own answer, then the turn, and the turn's reference.
    let rater = store
        .create_user(
            "rater",
            &stand_in_hash("rater"),
            arbiter_domain::accounts::Role::Annotator,
        )
        .await
        .unwrap();
    let mut shown = None;
    for _ in 0..10 {
        let Some(mut task) = store.next_annotation_task(rater, 60_000).await.unwrap() else {
            break;
        };
        if task.output == "blue" {
            arbiter_engine::runs::show_task_as_sent(store.as_ref(), &mut task)
                .await
                .unwrap();
            shown = Some(task);
            break;
        }
        store.skip_task(&task.handle, rater).await.unwrap();
    }
    let shown = shown.expect("c2's undecided second turn went to people");
    assert_eq!(
        shown.input,
        "[system]\nAnswer in one word.\n\n[user]\nName a color.\n\n[assistant]\nred\n\n[user]\nAnother one."
    );
    assert_eq!(shown.target, "", "the second turn has no reference");

    // The same conversations under another eval name: every answered turn comes from the
    // cache (later turns keyed once their earlier answers are known); only c3's refused
    // first turn, never cached, is sent again.
    let again = catalog::define_eval(
        store.as_ref(),
        &conversation_form("dialogues-again", revision.dataset_id),
        None,
    )
    .await
    .unwrap();
    let rerun = launch(store.as_ref(), again, checkpoint).await;
    let before = replica_a.requests().len() + replica_b.requests().len();
    let progress = work_until_complete(store.clone(), &[rerun], test_worker("w2")).await;
    assert_eq!(progress[0].done, 7);
    assert_eq!(progress[0].passed, 3);
    let after = replica_a.requests().len() + replica_b.requests().len();
    assert_eq!(after - before, 1, "only c3's first turn is sent again");
    let cached: Vec<(String, i64, bool)> = store
        .run_results(rerun, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|result| (result.case_id, result.turn, result.from_cache))
        .collect();
    assert!(cached
        .iter()
        .filter(|(case, _, _)| case != "c3")
        .all(|(_, _, from_cache)| *from_cache));
}
