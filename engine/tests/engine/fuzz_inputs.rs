//! Property tests over what users type or upload: arbitrary bytes, JSONL lines built from
//! arbitrary JSON values, CSV with hostile quoting, arbitrary grader specs, frozen manifests,
//! checkpoint announcements, and prompt templates and field mappings over arbitrary items.
//! None may panic; an accepted dataset always satisfies the importer's promises; a refusal
//! says why; and a refused upload, announcement or eval stores nothing.

use arbiter_domain::dataset::{parse_dataset, DatasetError, DatasetFormat};
use arbiter_domain::grading::GraderSpec;
use arbiter_domain::manifest::parse_stored_grader;
use arbiter_store::{Database, Store};
use proptest::prelude::*;
use std::collections::HashSet;

/// The importer's promises about an accepted dataset.
fn check_accepted(items: &[arbiter_domain::dataset::DatasetItem]) {
    assert!(!items.is_empty(), "an accepted dataset has items");
    let ids: HashSet<&str> = items.iter().map(|item| item.case_id.as_str()).collect();
    assert_eq!(ids.len(), items.len(), "case ids are unique");
    assert!(items.iter().all(|item| !item.case_id.is_empty()));
}

/// A refusal explains itself in words (never an empty message).
fn check_refused(error: &DatasetError) {
    assert!(!error.to_string().trim().is_empty());
}

fn parse_both(bytes: &[u8]) {
    for format in [DatasetFormat::Jsonl, DatasetFormat::Csv] {
        match parse_dataset(bytes, format) {
            Ok(parsed) => check_accepted(&parsed.items),
            Err(error) => check_refused(&error),
        }
    }
}

/// Small JSON values, nested a little: what a JSONL field might hold.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..3)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A JSONL line: some of the importer's field names (and spellings), with arbitrary values.
fn jsonl_line() -> impl Strategy<Value = String> {
    let keys = prop::sample::select(vec![
        "id", "case_id", "input", "target", "answer", "category", "extra",
    ]);
    prop::collection::btree_map(keys, json_value(), 0..5).prop_map(|fields| {
        serde_json::Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key.to_string(), value))
                .collect(),
        )
        .to_string()
    })
}

/// A CSV cell that likes to break parsers: quotes, commas, newlines, unicode.
fn csv_cell() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ]{0,8}",
        Just("\"".to_string()),
        Just("\"\"".to_string()),
        Just("a,b".to_string()),
        Just("\"x\ny\"".to_string()),
        Just("é🙂".to_string()),
        ".{0,6}",
    ]
}

/// Grader specs as JSON: known kinds with arbitrary settings, nested under all_of / any_of.
fn grader_json() -> impl Strategy<Value = serde_json::Value> {
    let kinds = prop::sample::select(vec![
        "exact_match",
        "normalised_match",
        "regex_match",
        "numeric",
        "multiple_choice",
        "contains",
        "not_contains",
        "json_valid",
        "json_schema",
        "length",
        "harness_match",
        "unknown_kind",
    ]);
    let settings = prop::collection::btree_map(
        prop::sample::select(vec![
            "pattern",
            "occurrence",
            "absolute_tolerance",
            "relative_tolerance",
            "strings",
            "case_sensitive",
            "require",
            "schema",
            "min_chars",
            "max_words",
            "filter",
            "folding",
        ]),
        prop_oneof![
            json_value(),
            "\\(?[a-z(|)*+?\\\\.\\[\\]{}0-9]{0,10}".prop_map(serde_json::Value::from),
            "\\(?[a-z(|)*+?\\\\.\\[\\]{}0-9]{0,10}"
                .prop_map(|pattern| serde_json::json!({"pattern": pattern, "group_select": -1})),
            Just(
                serde_json::json!({"ignore_case": true, "regexes_to_ignore": [",", "(?s).*#### "]})
            ),
        ],
        0..3,
    );
    let leaf = (kinds, settings).prop_map(|(kind, settings)| {
        let mut object: serde_json::Map<String, serde_json::Value> = settings
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect();
        object.insert("kind".into(), kind.into());
        serde_json::Value::Object(object)
    });
    leaf.prop_recursive(3, 12, 3, |inner| {
        (
            prop::sample::select(vec!["all_of", "any_of"]),
            prop::collection::vec(inner, 0..3),
        )
            .prop_map(|(kind, graders)| serde_json::json!({ "kind": kind, "graders": graders }))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_bytes_are_parsed_or_refused_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        parse_both(&bytes);
    }

    #[test]
    fn arbitrary_text_is_parsed_or_refused(text in "(.|\n){0,400}") {
        parse_both(text.as_bytes());
    }

    #[test]
    fn jsonl_of_arbitrary_json_values(lines in prop::collection::vec(jsonl_line(), 1..12)) {
        let text = lines.join("\n");
        if let Ok(parsed) = parse_dataset(text.as_bytes(), DatasetFormat::Jsonl) {
            check_accepted(&parsed.items);
            // Every non-blank line is one item: none is dropped silently.
            prop_assert_eq!(parsed.items.len(), lines.len());
        }
    }

    #[test]
    fn csv_with_hostile_quoting(rows in prop::collection::vec(prop::collection::vec(csv_cell(), 1..5), 1..8)) {
        let mut text = String::from("id,input,target\n");
        for row in &rows {
            text.push_str(&row.join(","));
            text.push('\n');
        }
        match parse_dataset(text.as_bytes(), DatasetFormat::Csv) {
            Ok(parsed) => check_accepted(&parsed.items),
            Err(error) => check_refused(&error),
        }
    }

    #[test]
    fn arbitrary_grader_specs_compile_or_explain_and_grade_without_panicking(
        spec in grader_json(),
        output in ".{0,40}",
        target in ".{0,10}",
    ) {
        let text = spec.to_string();
        if let Ok(parsed) = parse_stored_grader(&text) {
            match parsed.compile() {
                Ok(grader) => {
                    let grade = grader.grade(&output, &target);
                    prop_assert_eq!(grade.grader.as_str(), parsed.id_version());
                }
                Err(problem) => prop_assert!(!problem.to_string().is_empty()),
            }
            // A spec that parsed survives a round trip through its stored form.
            let stored = serde_json::to_string(&parsed).unwrap();
            prop_assert_eq!(serde_json::from_str::<GraderSpec>(&stored).unwrap(), parsed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Stored manifests and announcements are read back or refused, never a panic.
    #[test]
    fn arbitrary_json_is_a_manifest_or_an_announcement_or_refused(value in json_value()) {
        let text = value.to_string();
        let _ = serde_json::from_str::<arbiter_domain::manifest::Manifest>(&text);
        if let Ok(announcement) = serde_json::from_str::<arbiter_engine::suites::Announcement>(&text) {
            let _ = announcement.form();
        }
    }
}

fn announcement_field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("http://127.0.0.1:9/v1".to_string()),
        Just("https://models.example.com/v1/".to_string()),
        Just("ftp://nope".to_string()),
        Just("step-1".to_string()),
        ".{0,30}",
        "[a-z0-9 ]{150,260}",
    ]
}

/// Arbitrary announcements register a checkpoint or are refused with a message, and a
/// refused one stores nothing (no checkpoint, no endpoint reachable through one, no run).
#[test]
fn arbitrary_announcements_register_or_explain_and_refusals_store_nothing() {
    use arbiter_engine::suites::{register_announced, Announcement};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("announce.db").display());
    let database = runtime.block_on(Database::open(&url)).unwrap();
    let store = database.store();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    let strategy = (
        announcement_field(),
        announcement_field(),
        announcement_field(),
        prop::option::of(announcement_field()),
        prop::option::of(any::<i64>()),
        prop::option::of(prop_oneof![
            Just("promotion".to_string()),
            Just("bogus".to_string()),
            ".{0,8}"
        ]),
        prop::option::of(prop_oneof![
            Just("env:ARBITER_ENDPOINT_KEY_OK".to_string()),
            Just("env:1bad".to_string()),
            ".{0,12}"
        ]),
    );
    runner
        .run(
            &strategy,
            |(name, endpoint_url, model, training_run, training_step, decision, api_key)| {
                let announcement = Announcement {
                    name,
                    endpoint_url,
                    model,
                    training_run,
                    training_step,
                    decision,
                    api_key: api_key.map(Into::into),
                    ..Announcement::default()
                };
                let before = runtime.block_on(store.list_checkpoints()).unwrap().len();
                match runtime.block_on(register_announced(store.as_ref(), &announcement, None)) {
                    Ok(registered) => {
                        let listed = runtime.block_on(store.list_checkpoints()).unwrap();
                        prop_assert_eq!(listed.len(), before + 1);
                        prop_assert!(listed.iter().any(|c| c.id == registered.checkpoint_id));
                        // No key is ever stored in clear: only references or sealed text.
                        for checkpoint in &listed {
                            if let Some(stored) = &checkpoint.api_key_ref {
                                prop_assert!(
                                    stored.starts_with("env:") || stored.starts_with("sealed:v1:")
                                );
                            }
                        }
                    }
                    Err(refused) => {
                        prop_assert!(
                            matches!(refused.status_code(), 400 | 404 | 409),
                            "{}",
                            refused
                        );
                        prop_assert!(!refused.to_string().is_empty());
                        prop_assert_eq!(
                            runtime.block_on(store.list_checkpoints()).unwrap().len(),
                            before
                        );
                    }
                }
                prop_assert!(runtime.block_on(store.list_runs()).unwrap().is_empty());
                Ok(())
            },
        )
        .unwrap();
}

/// A refused upload stores nothing: no dataset, no revision, no items.
#[tokio::test]
async fn a_refused_upload_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("fuzz.db").display());
    let database = Database::open(&url).await.unwrap();
    let store = database.store();
    let store: &dyn Store = store.as_ref();
    let refused: [&[u8]; 4] = [
        b"",
        b"{\"id\": \"a\", \"input\": \"x\", \"target\": \"1\"}\n{\"id\": \"a\", \"input\": \"y\", \"target\": \"2\"}\n",
        b"{\"id\": \"a\", \"input\": \"x\"\n",
        b"\x00\x01binary",
    ];
    for bytes in refused {
        assert!(
            arbiter_engine::catalog::upload_dataset(store, "fuzzed", "f.jsonl", bytes, None)
                .await
                .is_err()
        );
    }
    assert!(store.list_datasets().await.unwrap().is_empty());
}

/// Template text: literal text and Jinja pieces over a few field names, some valid, some not.
fn template_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-z :\n]{0,8}",
        prop::sample::select(vec![
            "{{ question }}",
            "{{ choices | lettered }}",
            "{{ letter(0) }}",
            "{{ question.strip() }}",
            "{{ missing }}",
            "{% for c in choices %}{{ c }}{% endfor %}",
            "{% if answer is defined %}{{ answer }}{% endif %}",
            "{{ meta.source }}",
            "{{",
            "{% for %}",
            "{% endfor %}",
            "{{ 1 / 0 }}",
            "{{ range(100000) | join }}",
            "{input}",
        ])
        .prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

/// A mapping over some of the item's likely fields, or others.
fn mapping() -> impl Strategy<Value = arbiter_domain::fields::FieldMapping> {
    let field = prop::sample::select(vec![
        "question",
        "choices",
        "answer",
        "meta.source",
        "picture",
        "turns",
        "nope",
    ]);
    (
        field.clone(),
        prop::option::of(field.clone()),
        prop::option::of(field.clone()),
        prop::option::of(field.clone()),
        prop::option::of(any::<u64>()),
        prop::option::of(field),
    )
        .prop_map(|(input, target, choices, category, shuffle, images)| {
            arbiter_domain::fields::FieldMapping {
                input: input.into(),
                target: target.map(Into::into),
                choices: choices.map(Into::into),
                category: category.map(Into::into),
                metadata: Vec::new(),
                shuffle_choices: shuffle,
                images: images.map(Into::into),
            }
        })
}

/// An item with some of those fields holding arbitrary JSON (and sometimes the right shapes).
fn item_fields() -> impl Strategy<Value = serde_json::Map<String, serde_json::Value>> {
    let value = prop_oneof![
        json_value(),
        Just(serde_json::json!(["Paris", "Berlin"])),
        Just(serde_json::json!(["first turn", "second turn"])),
        Just(serde_json::json!([{"role": "user", "content": "hi"}])),
        Just(serde_json::json!(1)),
        Just(serde_json::json!("data:image/png;base64,iVBORw0KGgo=")),
        Just(serde_json::json!({"source": "atlas"})),
    ];
    prop::collection::btree_map(
        prop::sample::select(vec![
            "question", "choices", "answer", "meta", "picture", "turns", "other",
        ]),
        value,
        0..6,
    )
    .prop_map(|map| {
        map.into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Arbitrary templates over arbitrary items render or explain, never panic, and what
    /// renders stays within the prompt-size limit.
    #[test]
    fn arbitrary_templates_and_items_render_or_explain(
        template in template_text(),
        system in prop::option::of(template_text()),
        mapping in mapping(),
        fields in item_fields(),
        completions in any::<bool>(),
    ) {
        use arbiter_domain::prompt::{Api, PromptRenderer, PromptSpec};
        let spec = PromptSpec {
            system_prompt: system.unwrap_or_default(),
            mapping,
            api: if completions { Api::Completions } else { Api::Chat },
            ..PromptSpec::jinja(template)
        };
        if spec.validate().is_err() {
            return Ok(());
        }
        let Ok(renderer) = PromptRenderer::new(&spec) else {
            return Ok(());
        };
        let item = arbiter_domain::dataset::DatasetItem::structured("c1", fields);
        match renderer.check_turns(&item) {
            Ok(turns) => prop_assert!(turns >= 1),
            Err(problem) => prop_assert!(!problem.trim().is_empty()),
        }
        if let Ok(rendered) = renderer.render(&item) {
            prop_assert!(rendered.body.text_len() <= arbiter_domain::prompt::MAX_PROMPT_BYTES);
        }
    }
}

/// An eval whose template or mapping its dataset's items refuse is not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_refused_template_or_mapping_stores_no_eval() {
    use arbiter_engine::catalog::{define_eval, upload_dataset, EvalForm, EvalOptions};
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("evals.db").display()
    );
    let database = Database::open(&url).await.unwrap();
    let store = database.store();
    let store: &dyn Store = store.as_ref();
    let items = b"{\"id\": \"1\", \"question\": \"Q?\", \"answer\": \"A\"}\n";
    let revision = upload_dataset(store, "d", "d.jsonl", items, None)
        .await
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(64));
    let handle = tokio::runtime::Handle::current();
    let outcomes = tokio::task::block_in_place(|| {
        let (refused, case) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        runner
            .run(&(template_text(), mapping()), |(template, mapping)| {
                case.set(case.get() + 1);
                let form = EvalForm {
                    name: format!("fuzzed {}", case.get()),
                    dataset_id: revision.dataset_id,
                    prompt_template: template,
                    max_tokens: 8,
                    temperature: 0.0,
                    repetitions: 1,
                    seed: 0,
                    grader: String::new(),
                    options: EvalOptions {
                        mapping: Some(mapping),
                        ..EvalOptions::default()
                    },
                };
                let before = handle.block_on(store.list_evals()).unwrap().len();
                match handle.block_on(define_eval(store, &form, None)) {
                    Ok(id) => {
                        let evals = handle.block_on(store.list_evals()).unwrap();
                        prop_assert_eq!(evals.len(), before + 1);
                        prop_assert!(evals.iter().any(|eval| eval.id == id));
                    }
                    Err(problem) => {
                        refused.set(refused.get() + 1);
                        prop_assert!(!problem.to_string().is_empty());
                        prop_assert_eq!(handle.block_on(store.list_evals()).unwrap().len(), before);
                    }
                }
                Ok(())
            })
            .map(|()| refused.get())
            .map_err(|failure| failure.to_string())
    });
    assert!(outcomes.unwrap() > 0, "some cases were refused");
}
