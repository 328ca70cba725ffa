//! Real suites as researchers bring them: items with any fields in JSONL, gzip, CSV and
//! Parquet; evals that map those fields and render Jinja templates with a system prompt and
//! lettered choices; base checkpoints over `/v1/completions` with stop sequences and engine
//! sampling parameters; and the preview that shows the exact request before launching. The
//! requests are checked on the wire, at a recording endpoint.

use arbiter_domain::fields::FieldMapping;
use arbiter_domain::manifest::SamplingOptions;
use arbiter_domain::prompt::{Api, TemplateSyntax};
use arbiter_domain::stats::sampling::SampleMetric;
use arbiter_engine::catalog::{self, EvalForm, EvalOptions};
use arbiter_engine::error::ServiceError;
use arbiter_store::Store;
use arbiter_testkit::fixtures::*;
use arbiter_testkit::pipeline::{checkpoint, launch, test_worker, work_until_complete};
use arbiter_testkit::recorder::Recorder;
use arbiter_testkit::stories;
use serde_json::{json, Value};
use std::sync::Arc;

stories!(
    structured_datasets_are_one_revision_in_every_format,
    mapped_jinja_evals_send_what_the_preview_shows,
    base_checkpoints_get_completions_with_stop_sequences_and_sampling_options,
    few_shot_exemplars_are_frozen_into_the_manifest,
    reports_give_pass_at_k_over_repetitions,
    files_stream_into_one_revision_and_refused_ones_store_nothing
);

/// Three MMLU-style items, as published: a question, four choices, the answer's index.
fn mmlu_jsonl() -> Vec<u8> {
    [
        json!({"id": "q1", "question": "Capital of France?", "choices": ["Berlin", "Paris", "Rome", "Madrid"], "answer": 1, "subject": "geography"}),
        json!({"id": "q2", "question": "2 + 2 = ?", "choices": ["3", "4", "5", "22"], "answer": 1, "subject": "math"}),
        json!({"id": "q3", "question": "Largest planet?", "choices": ["Jupiter", "Mars", "Venus", "Earth"], "answer": 0, "subject": "astronomy"}),
    ]
    .iter()
    .map(|item| item.to_string() + "\n")
    .collect::<String>()
    .into_bytes()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// A Parquet file with a string `id`, a string `question` and an int64 `answer` column.
fn parquet_file(rows: &[(&str, &str, i64)]) -> Vec<u8> {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    let schema = Arc::new(
        parquet::schema::parser::parse_message_type(
            "message items { required binary id (UTF8); required binary question (UTF8); required int64 answer; }",
        )
        .unwrap(),
    );
    let mut out = Vec::new();
    let mut writer =
        SerializedFileWriter::new(&mut out, schema, Arc::new(WriterProperties::default())).unwrap();
    let mut group = writer.next_row_group().unwrap();
    let mut index = 0;
    while let Some(mut column) = group.next_column().unwrap() {
        let ids: Vec<ByteArray> = rows.iter().map(|row| ByteArray::from(row.0)).collect();
        let questions: Vec<ByteArray> = rows.iter().map(|row| ByteArray::from(row.1)).collect();
        match index {
            0 => column
                .typed::<ByteArrayType>()
                .write_batch(&ids, None, None),
            1 => column
                .typed::<ByteArrayType>()
                .write_batch(&questions, None, None),
            _ => column.typed::<Int64Type>().write_batch(
                &rows.iter().map(|row| row.2).collect::<Vec<_>>(),
                None,
                None,
            ),
        }
        .unwrap();
        column.close().unwrap();
        index += 1;
    }
    group.close().unwrap();
    writer.close().unwrap();
    out
}

async fn structured_datasets_are_one_revision_in_every_format(store: Arc<dyn Store>) {
    let store = store.as_ref();
    let rows = [("a", "Capital of France?", 1), ("b", "2 + 2 = ?", 4)];
    let jsonl: String = rows
        .iter()
        .map(|(id, question, answer)| {
            json!({"id": id, "question": question, "answer": answer}).to_string() + "\n"
        })
        .collect();
    let from_jsonl = catalog::upload_dataset(store, "flat", "flat.jsonl", jsonl.as_bytes(), None)
        .await
        .unwrap();
    for (file_name, bytes) in [
        ("flat.jsonl.gz", gzip(jsonl.as_bytes())),
        ("flat.parquet", parquet_file(&rows)),
    ] {
        let again = catalog::upload_dataset(store, "flat", file_name, &bytes, None)
            .await
            .unwrap();
        assert_eq!(again.id, from_jsonl.id, "{file_name} is the same revision");
        assert_eq!(again.content_hash, from_jsonl.content_hash);
    }
    // CSV holds text only: the same items with text answers are one revision with JSONL.
    let as_text: String = rows
        .iter()
        .map(|(id, question, answer)| {
            json!({"id": id, "question": question, "answer": answer.to_string()}).to_string() + "\n"
        })
        .collect();
    let text_revision =
        catalog::upload_dataset(store, "text", "text.jsonl", as_text.as_bytes(), None)
            .await
            .unwrap();
    let csv = catalog::upload_dataset(
        store,
        "text",
        "text.csv",
        b"id,question,answer\na,Capital of France?,1\nb,2 + 2 = ?,4\n",
        None,
    )
    .await
    .unwrap();
    assert_eq!(csv.id, text_revision.id);
    let csv_gz = catalog::upload_dataset(
        store,
        "text",
        "text.csv.gz",
        &gzip(b"id,question,answer\na,Capital of France?,1\nb,2 + 2 = ?,4\n"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(csv_gz.id, text_revision.id, "gzip-compressed CSV is CSV");
    assert_ne!(text_revision.content_hash, from_jsonl.content_hash);

    // Every field comes back as it was uploaded.
    let mmlu = catalog::upload_dataset(store, "mmlu", "mmlu.jsonl", &mmlu_jsonl(), None)
        .await
        .unwrap();
    let items = store.list_items(mmlu.id, 10, 0).await.unwrap();
    assert_eq!(items.len(), 3);
    let fields = items[0].fields();
    assert_eq!(
        fields["choices"],
        json!(["Berlin", "Paris", "Rome", "Madrid"])
    );
    assert_eq!(fields["answer"], json!(1));
    assert_eq!(
        store
            .dataset_item(mmlu.id, "q3")
            .await
            .unwrap()
            .unwrap()
            .fields()["subject"],
        "astronomy"
    );

    // Refused files name the line or row, and store nothing.
    let datasets_before = store.list_datasets().await.unwrap().len();
    let refusals: [(&str, Vec<u8>, &str); 4] = [
        (
            "broken.jsonl",
            b"{\"id\":\"a\",\"q\":\"x\"}\n{\"id\":\"b\",\"q\":\n".to_vec(),
            "line 2: invalid JSON",
        ),
        (
            "twice.parquet",
            parquet_file(&[("a", "x", 1), ("a", "y", 2)]),
            "row 2: duplicate case id `a` (first seen on row 1)",
        ),
        (
            "junk.parquet",
            b"PAR1 not really".to_vec(),
            "the file: is not a readable Parquet file",
        ),
        (
            "junk.jsonl.gz",
            b"not gzip".to_vec(),
            "the file: is not valid gzip",
        ),
    ];
    for (file_name, bytes, message) in refusals {
        match catalog::upload_dataset(store, "refused", file_name, &bytes, None).await {
            Err(ServiceError::Invalid(refused)) => {
                assert!(refused.starts_with(message), "{file_name}: {refused}")
            }
            other => panic!("{file_name} must be refused, got {other:?}"),
        }
    }
    assert_eq!(store.list_datasets().await.unwrap().len(), datasets_before);
}

/// The MMLU items' mapping: question, lettered choices, the answer's index, the subject.
fn mmlu_mapping() -> FieldMapping {
    FieldMapping {
        input: "question".into(),
        target: Some("answer".into()),
        choices: Some("choices".into()),
        category: Some("subject".into()),
        metadata: vec!["subject".into()],
        shuffle_choices: None,
        images: None,
    }
}

fn mmlu_form(name: &str, dataset_id: arbiter_domain::ids::DatasetId, system: &str) -> EvalForm {
    EvalForm {
        prompt_template: "{{ question }}\n{{ choices | lettered }}\nAnswer with the letter.".into(),
        grader: "multiple_choice@1".into(),
        options: EvalOptions {
            system_prompt: system.into(),
            mapping: Some(mmlu_mapping()),
            ..EvalOptions::default()
        },
        ..eval_form(name, dataset_id, 1)
    }
}

/// The recorder answers every question with B.
fn always_b(_: &Value) -> String {
    "Answer: B".into()
}

async fn mapped_jinja_evals_send_what_the_preview_shows(store: Arc<dyn Store>) {
    let recorder = Recorder::start("rec-model", always_b).await;
    let revision =
        catalog::upload_dataset(store.as_ref(), "mmlu", "mmlu.jsonl", &mmlu_jsonl(), None)
            .await
            .unwrap();

    // A field some item lacks is refused when the eval is saved, naming the item and field;
    // so is an answer index out of range. Nothing is stored.
    let missing = EvalForm {
        prompt_template: "{{ question }} ({{ explanation }})".into(),
        ..mmlu_form("missing", revision.dataset_id, "")
    };
    match catalog::define_eval(store.as_ref(), &missing, None).await {
        Err(ServiceError::Invalid(message)) => assert_eq!(
            message,
            "item `q1` the prompt template uses `explanation`, which the item does not have"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let wrong_choices = EvalForm {
        options: EvalOptions {
            mapping: Some(FieldMapping {
                choices: Some("subject".into()),
                ..mmlu_mapping()
            }),
            ..EvalOptions::default()
        },
        ..mmlu_form("wrong-choices", revision.dataset_id, "")
    };
    match catalog::define_eval(store.as_ref(), &wrong_choices, None).await {
        Err(ServiceError::Invalid(message)) => assert_eq!(
            message,
            "item `q1` field `subject` must be a list of answer options"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(store.list_evals().await.unwrap().is_empty());

    let eval = catalog::define_eval(
        store.as_ref(),
        &mmlu_form(
            "mmlu",
            revision.dataset_id,
            "You answer {{ subject }} questions.",
        ),
        None,
    )
    .await
    .unwrap();
    let stored = store.get_eval(eval).await.unwrap().unwrap();
    assert_eq!(stored.prompt.syntax, TemplateSyntax::Jinja, "detected");
    assert_eq!(stored.prompt.mapping, mmlu_mapping());
    let checkpoint = checkpoint(store.as_ref(), "rec", &recorder.base_url, "rec-model", "").await;

    // The preview, before any launch: the exact body, its key, the mapped answer. Previews
    // reuse a recent probe of the endpoint: clicking again asks the endpoint nothing.
    let probes_before = recorder.probes();
    for case in ["q1", "q2"] {
        arbiter_engine::preview::preview_request(
            store.as_ref(),
            eval,
            Some(case),
            Some(checkpoint),
            0,
        )
        .await
        .unwrap();
    }
    assert_eq!(
        recorder.probes() - probes_before,
        1,
        "one probe for two previews"
    );
    let preview = arbiter_engine::preview::preview_request(
        store.as_ref(),
        eval,
        Some("q3"),
        Some(checkpoint),
        0,
    )
    .await
    .unwrap();
    assert_eq!(preview.route, "chat/completions");
    assert_eq!(preview.targets, vec!["A"]);
    assert_eq!(preview.category, "astronomy");
    assert_eq!(
        preview.body["messages"],
        json!([
            {"role": "system", "content": "You answer astronomy questions."},
            {"role": "user", "content": "Largest planet?\nA. Jupiter\nB. Mars\nC. Venus\nD. Earth\nAnswer with the letter."}
        ])
    );
    assert_eq!(preview.body["model"], "rec-model");
    let missing_item =
        arbiter_engine::preview::preview_request(store.as_ref(), eval, Some("q9"), None, 0).await;
    assert!(
        matches!(missing_item, Err(ServiceError::NotFound(_))),
        "{missing_item:?}"
    );

    let run = launch(store.as_ref(), eval, checkpoint).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w")).await;
    assert_eq!(progress[0].passed, 2, "q1 and q2 are B; q3 is A");
    assert_eq!(progress[0].failed, 1);
    let requests = recorder.requests();
    assert_eq!(requests.len(), 3);
    // What the preview showed is what the worker sent, byte for byte.
    let sent_q3 = requests
        .iter()
        .find(|request| {
            request.body["messages"][1]["content"]
                .as_str()
                .unwrap()
                .starts_with("Largest")
        })
        .unwrap();
    assert_eq!(sent_q3.route, "chat/completions");
    assert_eq!(sent_q3.body, preview.body);
    let key = preview.generation_key.clone().unwrap();
    assert_eq!(
        store.cached_generations(&[key]).await.unwrap().len(),
        1,
        "the previewed key is the key the answer was cached under"
    );
    let results = store.run_results(run, 10).await.unwrap();
    let q3 = results
        .iter()
        .find(|result| result.case_id == "q3")
        .unwrap();
    assert_eq!(q3.category, "astronomy", "categories follow the mapping");
    assert_eq!(q3.verdict, "fail");

    // The same requests under another eval come from the cache; another system prompt is a
    // different request, sent again.
    let same = catalog::define_eval(
        store.as_ref(),
        &mmlu_form(
            "mmlu-again",
            revision.dataset_id,
            "You answer {{ subject }} questions.",
        ),
        None,
    )
    .await
    .unwrap();
    let other = catalog::define_eval(
        store.as_ref(),
        &mmlu_form("mmlu-terse", revision.dataset_id, "Be terse."),
        None,
    )
    .await
    .unwrap();
    let runs = [
        launch(store.as_ref(), same, checkpoint).await,
        launch(store.as_ref(), other, checkpoint).await,
    ];
    let progress = work_until_complete(store.clone(), &runs, test_worker("w")).await;
    assert_eq!(progress[0].from_cache, 3);
    assert_eq!(progress[1].from_cache, 0);
    assert_eq!(recorder.requests().len(), 6);

    // Shuffled choices: the target letter follows the right choice to its new place.
    let shuffled = catalog::define_eval(
        store.as_ref(),
        &EvalForm {
            options: EvalOptions {
                mapping: Some(FieldMapping {
                    shuffle_choices: Some(11),
                    ..mmlu_mapping()
                }),
                ..EvalOptions::default()
            },
            ..mmlu_form("mmlu-shuffled", revision.dataset_id, "")
        },
        None,
    )
    .await
    .unwrap();
    for (case_id, right) in [("q1", "Paris"), ("q2", "4"), ("q3", "Jupiter")] {
        let preview = arbiter_engine::preview::preview_request(
            store.as_ref(),
            shuffled,
            Some(case_id),
            None,
            0,
        )
        .await
        .unwrap();
        let prompt = preview.body["messages"][0]["content"].as_str().unwrap();
        let letter = &preview.targets[0];
        assert!(
            prompt.contains(&format!("\n{letter}. {right}\n")),
            "{case_id}: target {letter} in {prompt}"
        );
    }
}

async fn base_checkpoints_get_completions_with_stop_sequences_and_sampling_options(
    store: Arc<dyn Store>,
) {
    let recorder = Recorder::start("base-model", |body| {
        // A base model continues the text; the answer is on the first line.
        if body["prompt"]
            .as_str()
            .unwrap_or_default()
            .contains("6 times 7")
        {
            " 42".into()
        } else {
            " I do not know".into()
        }
    })
    .await;
    let revision = catalog::upload_dataset(
        store.as_ref(),
        "qa",
        "qa.jsonl",
        THREE_CASES.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("top_k".to_string(), json!(20));
    extra.insert("repetition_penalty".to_string(), json!(1.1));
    let form = EvalForm {
        prompt_template: "Question: {{ input }}\nAnswer:".into(),
        grader: r#"{"kind": "normalised_match"}"#.into(),
        options: EvalOptions {
            api: Api::Completions,
            sampling: SamplingOptions {
                stop: vec!["\n".into(), "Question:".into()],
                top_p: Some(0.9),
                extra: extra.clone(),
            },
            ..EvalOptions::default()
        },
        ..eval_form("base", revision.dataset_id, 1)
    };
    // Sampling parameters out of the engines' ranges, and chat-only parts, are refused.
    for (options, naming) in [
        (
            EvalOptions {
                sampling: SamplingOptions {
                    extra: [("top_k".to_string(), json!("many"))].into(),
                    ..form.options.sampling.clone()
                },
                ..form.options.clone()
            },
            "`top_k` is \"many\"",
        ),
        (
            EvalOptions {
                sampling: SamplingOptions {
                    extra: [("temprature".to_string(), json!(0.5))].into(),
                    ..form.options.sampling.clone()
                },
                ..form.options.clone()
            },
            "`temprature` is not a sampling parameter",
        ),
        (
            EvalOptions {
                system_prompt: "Be brief.".into(),
                ..form.options.clone()
            },
            "need the chat API",
        ),
    ] {
        let refused = catalog::define_eval(
            store.as_ref(),
            &EvalForm {
                options,
                ..form.clone()
            },
            None,
        )
        .await;
        match refused {
            Err(ServiceError::Invalid(message)) => assert!(message.contains(naming), "{message}"),
            other => panic!("expected a refusal naming {naming}, got {other:?}"),
        }
    }
    let eval = catalog::define_eval(store.as_ref(), &form, None)
        .await
        .unwrap();
    let stored = store.get_eval(eval).await.unwrap().unwrap();
    assert_eq!(stored.sampling.extra, extra);
    assert_eq!(stored.sampling.top_p, Some(0.9));
    let checkpoint = checkpoint(store.as_ref(), "base", &recorder.base_url, "base-model", "").await;
    let run = launch(store.as_ref(), eval, checkpoint).await;
    let progress = work_until_complete(store.clone(), &[run], test_worker("w")).await;
    assert_eq!(progress[0].done, 3);
    let requests = recorder.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(request.route, "completions");
        assert!(request.body.get("messages").is_none());
        assert_eq!(request.body["stop"], json!(["\n", "Question:"]));
        assert_eq!(request.body["top_p"], json!(0.9));
        assert_eq!(request.body["top_k"], json!(20));
        assert_eq!(request.body["repetition_penalty"], json!(1.1));
        assert_eq!(request.body["logprobs"], json!(5));
    }
    assert!(requests
        .iter()
        .any(|request| request.body["prompt"] == "Question: What is 6 times 7?\nAnswer:"));
    // The completion's text is graded: " 42" matches 42 once normalised.
    let results = store.run_results(run, 10).await.unwrap();
    let q1 = results
        .iter()
        .find(|result| result.case_id == "q1")
        .unwrap();
    assert_eq!(q1.output, " 42");
    assert_eq!(q1.verdict, "pass", "{}", q1.grade_reason);
}

async fn few_shot_exemplars_are_frozen_into_the_manifest(store: Arc<dyn Store>) {
    let recorder = Recorder::start("rec-model", always_b).await;
    let train = |count: usize| -> Vec<u8> {
        (0..count)
            .map(|index| {
                json!({"id": format!("train-{index}"), "input": format!("How many numbers in {index} {index}?"), "target": "2"})
                    .to_string()
                    + "\n"
            })
            .collect::<String>()
            .into_bytes()
    };
    let shots = catalog::upload_dataset(store.as_ref(), "train", "train.jsonl", &train(20), None)
        .await
        .unwrap();
    let test = catalog::upload_dataset(
        store.as_ref(),
        "test",
        "test.jsonl",
        THREE_CASES.as_bytes(),
        None,
    )
    .await
    .unwrap();
    let few_shot = |count: u32, seed: u64| arbiter_domain::prompt::few_shot::FewShotSpec {
        dataset_id: shots.dataset_id,
        count,
        seed,
        style: arbiter_domain::prompt::few_shot::FewShotStyle::Text,
        delimiter: "\n\n".into(),
        target_delimiter: " ".into(),
        in_order: false,
    };
    let form = |name: &str, spec| EvalForm {
        prompt_template: "Q: {{ input }}\nA:".into(),
        options: EvalOptions {
            few_shot: Some(spec),
            ..EvalOptions::default()
        },
        ..eval_form(name, test.dataset_id, 1)
    };
    // More shots than the dataset has is refused, naming both numbers; nothing is stored.
    match catalog::define_eval(store.as_ref(), &form("too-many", few_shot(30, 1)), None).await {
        Err(ServiceError::Invalid(message)) => assert_eq!(
            message,
            "the few-shot dataset `train` has 20 items; 30 shots were asked for"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(store.list_evals().await.unwrap().is_empty());

    let eval = catalog::define_eval(store.as_ref(), &form("three-shot", few_shot(3, 1)), None)
        .await
        .unwrap();
    let checkpoint = checkpoint(store.as_ref(), "rec", &recorder.base_url, "rec-model", "").await;
    let run = launch(store.as_ref(), eval, checkpoint).await;
    work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let manifest = store.run_manifest(run).await.unwrap().unwrap();
    let exemplars = manifest.exemplars.clone().expect("the shots are frozen");
    assert_eq!(exemplars.items.len(), 4, "three shots and a spare");
    assert_eq!(exemplars.dataset_revision, shots.content_hash);
    let requests = recorder.requests();
    assert_eq!(requests.len(), 3);
    let prompt = requests[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    for shot in &exemplars.items[..3] {
        assert!(
            prompt.contains(&format!("Q: {}\nA: 2\n\n", shot.input)),
            "{prompt}"
        );
    }
    assert!(
        !prompt.contains(&exemplars.items[3].input),
        "the spare is not shown"
    );

    // An unchanged launch finds its run; new shots (a new revision of the exemplar dataset
    // whose draw differs) are a new manifest and a new run.
    assert_eq!(launch(store.as_ref(), eval, checkpoint).await, run);
    catalog::upload_dataset(store.as_ref(), "train", "train.jsonl", &train(400), None)
        .await
        .unwrap();
    let rerun = launch(store.as_ref(), eval, checkpoint).await;
    assert_ne!(rerun, run);
    let new_manifest = store.run_manifest(rerun).await.unwrap().unwrap();
    assert_ne!(new_manifest.exemplars, manifest.exemplars);
    assert_ne!(new_manifest.content_hash(), manifest.content_hash());
}

/// Right on even seeds only: each item, sampled at seeds 7, 8, 9 and 10, is right twice.
fn right_on_even_seeds(body: &Value) -> String {
    if body["seed"].as_u64().unwrap_or(1).is_multiple_of(2) {
        "Answer: yes".into()
    } else {
        "Answer: no".into()
    }
}

async fn reports_give_pass_at_k_over_repetitions(store: Arc<dyn Store>) {
    let recorder = Recorder::start("rec-model", right_on_even_seeds).await;
    let items: String = (0..5)
        .map(|index| json!({"id": format!("c{index}"), "input": format!("Is {index} a number?"), "target": "yes"}).to_string() + "\n")
        .collect();
    let revision =
        catalog::upload_dataset(store.as_ref(), "yes", "yes.jsonl", items.as_bytes(), None)
            .await
            .unwrap();
    let eval = catalog::define_eval(
        store.as_ref(),
        &eval_form("sampled", revision.dataset_id, 4),
        None,
    )
    .await
    .unwrap();
    let checkpoint = checkpoint(store.as_ref(), "rec", &recorder.base_url, "rec-model", "").await;
    let run = launch(store.as_ref(), eval, checkpoint).await;
    work_until_complete(store.clone(), &[run], test_worker("w")).await;
    let (_, report) = arbiter_engine::reports::runs::run_report(store.as_ref(), run)
        .await
        .unwrap();
    let row = |metric: SampleMetric, k: u64| {
        report
            .sample_metrics
            .iter()
            .find(|row| row.metric == metric && row.k == k)
            .unwrap_or_else(|| panic!("{metric:?}@{k} in {:?}", report.sample_metrics))
            .clone()
    };
    // n = 4, c = 2 for every item: pass@1 = 1/2, pass@2 = 1 − C(2,2)/C(4,2) = 5/6,
    // pass@3 = 1, pass^2 = C(2,2)/C(4,2) = 1/6, pass^3 = 0.
    for (metric, k, expected) in [
        (SampleMetric::PassAtK, 1, 0.5),
        (SampleMetric::PassAtK, 2, 5.0 / 6.0),
        (SampleMetric::PassAtK, 3, 1.0),
        (SampleMetric::PassAllK, 2, 1.0 / 6.0),
        (SampleMetric::PassAllK, 3, 0.0),
    ] {
        let found = row(metric, k);
        assert!(
            (found.value - expected).abs() < 1e-9,
            "{metric:?}@{k}: {}",
            found.value
        );
        assert_eq!((found.items, found.samples, found.short_items), (5, 20, 0));
    }
    // maj@k votes over the extracted answers in repetition order: no, yes, no, yes. An even
    // k ties (no reached the top count first, and is wrong); an odd k votes no.
    for (k, ties) in [(1, 0), (2, 5), (3, 0), (4, 5)] {
        let found = row(SampleMetric::MajAtK, k);
        assert_eq!(found.value, 0.0, "maj@{k}");
        assert_eq!(found.ties, Some(ties), "maj@{k}");
        assert_eq!((found.items, found.samples), (5, 5 * k));
    }
    assert_eq!(
        report.sample_metrics.len(),
        12,
        "k = 1 to 4 for pass@k, pass^k and maj@k"
    );

    // Against a checkpoint that is always right, the comparison tests the metrics over
    // samples at k = 4 (the samples both runs have), on the cases both runs share.
    let always = Recorder::start("always-model", |_: &Value| "Answer: yes".to_string()).await;
    let better = arbiter_testkit::pipeline::checkpoint(
        store.as_ref(),
        "always",
        &always.base_url,
        "always-model",
        "",
    )
    .await;
    let better_run = launch(store.as_ref(), eval, better).await;
    work_until_complete(store.clone(), &[better_run], test_worker("w")).await;
    let comparison = arbiter_engine::reports::compare::compare_checkpoints(
        store.as_ref(),
        run,
        &[better_run],
        Default::default(),
    )
    .await
    .unwrap();
    let tests = &comparison.candidates[0].comparison.sample_metrics;
    let summary: Vec<(String, f64, f64, u64)> = tests
        .iter()
        .map(|test| (test.label(), test.baseline, test.candidate, test.items))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("pass@4".to_string(), 1.0, 1.0, 5),
            ("pass^4".to_string(), 0.0, 1.0, 5),
            ("maj@4".to_string(), 0.0, 1.0, 5),
        ]
    );
    assert!(tests.iter().all(|test| test.adjusted_p >= test.p_value));
    // The trend shows them per checkpoint.
    let trend = arbiter_engine::reports::trends::trend(
        store.as_ref(),
        eval,
        "",
        arbiter_domain::reports::trend::BaselinePolicy::First,
    )
    .await
    .unwrap();
    assert_eq!(trend.points.len(), 2);
    assert_eq!(trend.points[1].sample_metrics.len(), 12);
    let compared = trend.points[1].comparison.as_ref().unwrap();
    assert_eq!(compared.sample_metrics.len(), 3);
}

/// `count` structured items, one JSON object per line; `duplicate_at` repeats the first id on
/// that (1-based) line.
fn many_items(count: usize, duplicate_at: Option<usize>) -> String {
    (1..=count)
        .map(|line| {
            let id = match duplicate_at {
                Some(at) if at == line => "item-1".to_string(),
                _ => format!("item-{line}"),
            };
            json!({"id": id, "question": format!("What is {line} + 1?"), "answer": line + 1, "tags": ["sum", line % 7]})
                .to_string()
                + "\n"
        })
        .collect()
}

async fn files_stream_into_one_revision_and_refused_ones_store_nothing(store: Arc<dyn Store>) {
    use arbiter_domain::dataset::UploadLimits;
    let store = store.as_ref();
    let directory = tempfile::tempdir().unwrap();
    let limits = UploadLimits {
        max_bytes: 64 * 1024 * 1024,
        max_items: 100_000,
    };
    // 12,000 items: staged in several chunks, made one revision at the end.
    let text = many_items(12_000, None);
    let path = directory.path().join("many.jsonl");
    std::fs::write(&path, &text).unwrap();
    let streamed = catalog::upload_dataset_file(store, "many", "many.jsonl", &path, None, limits)
        .await
        .unwrap();
    assert_eq!(streamed.item_count, 12_000);
    // The same content in memory, and gzip-compressed from disk, is the same revision.
    let in_memory = catalog::upload_dataset(store, "many", "many.jsonl", text.as_bytes(), None)
        .await
        .unwrap();
    assert_eq!(in_memory.id, streamed.id);
    let gz_path = directory.path().join("many.jsonl.gz");
    std::fs::write(&gz_path, gzip(text.as_bytes())).unwrap();
    let from_gzip =
        catalog::upload_dataset_file(store, "many", "many.jsonl.gz", &gz_path, None, limits)
            .await
            .unwrap();
    assert_eq!(from_gzip.id, streamed.id);
    let items = store.list_items(streamed.id, 3, 11_998).await.unwrap();
    let ids: Vec<&str> = items.iter().map(|item| item.case_id.as_str()).collect();
    assert_eq!(ids, vec!["item-11999", "item-12000"], "file order kept");

    // A duplicate id after two chunks were staged: refused by line, nothing stored.
    let duplicate = directory.path().join("duplicate.jsonl");
    std::fs::write(&duplicate, many_items(11_000, Some(10_999))).unwrap();
    match catalog::upload_dataset_file(store, "many", "dup.jsonl", &duplicate, None, limits).await {
        Err(ServiceError::Invalid(message)) => assert_eq!(
            message,
            "line 10999: duplicate case id `item-1` (first seen on line 1)"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Over the operator's limits: refused before (or while) reading, by size or count.
    let small = UploadLimits {
        max_bytes: 1024 * 1024,
        max_items: 100_000,
    };
    match catalog::upload_dataset_file(store, "many", "many.jsonl", &path, None, small).await {
        Err(ServiceError::Invalid(message)) => {
            assert!(
                message.ends_with(
                    "the items so far hold more than 1.0 MiB (the limit for one upload)"
                ),
                "{message}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let few = UploadLimits {
        max_bytes: 64 * 1024 * 1024,
        max_items: 10_000,
    };
    match catalog::upload_dataset_file(store, "many", "many.jsonl.gz", &gz_path, None, few).await {
        Err(ServiceError::Invalid(message)) => assert_eq!(
            message,
            "line 10001: the file has more than 10000 items (the limit for one upload)"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let dataset = store
        .get_dataset(streamed.dataset_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dataset.revision_count, 1, "refused files made no revision");
    assert_eq!(dataset.latest_revision.unwrap().id, streamed.id);
    // Their stages were cleared: a new dataset from the same stage numbering starts clean.
    let again = catalog::upload_dataset_file(store, "again", "many.jsonl", &path, None, limits)
        .await
        .unwrap();
    assert_eq!(again.content_hash, streamed.content_hash);
    assert_eq!(again.item_count, 12_000);
}
