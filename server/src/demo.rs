//! `arbiter demo`: a fresh embedded database seeded with accounts, the bundled dataset, an
//! eval and simulated checkpoints, with two runs launched so every page has real data.
//!
//! Everything here goes through the same engine calls a user's clicks do; nothing is inserted
//! behind the engine's back.

use arbiter_engine::auth::Role;
use arbiter_engine::service::{self, EvalForm};
use arbiter_engine::store::{Store, PRIORITY_SCHEDULED};

/// Demo accounts: (username, role, password). Printed at start-up; for local use only.
pub const DEMO_ACCOUNTS: [(&str, Role, &str); 5] = [
    ("lead", Role::Lead, "lead-demo-pass"),
    ("researcher", Role::Researcher, "researcher-demo-pass"),
    ("annotator1", Role::Annotator, "annotator1-demo-pass"),
    ("annotator2", Role::Annotator, "annotator2-demo-pass"),
    ("reviewer", Role::Reviewer, "reviewer-demo-pass"),
];

/// The bundled sample dataset (written for this project): 60 questions in three categories.
pub const SAMPLE_DATASET: &[u8] = include_bytes!("../../public/samples/qa-basic.jsonl");
pub const SAMPLE_DATASET_NAME: &str = "qa-basic";
pub const DEMO_EVAL_NAME: &str = "qa-basic exact match";

/// The demo's checkpoints: (checkpoint name, served model name in `arbiter sim`).
pub const DEMO_CHECKPOINTS: [(&str, &str); 3] = [
    ("simulator/ckpt-a", "sim-ckpt-a"),
    ("simulator/ckpt-b", "sim-ckpt-b"),
    ("simulator/judge", "sim-judge"),
];

/// What `seed` created, for the start-up banner and tests.
pub struct DemoSeed {
    pub run_ids: Vec<i64>,
}

/// Creates the accounts, dataset, checkpoints and eval, and launches the two comparison runs.
pub async fn seed(store: &dyn Store, sim_base_url: &str) -> anyhow::Result<DemoSeed> {
    for (username, role, password) in DEMO_ACCOUNTS {
        service::create_user(store, username, password, role).await?;
    }
    let lead = store
        .find_user_credentials("researcher")
        .await?
        .map(|credentials| credentials.user.id);
    let revision = service::upload_dataset(
        store,
        SAMPLE_DATASET_NAME,
        "qa-basic.jsonl",
        SAMPLE_DATASET,
        lead,
    )
    .await?;
    let mut checkpoint_ids = Vec::new();
    for (name, model) in DEMO_CHECKPOINTS {
        checkpoint_ids.push(
            service::register_simple_checkpoint(store, name, sim_base_url, model, lead).await?,
        );
    }
    let eval_id = service::define_eval(
        store,
        &EvalForm {
            name: DEMO_EVAL_NAME.into(),
            dataset_id: revision.dataset_id,
            prompt_template: "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {input}".into(),
            max_tokens: 128,
            temperature: 0.0,
            repetitions: 2,
            seed: 0,
        },
        lead,
    )
    .await?;
    let mut run_ids = Vec::new();
    for checkpoint_id in &checkpoint_ids[..2] {
        run_ids.push(
            service::launch_run(
                store,
                eval_id,
                *checkpoint_id,
                PRIORITY_SCHEDULED,
                "default",
                lead,
            )
            .await?
            .run_id,
        );
    }
    Ok(DemoSeed { run_ids })
}
