//! `arbiter demo`: a fresh embedded database seeded with accounts, the bundled dataset, an
//! eval and simulated checkpoints, with two runs launched so every page has real data.
//!
//! Everything here goes through the same engine calls a user's clicks do; nothing is inserted
//! behind the engine's back.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::pool::RaterUpdate;
use arbiter_domain::grading::judge::DEFAULT_RUBRIC;
use arbiter_domain::ids::{CheckpointId, DatasetId, EvalId, RunId, UserId};
use arbiter_domain::run::Priority;
use arbiter_engine::catalog::{CheckpointForm, EvalForm};
use arbiter_engine::grading::{self, JudgeForm, PolicyForm};
use arbiter_store::Store;

mod code;
pub use code::{CODE_DATASET, CODE_EVAL_NAME, HUMANEVAL_EVAL_NAME};

/// Demo accounts: (username, role, password). Printed at start-up; for local use only.
pub const DEMO_ACCOUNTS: [(&str, Role, &str); 5] = [
    ("lead", Role::Lead, "lead-demo-pass"),
    ("researcher", Role::Researcher, "researcher-demo-pass"),
    ("annotator1", Role::Annotator, "annotator1-demo-pass"),
    ("annotator2", Role::Annotator, "annotator2-demo-pass"),
    ("reviewer", Role::Reviewer, "reviewer-demo-pass"),
];

/// Where the demo lead's alert mail goes (written to files under the demo's data directory).
pub const DEMO_LEAD_EMAIL: &str = "lead@arbiter.demo";
/// Hours a week each demo rater offers, so the queue page's availability has numbers.
const DEMO_RATER_HOURS: f64 = 10.0;

/// The bundled sample dataset (written for this project): 60 questions in three categories.
pub const SAMPLE_DATASET: &[u8] = include_bytes!("../../public/samples/qa-basic.jsonl");
pub const SAMPLE_DATASET_NAME: &str = "qa-basic";
pub const DEMO_EVAL_NAME: &str = "qa-basic exact match";

/// Multi-turn conversations over the sample questions (written for this project): each turn
/// asks one question, with a reference answer per turn.
pub const DIALOGUE_DATASET: &[u8] = include_bytes!("../../public/samples/qa-dialogues.jsonl");
pub const DIALOGUE_DATASET_NAME: &str = "qa-dialogues";
pub const DIALOGUE_EVAL_NAME: &str = "qa-dialogues by turn";
/// Multiple choice as MMLU publishes it (question, four choices, the right one's index, a
/// subject), over the sample questions; written for this project.
pub const CHOICE_DATASET: &[u8] = include_bytes!("../../public/samples/qa-choice.jsonl");
pub const CHOICE_EVAL_NAME: &str = "qa-choice lettered, shuffled";
/// The same questions scored by the likelihood of each choice (lm-eval's `multiple_choice`).
pub const LIKELIHOOD_EVAL_NAME: &str = "qa-choice by likelihood";
/// Arithmetic questions with a worked solution and the final answer, asked GSM8K-style after
/// three solved examples; written for this project.
pub const SHOTS_DATASET: &[u8] = include_bytes!("../../public/samples/qa-arith-shots.jsonl");
pub const SHOTS_EVAL_NAME: &str = "qa-arith 3-shot";
/// Requests with verifiable instructions in IFEval's shape (instruction ids and their
/// parameters per item), each with an answer that follows them and one that does not; written
/// for this project.
pub const INSTRUCTIONS_DATASET: &[u8] =
    include_bytes!("../../public/samples/instructions-basic.jsonl");
pub const INSTRUCTIONS_EVAL_NAME: &str = "instructions-basic, IFEval checks";
/// Short paragraphs of plain prose (an id, the text, a category), scored by rolling
/// log-likelihood for perplexity and bits per byte; written for this project.
pub const PROSE_DATASET: &[u8] = include_bytes!("../../public/samples/prose.jsonl");
pub const PROSE_EVAL_NAME: &str = "prose perplexity";

/// Each turn in the demo eval's wording; the turn's text is `input`.
const DIALOGUE_PROMPT: &str =
    "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {{ input }}";

/// The demo's checkpoints: (checkpoint name, served model name in `arbiter sim`, USD per
/// million prompt and completion tokens). Prices are illustrative: a small model under test, a
/// cheap judge and a strong judge that costs about fifteen times as much.
/// The training run the demo's answering checkpoints belong to.
pub const DEMO_TRAINING_RUN: &str = "sim-pretrain";

pub const DEMO_CHECKPOINTS: [(&str, &str, &str, &str); 4] = [
    ("simulator/ckpt-a", "sim-ckpt-a", "0.20", "0.60"),
    ("simulator/ckpt-b", "sim-ckpt-b", "0.20", "0.60"),
    ("simulator/judge", "sim-judge", "0.15", "0.60"),
    (
        "simulator/judge-strong",
        "sim-judge-strong",
        "2.50",
        "10.00",
    ),
];

/// The demo eval's triage: deterministic exact match, then the cheap judge, the strong judge
/// for its middle band, humans below that; 2% of accepted verdicts audited.
pub fn demo_policy(cheap_judge: i64, strong_judge: i64) -> PolicyForm {
    PolicyForm {
        cheap_judge: cheap_judge.to_string(),
        strong_judge: strong_judge.to_string(),
        accept_threshold: "0.9".into(),
        escalate_threshold: "0.75".into(),
        audit_rate: "0.02".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0.40".into(),
        // Two raters per item, so agreement between raters is measured from the start.
        human_overlap: "2".into(),
        note: "demo policy".into(),
        ..PolicyForm::default()
    }
}

/// What `seed` created, for the start-up banner, `seed_real_model` and tests.
pub struct DemoSeed {
    pub run_ids: Vec<RunId>,
    pub dataset_id: DatasetId,
    pub eval_id: EvalId,
    /// The simulated checkpoint the real judge's eval runs on.
    pub answering_checkpoint_id: CheckpointId,
    pub strong_judge_id: i64,
}

/// The bundled real model (`arbiter model serve` with SmolLM2-135M-Instruct), when present:
/// the model name it serves, its checkpoint, and the eval it judges.
pub const REAL_MODEL_NAME: &str = "smollm2-135m-instruct";
pub const REAL_CHECKPOINT_NAME: &str = "smollm2/135m-instruct";
pub const REAL_JUDGE_EVAL_NAME: &str = "qa-basic, SmolLM2 judge";
/// A 135M-parameter model does not follow the default rubric's "verdict, then a sentence";
/// asked for one word, it starts its reply with PASS or FAIL, and its logprobs there give the
/// confidence.
pub const REAL_JUDGE_RUBRIC: &str = "Question: {input}\nReference answer: {target}\n\
    Candidate's answer: {output}\n\nDoes the candidate's answer match the reference answer? \
    Reply with one word: PASS or FAIL.";

/// The demo eval's prompt: the answer on a last line of its own, for exact match.
const DEMO_PROMPT: &str =
    "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {input}";

/// Creates the accounts, dataset, checkpoints and eval, and launches the two comparison runs.
pub async fn seed(
    store: &dyn Store,
    sim_base_url: &str,
    humaneval: Option<&std::path::Path>,
) -> anyhow::Result<DemoSeed> {
    for (username, role, password) in DEMO_ACCOUNTS {
        let id = arbiter_engine::accounts::create_user(store, username, password, role).await?;
        let update = RaterUpdate {
            email: (role == Role::Lead).then(|| Some(DEMO_LEAD_EMAIL.to_string())),
            weekly_capacity_hours: (role != Role::Researcher).then_some(DEMO_RATER_HOURS),
            ..RaterUpdate::default()
        };
        store.update_rater(id, &update).await?;
    }
    let lead = store
        .find_user_credentials("researcher")
        .await?
        .map(|credentials| credentials.user.id);
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        SAMPLE_DATASET_NAME,
        "qa-basic.jsonl",
        SAMPLE_DATASET,
        lead,
    )
    .await?;
    let mut checkpoint_ids = Vec::new();
    for (name, model, input_price, output_price) in DEMO_CHECKPOINTS {
        // The two answering checkpoints are steps of one training run, so the trends page has
        // something to show; the judges are not.
        let (training_run, training_step) = match name {
            "simulator/ckpt-a" => (DEMO_TRAINING_RUN, "1000"),
            "simulator/ckpt-b" => (DEMO_TRAINING_RUN, "2000"),
            _ => ("", ""),
        };
        let form = CheckpointForm {
            name: name.into(),
            endpoint_url: sim_base_url.into(),
            model: model.into(),
            input_usd_per_mtok: input_price.into(),
            output_usd_per_mtok: output_price.into(),
            training_run: training_run.into(),
            training_step: training_step.into(),
            ..CheckpointForm::default()
        };
        checkpoint_ids
            .push(arbiter_engine::catalog::register_checkpoint(store, &form, lead).await?);
    }
    let eval_id = arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: DEMO_EVAL_NAME.into(),
            dataset_id: revision.dataset_id,
            prompt_template: DEMO_PROMPT.into(),
            max_tokens: 128,
            temperature: 0.0,
            repetitions: 2,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        lead,
    )
    .await?;
    seed_dialogues(store, lead).await?;
    seed_choice_and_shots(store, lead).await?;
    seed_rubric(store, lead).await?;
    code::seed_code(store, lead, humaneval).await?;
    let mut judge_ids = Vec::new();
    for (name, checkpoint_id) in [
        ("qa-judge", checkpoint_ids[2]),
        ("qa-judge-strong", checkpoint_ids[3]),
    ] {
        let form = JudgeForm {
            name: name.into(),
            checkpoint_id,
            rubric: DEFAULT_RUBRIC.into(),
            max_tokens: 64,
            scale_rubric: String::new(),
            scale_dimension: String::new(),
            scale_pass_at_least: String::new(),
            pairwise: false,
            batch_items: 1,
        };
        judge_ids.push(grading::define_judge(store, &form, lead).await?.id);
    }
    grading::save_policy(
        store,
        eval_id,
        &demo_policy(judge_ids[0], judge_ids[1]),
        lead,
    )
    .await?;
    let mut run_ids = Vec::new();
    for checkpoint_id in &checkpoint_ids[..2] {
        run_ids.push(
            arbiter_engine::runs::launch_run(
                store,
                eval_id,
                *checkpoint_id,
                Priority::Scheduled,
                "default",
                lead,
            )
            .await?
            .run_id,
        );
    }
    // New checkpoints of the demo's training run get the eval as a smoke suite, whether they
    // are announced through the API or the watched folder.
    arbiter_engine::suites::create_suite(
        store,
        &arbiter_engine::suites::SuiteForm {
            name: "demo-smoke".into(),
            tier: arbiter_domain::suites::TIER_SMOKE.into(),
            every_nth: None,
            training_run: DEMO_TRAINING_RUN.into(),
            team: String::new(),
            eval_ids: vec![eval_id],
        },
        "default",
        true,
        lead,
    )
    .await?;
    Ok(DemoSeed {
        run_ids,
        dataset_id: revision.dataset_id,
        eval_id,
        answering_checkpoint_id: checkpoint_ids[0],
        strong_judge_id: judge_ids[1],
    })
}

/// The demo's rubric: whether the answer is right (which decides the item), how helpful it is
/// on an anchored scale, and what is wrong with it.
const DEMO_RUBRIC: &str = r#"{
  "dimensions": [
    {"key": "correct", "question": "Is the final answer correct?", "kind": "binary"},
    {"key": "helpful", "question": "How helpful is the reply as a whole?", "kind": "ordinal", "scale": [
      {"label": "Poor", "description": "Does not address the question, or misleads"},
      {"label": "Fair", "description": "Addresses it partly, or buries the answer"},
      {"label": "Good", "description": "Answers it with sound reasoning"},
      {"label": "Excellent", "description": "Answers it clearly and concisely, reasoning shown"}]},
    {"key": "issues", "question": "What is wrong with it?", "kind": "categorical",
     "options": ["factual error", "no final answer", "unsafe", "off topic"], "multiple": true, "required": false}
  ],
  "verdict": {"dimension": "correct"}
}"#;

const DEMO_GUIDELINES: &str = "## Answer quality\n\n\
Judge the **final answer** first: it is correct when it matches the reference answer, \
whatever the wording (`4`, `four` and `4.0` are all right for *2 + 2*).\n\n\
| Reply | correct | helpful |\n|---|---|---|\n\
| `Two and two make four.` + `Answer: 4` | pass | Excellent |\n\
| A page of reasoning ending `Answer: 5` | fail | Fair |\n\
| `I cannot say.` | fail | Poor |\n\n\
Tick every issue that applies; leave *issues* empty when there are none.\n";

/// The demo's rubric and its guidelines, for eval policies to name.
async fn seed_rubric(store: &dyn Store, lead: Option<UserId>) -> anyhow::Result<()> {
    arbiter_engine::rubrics::create_rubric(
        store,
        "answer quality",
        DEMO_RUBRIC,
        "demo rubric",
        lead,
    )
    .await?;
    arbiter_engine::rubrics::add_guidelines(
        store,
        "answer quality",
        DEMO_GUIDELINES,
        "first version",
        lead,
    )
    .await?;
    Ok(())
}

/// The multi-turn suite: its dataset and an eval mapping its turns and per-turn references,
/// ready to launch (each turn is sent with the model's own answers to the turns before it).
async fn seed_dialogues(
    store: &dyn Store,
    lead: Option<arbiter_domain::ids::UserId>,
) -> anyhow::Result<EvalId> {
    let revision = arbiter_engine::catalog::upload_dataset(
        store,
        DIALOGUE_DATASET_NAME,
        "qa-dialogues.jsonl",
        DIALOGUE_DATASET,
        lead,
    )
    .await?;
    let eval_id = arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: DIALOGUE_EVAL_NAME.into(),
            dataset_id: revision.dataset_id,
            prompt_template: DIALOGUE_PROMPT.into(),
            max_tokens: 128,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions {
                mapping: Some(arbiter_domain::fields::FieldMapping {
                    input: "turns".into(),
                    target: Some("reference".into()),
                    ..arbiter_domain::fields::FieldMapping::default()
                }),
                ..arbiter_engine::catalog::EvalOptions::default()
            },
        },
        lead,
    )
    .await?;
    Ok(eval_id)
}

/// The prompt of multiple choice as MMLU publishes it: the question, its lettered choices.
pub const CHOICE_TEMPLATE: &str =
    "{{ question }}\n{{ choices | lettered }}\nAnswer with the letter of the right option.";

/// How an eval reads MMLU's items (question, choices, the answer's index, subject): choices
/// shuffled per item with a seed, and a system prompt naming the subject.
pub fn choice_options() -> arbiter_engine::catalog::EvalOptions {
    arbiter_engine::catalog::EvalOptions {
        system_prompt: "You answer {{ subject }} questions.".into(),
        mapping: Some(arbiter_domain::fields::FieldMapping {
            input: "question".into(),
            target: Some("answer".into()),
            choices: Some("choices".into()),
            category: Some("subject".into()),
            metadata: Vec::new(),
            shuffle_choices: Some(7),
            images: None,
        }),
        ..arbiter_engine::catalog::EvalOptions::default()
    }
}

/// The multiple-choice suite (choices lettered and shuffled per item with a seed, the target
/// following its choice) and the few-shot suite (three solved examples drawn with a seed from
/// the same dataset, never the item itself), ready to launch.
async fn seed_choice_and_shots(
    store: &dyn Store,
    lead: Option<arbiter_domain::ids::UserId>,
) -> anyhow::Result<()> {
    use arbiter_domain::fields::FieldMapping;
    use arbiter_domain::prompt::few_shot::{FewShotSpec, FewShotStyle};
    use arbiter_engine::catalog::{define_eval, upload_dataset, EvalOptions};
    let form = |name: &str, dataset_id, template: &str, grader: &str, options| EvalForm {
        name: name.into(),
        dataset_id,
        prompt_template: template.into(),
        max_tokens: 128,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: grader.into(),
        options,
    };
    let choice =
        upload_dataset(store, "qa-choice", "qa-choice.jsonl", CHOICE_DATASET, lead).await?;
    define_eval(
        store,
        &form(
            CHOICE_EVAL_NAME,
            choice.dataset_id,
            CHOICE_TEMPLATE,
            "multiple_choice@1",
            choice_options(),
        ),
        lead,
    )
    .await?;
    // The same questions scored as lm-eval scores MMLU on a base checkpoint: the likelihood
    // of each choice after the question, no answer generated.
    define_eval(
        store,
        &form(
            LIKELIHOOD_EVAL_NAME,
            choice.dataset_id,
            "Question: {{ question }}\nAnswer:",
            "",
            EvalOptions {
                api: arbiter_domain::prompt::Api::Completions,
                mapping: Some(FieldMapping {
                    input: "question".into(),
                    target: Some("answer".into()),
                    choices: Some("choices".into()),
                    category: Some("subject".into()),
                    ..FieldMapping::default()
                }),
                likelihood: Some(arbiter_domain::likelihood::LikelihoodSpec::default()),
                ..EvalOptions::default()
            },
        ),
        lead,
    )
    .await?;
    let instructions = upload_dataset(
        store,
        "instructions-basic",
        "instructions-basic.jsonl",
        INSTRUCTIONS_DATASET,
        lead,
    )
    .await?;
    define_eval(
        store,
        &EvalForm {
            max_tokens: 256,
            ..form(
                INSTRUCTIONS_EVAL_NAME,
                instructions.dataset_id,
                "{{ prompt }}",
                r#"{"kind": "instructions"}"#,
                EvalOptions {
                    mapping: Some(FieldMapping {
                        input: "prompt".into(),
                        // Shown beside each answer as a reference; the instructions decide.
                        target: Some("response".into()),
                        category: Some("category".into()),
                        ..FieldMapping::default()
                    }),
                    ..EvalOptions::default()
                },
            )
        },
        lead,
    )
    .await?;
    let prose = upload_dataset(store, "prose", "prose.jsonl", PROSE_DATASET, lead).await?;
    define_eval(
        store,
        &form(
            PROSE_EVAL_NAME,
            prose.dataset_id,
            "{{ text }}",
            "",
            EvalOptions {
                api: arbiter_domain::prompt::Api::Completions,
                mapping: Some(FieldMapping {
                    input: "text".into(),
                    target: None,
                    category: Some("category".into()),
                    ..FieldMapping::default()
                }),
                rolling: Some(arbiter_domain::rolling::RollingSpec {
                    max_length: 32,
                    ..arbiter_domain::rolling::RollingSpec::default()
                }),
                ..EvalOptions::default()
            },
        ),
        lead,
    )
    .await?;
    let shots = upload_dataset(
        store,
        "qa-arith-shots",
        "qa-arith-shots.jsonl",
        SHOTS_DATASET,
        lead,
    )
    .await?;
    define_eval(
        store,
        &form(
            SHOTS_EVAL_NAME,
            shots.dataset_id,
            "Question: {{ question }}\nAnswer:",
            "",
            EvalOptions {
                mapping: Some(FieldMapping {
                    input: "question".into(),
                    target: Some("answer".into()),
                    metadata: vec!["solution".into()],
                    ..FieldMapping::default()
                }),
                few_shot: Some(FewShotSpec {
                    dataset_id: shots.dataset_id,
                    count: 3,
                    seed: 1,
                    style: FewShotStyle::Text,
                    delimiter: "\n\n".into(),
                    target_delimiter: " ".into(),
                    in_order: false,
                }),
                ..EvalOptions::default()
            },
        ),
        lead,
    )
    .await?;
    Ok(())
}

/// Adds the real model to a seeded demo: as a checkpoint answering the demo eval, and as the
/// first judge of a second eval (with the simulated strong judge behind it) run on a simulated
/// checkpoint. Returns the runs launched.
pub async fn seed_real_model(
    store: &dyn Store,
    seeded: &DemoSeed,
    base_url: &str,
    model: &str,
) -> anyhow::Result<Vec<RunId>> {
    let researcher = store
        .find_user_credentials("researcher")
        .await?
        .map(|credentials| credentials.user.id);
    let checkpoint_id = arbiter_engine::catalog::register_checkpoint(
        store,
        &CheckpointForm {
            name: REAL_CHECKPOINT_NAME.into(),
            endpoint_url: base_url.into(),
            model: model.into(),
            // Runs on this machine's CPU: nothing to pay per token.
            input_usd_per_mtok: "0".into(),
            output_usd_per_mtok: "0".into(),
            ..CheckpointForm::default()
        },
        researcher,
    )
    .await?;
    let judge_id = grading::define_judge(
        store,
        &JudgeForm {
            name: "smollm2-judge".into(),
            checkpoint_id,
            rubric: REAL_JUDGE_RUBRIC.into(),
            max_tokens: 4,
            scale_rubric: String::new(),
            scale_dimension: String::new(),
            scale_pass_at_least: String::new(),
            pairwise: false,
            batch_items: 1,
        },
        researcher,
    )
    .await?
    .id;
    let judged_eval_id = arbiter_engine::catalog::define_eval(
        store,
        &EvalForm {
            name: REAL_JUDGE_EVAL_NAME.into(),
            dataset_id: seeded.dataset_id,
            prompt_template: DEMO_PROMPT.into(),
            max_tokens: 128,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: String::new(),
            options: arbiter_engine::catalog::EvalOptions::default(),
        },
        researcher,
    )
    .await?;
    grading::save_policy(
        store,
        judged_eval_id,
        &demo_policy(judge_id, seeded.strong_judge_id),
        researcher,
    )
    .await?;
    let mut run_ids = Vec::new();
    for (eval_id, checkpoint_id) in [
        (seeded.eval_id, checkpoint_id),
        (judged_eval_id, seeded.answering_checkpoint_id),
    ] {
        let launched = arbiter_engine::runs::launch_run(
            store,
            eval_id,
            checkpoint_id,
            Priority::Scheduled,
            "default",
            researcher,
        )
        .await?;
        run_ids.push(launched.run_id);
    }
    Ok(run_ids)
}
