//! The demo's code suites: eight small problems in HumanEval's shape (written for this project;
//! the simulator completes their functions, right at each checkpoint's accuracy), and HumanEval
//! itself when `scripts/fetch-humaneval` could get it. Both are graded by running each answer
//! against the problem's tests in the sandbox, with pass@1 and pass@k over their repetitions.
//! Neither is launched here: a launch needs the sandbox, which the researcher's launch checks.

use arbiter_domain::fields::FieldMapping;
use arbiter_domain::ids::UserId;
use arbiter_domain::manifest::SamplingOptions;
use arbiter_domain::prompt::Api;
use arbiter_engine::catalog::{define_eval, upload_dataset, EvalForm, EvalOptions};
use arbiter_store::Store;
use std::path::Path;

/// Eight function stubs with tests and a canonical solution, HumanEval's fields.
pub const CODE_DATASET: &[u8] = include_bytes!("../../../public/samples/code-basic.jsonl");
pub const CODE_EVAL_NAME: &str = "code-basic tests in the sandbox";
pub const HUMANEVAL_EVAL_NAME: &str = "HumanEval pass@k";

/// HumanEval's stop sequences (as its paper and lm-evaluation-harness complete a function):
/// whatever starts a new top-level block ends the completion.
const FUNCTION_STOPS: [&str; 5] = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"];

/// An eval that completes each problem's `prompt` on `/v1/completions` and runs prompt +
/// completion + tests + `check(entry_point)`, at temperature 0.8 for pass@k.
fn code_eval(
    name: &str,
    dataset_id: arbiter_domain::ids::DatasetId,
    repetitions: u32,
    max_tokens: u32,
) -> EvalForm {
    EvalForm {
        name: name.into(),
        dataset_id,
        prompt_template: "{{ prompt }}".into(),
        max_tokens,
        temperature: 0.8,
        repetitions,
        seed: 0,
        grader: serde_json::json!({
            "kind": "code_tests",
            "extract": "whole",
            "prefix_field": "prompt",
            "tests_field": "test",
            "entry_point_field": "entry_point",
        })
        .to_string(),
        options: EvalOptions {
            api: Api::Completions,
            mapping: Some(FieldMapping {
                input: "prompt".into(),
                // Shown beside each answer as the reference; the tests decide.
                target: Some("canonical_solution".into()),
                ..FieldMapping::default()
            }),
            sampling: SamplingOptions {
                stop: FUNCTION_STOPS.iter().map(|stop| stop.to_string()).collect(),
                ..SamplingOptions::default()
            },
            ..EvalOptions::default()
        },
    }
}

/// Uploads the code suites and defines their evals.
pub async fn seed_code(
    store: &dyn Store,
    lead: Option<UserId>,
    humaneval: Option<&Path>,
) -> anyhow::Result<()> {
    let basic = upload_dataset(store, "code-basic", "code-basic.jsonl", CODE_DATASET, lead).await?;
    define_eval(
        store,
        &code_eval(CODE_EVAL_NAME, basic.dataset_id, 3, 256),
        lead,
    )
    .await?;
    let Some(path) = humaneval else {
        return Ok(());
    };
    match std::fs::read(path) {
        Ok(bytes) => {
            let revision =
                upload_dataset(store, "humaneval", "HumanEval.jsonl.gz", &bytes, lead).await?;
            define_eval(
                store,
                &code_eval(HUMANEVAL_EVAL_NAME, revision.dataset_id, 5, 512),
                lead,
            )
            .await?;
        }
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "HumanEval could not be read; the demo goes without it")
        }
    }
    Ok(())
}
