//! Importing a peer's task: an lm-evaluation-harness task file with local data becomes datasets
//! and evals that send the prompts the harness renders and score the way it scores; a task
//! that cannot be expressed stores nothing.

use arbiter_domain::prompt::Api;
use arbiter_engine::error::ServiceError;
use arbiter_engine::import::{import_lm_eval_task, ImportOptions};
use arbiter_store::Store;
use arbiter_testkit::pipeline::{
    checkpoint, launch, test_worker, verdicts_by_case, work_until_complete,
};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;

stories!(
    an_lm_eval_task_imports_as_the_harness_renders_and_scores_it,
    ifeval_imports_and_is_graded_by_its_instructions,
    a_task_that_cannot_be_imported_stores_nothing,
    inspect_samples_import_as_one_dataset_and_eval
);

/// The task as the harness would read it: shots from the first two training documents, a
/// strict and a flexible filter, GSM8K's folding.
const TASK: &str = r#####"
task: sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: sums-test.jsonl
    train: sums-train.jsonl
output_type: generate_until
test_split: test
fewshot_split: train
num_fewshot: 2
fewshot_config:
  sampler: first_n
doc_to_text: "Question: {{question.strip()}}\nAnswer:"
doc_to_target: "{{answer}}"
generation_kwargs:
  until: ["\n\n", "Question:"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 24
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "#### (\\-?[0-9\\.\\,]+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{2,})|(-?[0-9]+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    regexes_to_ignore: [",", "\\$", "(?s).*#### ", "\\.$"]
metadata:
  version: 1.0
"#####;

fn write_task(directory: &Path, task: &str) -> std::path::PathBuf {
    let line = |id: &str, question: &str, answer: &str| {
        json!({"id": id, "question": question, "answer": answer}).to_string() + "\n"
    };
    std::fs::write(
        directory.join("sums-train.jsonl"),
        [
            line("t1", "What is 1 + 1? ", "1 + 1 = 2\n#### 2"),
            line("t2", "What is 2 + 5?", "2 + 5 = 7\n#### 7"),
            line("t3", "What is 9 + 9?", "9 + 9 = 18\n#### 18"),
        ]
        .concat(),
    )
    .unwrap();
    std::fs::write(
        directory.join("sums-test.jsonl"),
        [
            line("s1", "What is 3 + 4?", "3 + 4 = 7\n#### 7"),
            line("s2", "What is 10 + 20?", "10 + 20 = 30\n#### 30"),
            line("s3", "What is 6 + 6?", "6 + 6 = 12\n#### 12"),
        ]
        .concat(),
    )
    .unwrap();
    let path = directory.join("sums.yaml");
    std::fs::write(&path, task).unwrap();
    path
}

/// Answers as a model might: the worked form for 3 + 4, a bare number for 10 + 20, a wrong
/// worked answer for 6 + 6.
fn answer(body: &Value) -> String {
    let prompt = body["prompt"].as_str().unwrap_or_default();
    let question = prompt.rsplit("Question: ").next().unwrap_or_default();
    if question.starts_with("What is 3 + 4?") {
        " 3 + 4 = 7\n#### 7".into()
    } else if question.starts_with("What is 10 + 20?") {
        " The sum is 30.".into()
    } else {
        " 6 + 6 = 13\n#### 13".into()
    }
}

async fn an_lm_eval_task_imports_as_the_harness_renders_and_scores_it(store: Arc<dyn Store>) {
    let directory = tempfile::tempdir().unwrap();
    let path = write_task(directory.path(), TASK);
    let options = ImportOptions {
        api: Api::Completions,
        name: String::new(),
        max_length: None,
    };
    let imported = import_lm_eval_task(store.as_ref(), &path, &options, None)
        .await
        .unwrap();
    let dataset_names: Vec<&str> = imported.datasets.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(dataset_names, ["sums", "sums (train split)"]);
    let eval_names: Vec<&str> = imported.evals.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(
        eval_names,
        ["sums (strict-match)", "sums (flexible-extract)"]
    );
    assert!(imported.notes.is_empty(), "{:?}", imported.notes);

    let recorder = Recorder::start("base-model", answer).await;
    let base = checkpoint(store.as_ref(), "base", &recorder.base_url, "base-model", "").await;
    let strict = launch(store.as_ref(), imported.evals[0].0, base).await;
    work_until_complete(store.clone(), &[strict], test_worker("w")).await;
    let flexible = launch(store.as_ref(), imported.evals[1].0, base).await;
    work_until_complete(store.clone(), &[flexible], test_worker("w")).await;

    // The harness's layout: the first two training documents as shots (question, target
    // delimiter, full answer), the shot delimiter, then the question; its stop sequences.
    let requests = recorder.requests();
    let first = requests
        .iter()
        .find(|request| {
            request.body["prompt"]
                .as_str()
                .unwrap()
                .ends_with("What is 3 + 4?\nAnswer:")
        })
        .expect("the first document was asked");
    assert_eq!(
        first.body["prompt"],
        "Question: What is 1 + 1?\nAnswer: 1 + 1 = 2\n#### 2\n\nQuestion: What is 2 + 5?\nAnswer: 2 + 5 = 7\n#### 7\n\nQuestion: What is 3 + 4?\nAnswer:"
    );
    assert_eq!(first.body["stop"], json!(["\n\n", "Question:"]));
    assert_eq!(first.body["max_tokens"], 24);
    assert_eq!(first.body["temperature"], 0.0);
    assert_eq!(first.body["seed"], 1234);
    assert_eq!(
        requests.len(),
        3,
        "the second pipeline's eval sends identical requests, answered from the cache"
    );

    // Strict: only the worked 3 + 4 has `#### n`. Flexible: the last number, so 30 passes.
    for (run, expected) in [
        (strict, [true, false, false]),
        (flexible, [true, true, false]),
    ] {
        let verdicts = verdicts_by_case(store.as_ref(), run).await;
        let passed: Vec<bool> = verdicts
            .iter()
            .map(|(_, verdict)| verdict == "pass")
            .collect();
        assert_eq!(passed, expected, "run {run}: {verdicts:?}");
    }
}

/// lm-eval's `ifeval.yaml` as it ships, with the data made local: its Python scoring and
/// aggregations are tags the importer reads as Arbiter's instructions grader.
const IFEVAL_TASK: &str = r#####"
task: ifeval
dataset_path: json
dataset_kwargs:
  data_files:
    train: input_data.jsonl
dataset_name: null
output_type: generate_until
test_split: train
num_fewshot: 0
doc_to_text: prompt
doc_to_target: 0
generation_kwargs:
  until: []
  do_sample: false
  temperature: 0.0
  max_gen_toks: 1280
process_results: !function utils.process_results
metric_list:
  - metric: prompt_level_strict_acc
    aggregation: mean
    higher_is_better: true
  - metric: inst_level_strict_acc
    aggregation: !function utils.agg_inst_level_acc
    higher_is_better: true
  - metric: prompt_level_loose_acc
    aggregation: mean
    higher_is_better: true
  - metric: inst_level_loose_acc
    aggregation: !function utils.agg_inst_level_acc
    higher_is_better: true
metadata:
  version: 4.0
"#####;

async fn ifeval_imports_and_is_graded_by_its_instructions(store: Arc<dyn Store>) {
    let directory = tempfile::tempdir().unwrap();
    // IFEval's own fields (key, prompt, instruction_id_list, kwargs), from the demo suite.
    let suite = include_str!("../../../public/samples/instructions-basic.jsonl");
    let lines: String = suite
        .lines()
        .enumerate()
        .map(|(key, line)| {
            let item: Value = serde_json::from_str(line).unwrap();
            let ifeval = json!({
                "key": key + 1000,
                "prompt": item["prompt"],
                "instruction_id_list": item["instruction_id_list"],
                "kwargs": item["kwargs"],
            });
            format!("{ifeval}\n")
        })
        .collect();
    // Two of IFEval's own oddities, which must not stop its import: a "letter" that is a sign
    // (counted as written), and Swahili, which the language detector cannot read.
    let oddities = [
        json!({"key": 1122, "prompt": "Use the # sign at least four times.", "instruction_id_list": ["keywords:letter_frequency"], "kwargs": [{"letter": "#", "let_frequency": 4, "let_relation": "at least"}]}),
        json!({"key": 2299, "prompt": "Jibu kwa Kiswahili.", "instruction_id_list": ["language:response_language"], "kwargs": [{"language": "sw"}]}),
    ];
    let lines = format!("{lines}{}\n{}\n", oddities[0], oddities[1]);
    std::fs::write(directory.path().join("input_data.jsonl"), &lines).unwrap();
    let path = directory.path().join("ifeval.yaml");
    std::fs::write(&path, IFEVAL_TASK).unwrap();
    let options = ImportOptions {
        api: Api::Chat,
        name: String::new(),
        max_length: None,
    };

    // An item its grader cannot check is refused before anything is stored.
    let broken = directory.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    let bad_item = json!({"key": 1, "prompt": "Write.", "instruction_id_list": ["length_constraints:nth_paragraph_first_word"], "kwargs": [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "so"}]});
    std::fs::write(broken.join("input_data.jsonl"), format!("{bad_item}\n")).unwrap();
    std::fs::write(broken.join("ifeval.yaml"), IFEVAL_TASK).unwrap();
    match import_lm_eval_task(store.as_ref(), &broken.join("ifeval.yaml"), &options, None).await {
        Err(ServiceError::Invalid(message)) => {
            assert!(message.contains("document `1`"), "{message}");
            assert!(message.contains("nth_paragraph"), "{message}");
        }
        other => panic!("expected the import to be refused, got {other:?}"),
    }
    assert!(
        store.list_datasets().await.unwrap().is_empty(),
        "nothing stored"
    );

    let imported = import_lm_eval_task(store.as_ref(), &path, &options, None)
        .await
        .unwrap();
    assert_eq!(imported.evals.len(), 1);
    assert!(
        imported
            .notes
            .iter()
            .any(|n| n.contains("instructions grader")),
        "{:?}",
        imported.notes
    );

    let endpoint = arbiter_testkit::pipeline::start_sim(arbiter_sim::SimConfig::demo()).await;
    let model = checkpoint(store.as_ref(), "a", &endpoint, "sim-ckpt-a", "").await;
    let run = launch(store.as_ref(), imported.evals[0].0, model).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w")).await;
    assert_eq!(progress[0].done, 16);
    assert_eq!((progress[0].errors, progress[0].uncertain), (0, 0));
    let checked = store.run_instruction_results(run).await.unwrap();
    assert_eq!(checked.len(), 16);
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), run)
        .await
        .unwrap();
    let accuracies = report
        .instructions
        .expect("IFEval's four accuracies")
        .accuracies;
    let names: Vec<&str> = accuracies.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "prompt_level_strict_acc",
            "inst_level_strict_acc",
            "prompt_level_loose_acc",
            "inst_level_loose_acc"
        ]
    );
}

async fn a_task_that_cannot_be_imported_stores_nothing(store: Arc<dyn Store>) {
    let directory = tempfile::tempdir().unwrap();
    let options = ImportOptions {
        api: Api::Completions,
        name: String::new(),
        max_length: None,
    };
    for (task, expected) in [
        (
            TASK.replace(
                "doc_to_text: \"Question",
                "doc_to_text: !function utils.doc_to_text\nx: \"Question",
            ),
            "`doc_to_text` is `!function",
        ),
        (
            TASK.replace("{{question.strip()}}", "{{ problem }}"),
            "`problem`",
        ),
        (
            TASK.replace("dataset_path: json", "dataset_path: gsm8k"),
            "remote dataset",
        ),
        (
            TASK.replace("num_fewshot: 2", "num_fewshot: 5"),
            "num_fewshot asks for 5",
        ),
        (
            TASK.replace("name: flexible-extract", "name: strict-match"),
            "two evals named `sums (strict-match)`",
        ),
    ] {
        let path = write_task(directory.path(), &task);
        let refused = import_lm_eval_task(store.as_ref(), &path, &options, None)
            .await
            .unwrap_err();
        let ServiceError::Invalid(message) = refused else {
            panic!("{refused:?}");
        };
        assert!(message.contains(expected), "{message}");
    }
    assert!(
        store.list_datasets().await.unwrap().is_empty(),
        "no dataset stored"
    );
    assert!(
        store.list_evals().await.unwrap().is_empty(),
        "no eval stored"
    );
    // An import never adds a revision to an existing dataset.
    arbiter_engine::catalog::upload_dataset(
        store.as_ref(),
        "sums",
        "sums.jsonl",
        b"{\"id\": \"x\", \"input\": \"q\", \"target\": \"a\"}\n",
        None,
    )
    .await
    .unwrap();
    let path = write_task(directory.path(), TASK);
    let refused = import_lm_eval_task(store.as_ref(), &path, &options, None)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("a dataset named `sums` exists already"),
        "{refused}"
    );
    let sums = store.list_datasets().await.unwrap();
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0].revision_count, 1, "no revision added");
}

async fn inspect_samples_import_as_one_dataset_and_eval(store: Arc<dyn Store>) {
    let directory = tempfile::tempdir().unwrap();
    let samples = directory.path().join("capitals.jsonl");
    let lines = [
        json!({"id": "fr", "input": "Capital of France?", "choices": ["Berlin", "Paris", "Rome"], "target": "B", "metadata": {"region": "europe"}}),
        json!({"id": "jp", "input": "Capital of Japan?", "choices": ["Tokyo", "Kyoto", "Osaka"], "target": "A", "metadata": {"region": "asia"}}),
    ];
    let text: String = lines.iter().map(|line| line.to_string() + "\n").collect();
    std::fs::write(&samples, text).unwrap();
    let options = ImportOptions {
        api: Api::Chat,
        name: String::new(),
        max_length: None,
    };
    let imported = arbiter_engine::import::import_inspect_samples(
        store.as_ref(),
        &samples,
        &options,
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(imported.evals[0].1, "capitals");
    let recorder = Recorder::start("chat-model", |body: &Value| {
        let prompt = body["messages"][0]["content"].as_str().unwrap_or_default();
        if prompt.contains("France") {
            "ANSWER: B"
        } else {
            "ANSWER: C"
        }
        .to_string()
    })
    .await;
    let chat = checkpoint(store.as_ref(), "chat", &recorder.base_url, "chat-model", "").await;
    let run = launch(store.as_ref(), imported.evals[0].0, chat).await;
    work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let prompt = recorder.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("one of A, B, C."), "{prompt}");
    assert!(prompt.contains("A. "), "lettered choices: {prompt}");
    let verdicts = verdicts_by_case(store.as_ref(), run).await;
    assert_eq!(
        verdicts,
        [
            ("fr".to_string(), "pass".to_string()),
            ("jp".to_string(), "fail".to_string())
        ]
    );

    // A sample that needs a sandbox is refused by name, and nothing more is stored.
    let refused = directory.path().join("tools.jsonl");
    std::fs::write(
        &refused,
        json!({"input": "ls", "target": "x", "sandbox": "docker"}).to_string() + "\n",
    )
    .unwrap();
    let error = arbiter_engine::import::import_inspect_samples(
        store.as_ref(),
        &refused,
        &options,
        None,
        None,
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("`sandbox`"), "{error}");
    assert_eq!(store.list_datasets().await.unwrap().len(), 1);
}
