//! Story tests for rubrics, on both backends: versions and guidelines, a triage policy that
//! names a rubric and a launch that freezes its version, raters' answers checked against it,
//! an item decided by the consensus on each dimension (the verdict from its dimension), and
//! agreement per dimension from labels given through the queue, against published values; a
//! reviewer's correction dimension by dimension decides the item and its rater reads it.

use arbiter_domain::accounts::Role;
use arbiter_domain::annotation::gold::GOLD_RATE_SETTING;
use arbiter_domain::ids::UserId;
use arbiter_engine::error::ServiceError;
use arbiter_engine::grading::PolicyForm;
use arbiter_engine::rubrics;
use arbiter_store::{Store, StoreError};
use std::sync::Arc;

use arbiter_engine::annotation::agreement::queue_agreement;
use arbiter_engine::annotation::queue::{
    agreement_subject, low_agreement_message, MIN_ITEMS_FOR_AGREEMENT_ALERT,
};
use arbiter_testkit::fixtures::*;
use arbiter_testkit::stories;

stories!(
    rubric_answers_are_checked_and_decided_per_dimension,
    reviewers_correct_rubric_labels_dimension_by_dimension,
    published_agreement_values_come_out_of_labels_per_dimension,
    published_kappas_come_out_of_two_raters_labels,
);

const HELPFULNESS: &str = r#"{
  "dimensions": [
    {"key": "correct", "question": "Is the final answer correct?", "kind": "binary"},
    {"key": "helpful", "question": "How helpful is it?", "kind": "ordinal", "scale": [
      {"label": "Poor", "description": "Misses the question"},
      {"label": "Fair", "description": "Partly answers it"},
      {"label": "Good", "description": "Answers it"},
      {"label": "Great", "description": "Answers it clearly"}]},
    {"key": "tone", "question": "Tone?", "kind": "categorical", "options": ["formal", "casual"]},
    {"key": "note", "question": "Anything else?", "kind": "free_text", "max_chars": 200, "required": false}
  ],
  "verdict": {"dimension": "helpful", "pass_at_least": 3}
}"#;

fn invalid<T: std::fmt::Debug>(result: Result<T, ServiceError>) -> String {
    match result {
        Err(ServiceError::Invalid(message)) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn policy(rubric: &str) -> PolicyForm {
    PolicyForm {
        accept_threshold: "0.9".into(),
        escalate_threshold: "0.7".into(),
        audit_rate: "0".into(),
        judge_samples: "1".into(),
        human_usd_per_label: "0.5".into(),
        human_overlap: "3".into(),
        review_rate: "0".into(),
        rubric: rubric.into(),
        ..PolicyForm::default()
    }
}

async fn rubric_answers_are_checked_and_decided_per_dimension(store: Arc<dyn Store>) {
    let store = &*store;
    let lead = new_user(store, "lead", Role::Lead).await;

    // Rubrics are checked before they are stored, and versioned by name.
    let refused = invalid(rubrics::create_rubric(store, "helpfulness", "{", "", None).await);
    assert!(refused.contains("not valid"), "{refused}");
    let refused = invalid(rubrics::create_rubric(store, "bad<name>", HELPFULNESS, "", None).await);
    assert!(refused.contains("rubric name"), "{refused}");
    let no_verdict = HELPFULNESS.replace(
        r#""verdict": {"dimension": "helpful", "pass_at_least": 3}"#,
        r#""verdict": {"dimension": "helpful"}"#,
    );
    let refused = invalid(rubrics::create_rubric(store, "h", &no_verdict, "", None).await);
    assert!(refused.contains("pass_at_least"), "{refused}");
    let first = rubrics::create_rubric(store, "helpfulness", HELPFULNESS, "first", Some(lead))
        .await
        .unwrap();
    assert_eq!((first.version, first.note.as_str()), (1, "first"));
    assert_eq!(first.created_by.as_deref(), Some("lead"));
    assert_eq!(first.content_hash, first.rubric.content_hash());
    let draft = rubrics::create_rubric(
        store,
        "draft",
        r#"{"dimensions": [{"key": "ok", "question": "OK?", "kind": "binary"}]}"#,
        "",
        None,
    )
    .await
    .unwrap();

    // Guidelines belong to a rubric that exists, and are versioned apart from it.
    assert!(matches!(
        rubrics::add_guidelines(store, "nope", "# Hi", "", None).await,
        Err(ServiceError::NotFound(_))
    ));
    assert!(
        invalid(rubrics::add_guidelines(store, "helpfulness", "  ", "", None).await)
            .contains("empty")
    );
    rubrics::add_guidelines(store, "helpfulness", "# Rate helpfulness", "", Some(lead))
        .await
        .unwrap();
    let guidelines = rubrics::add_guidelines(
        store,
        "helpfulness",
        "# Rate helpfulness\n\n| point | means |\n|---|---|\n| 3 | answers it |",
        "a table of examples",
        Some(lead),
    )
    .await
    .unwrap();
    assert_eq!(guidelines.version, 2);

    // A policy names an existing rubric that says which answer passes.
    let refused = invalid(
        arbiter_engine::grading::save_policy(
            store,
            arbiter_domain::ids::EvalId(1),
            &policy("nope"),
            None,
        )
        .await,
    );
    assert!(refused.contains("does not exist"), "{refused}");
    let refused = invalid(
        arbiter_engine::grading::save_policy(
            store,
            arbiter_domain::ids::EvalId(1),
            &policy(&draft.name),
            None,
        )
        .await,
    );
    assert!(refused.contains("says no verdict"), "{refused}");

    // The launch freezes the newest version; a later version does not reach this run.
    let run_id = launch_with_policy(
        store,
        THREE_CASES.as_bytes(),
        1,
        Some(&policy("helpfulness")),
    )
    .await;
    let later = rubrics::create_rubric(store, "helpfulness", HELPFULNESS, "later", None)
        .await
        .unwrap();
    assert_eq!(later.version, 2);
    let manifest = store.run_manifest(run_id).await.unwrap().unwrap();
    let frozen = manifest.triage.unwrap().rubric.unwrap();
    assert_eq!((frozen.id, frozen.version), (first.id, 1));
    assert_eq!(frozen.content_hash, first.content_hash);

    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_as_routed(store, run_id, &ids).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let raters = [
        new_user(store, "ann", Role::Annotator).await,
        new_user(store, "ben", Role::Annotator).await,
        new_user(store, "cat", Role::Annotator).await,
    ];

    // Each rater is asked the frozen version, with the newest guidelines.
    let mut tasks = Vec::new();
    for rater in raters {
        let task = store
            .next_annotation_task(rater, LONG_LEASE_MS)
            .await
            .unwrap()
            .unwrap();
        let asked = task.rubric.as_ref().expect("the item asks the rubric");
        assert_eq!(asked.version.id, first.id);
        assert_eq!(asked.guidelines.as_ref().map(|g| g.version), Some(2));
        tasks.push(task);
    }
    assert!(tasks.iter().all(|task| task.task_id == tasks[0].task_id));

    // A pass/fail label does not answer a rubric; answers are checked against it.
    let (ann, ann_task) = (raters[0], &tasks[0]);
    assert!(matches!(
        store.submit_label(&ann_task.handle, ann, true, "").await,
        Err(StoreError::Conflict(_))
    ));
    let submit = |rater: UserId, index: usize, answers: &'static str| {
        let handle = tasks[index].handle.clone();
        async move { rubrics::submit_answers(store, &handle, rater, answers, "", Some(2)).await }
    };
    let refused = invalid(submit(ann, 0, r#"{"correct": true, "tone": ["formal"]}"#).await);
    assert!(refused.contains("`helpful` needs an answer"), "{refused}");
    let refused = invalid(
        submit(
            ann,
            0,
            r#"{"correct": true, "helpful": 5, "tone": ["formal"]}"#,
        )
        .await,
    );
    assert!(refused.contains("from 1 to 4"), "{refused}");
    let refused = invalid(
        submit(
            ann,
            0,
            r#"{"correct": true, "helpful": 2, "tone": ["rude"]}"#,
        )
        .await,
    );
    assert!(refused.contains("no option `rude`"), "{refused}");
    let refused = invalid(submit(ann, 0, "[1]").await);
    assert!(refused.contains("JSON object"), "{refused}");
    let refused = invalid(
        rubrics::submit_answers(
            store,
            &tasks[0].handle,
            ann,
            r#"{"correct": true, "helpful": 4, "tone": ["formal"]}"#,
            "",
            Some(9),
        )
        .await,
    );
    assert!(refused.contains("no guidelines version 9"), "{refused}");
    // Nobody answers for another rater's claim.
    assert!(submit(
        raters[1],
        0,
        r#"{"correct": true, "helpful": 4, "tone": ["formal"]}"#
    )
    .await
    .is_err());

    // Three raters of equal standing: helpful 4 and 3 pass (at least 3) and 2 fails, so the
    // item passes, though on `correct` two of them said fail; the consensus on each dimension
    // (helpful's median is 3) is reported with it.
    // Ann first says helpful 2, and changes it to 4 below while the item waits.
    submit(
        ann,
        0,
        r#"{"correct": false, "helpful": 2, "tone": ["formal"]}"#,
    )
    .await
    .unwrap();
    submit(
        raters[1],
        1,
        r#"{"correct": true, "helpful": 2, "tone": ["casual"]}"#,
    )
    .await
    .unwrap();
    assert_eq!(
        progress(store, run_id).await.passed,
        0,
        "two of three labels decide nothing"
    );
    // A rubric label shows its rubric and answers to its rater, who changes them (checked
    // like any answers) while the item waits; pass or fail does not change it.
    let own = store.own_labels(ann, 10).await.unwrap().remove(0);
    assert!(own
        .answers
        .contains(&("How helpful is it?".to_string(), "2 (Fair)".to_string())));
    assert_eq!(own.editable, Ok(()));
    assert_eq!(own.rubric.as_ref().unwrap().rubric.dimensions.len(), 4);
    let edit = |verdict: &'static str, answers: &'static str| {
        rubrics::edit_own_label(store, own.label_id, ann, verdict, answers, "")
    };
    assert!(invalid(edit("pass", "").await).contains("change its answers"));
    assert!(
        invalid(edit("", r#"{"correct": false, "tone": ["formal"]}"#).await)
            .contains("`helpful` needs an answer")
    );
    assert!(matches!(
        store.edit_label(own.label_id, ann, true, "").await,
        Err(StoreError::Conflict(_))
    ));
    edit(
        "",
        r#"{"correct": false, "helpful": 4, "tone": ["formal"]}"#,
    )
    .await
    .unwrap();
    let own = store.own_labels(ann, 10).await.unwrap().remove(0);
    assert!(own
        .answers
        .contains(&("How helpful is it?".to_string(), "4 (Great)".to_string())));
    assert!(own.edited_at.is_some());
    // Another rater cannot change Ann's label.
    assert!(matches!(
        rubrics::edit_own_label(
            store,
            own.label_id,
            raters[1],
            "",
            r#"{"correct": true, "helpful": 1, "tone": ["formal"]}"#,
            ""
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));
    submit(
        raters[2],
        2,
        r#"{"correct": false, "helpful": 3, "tone": ["formal"], "note": ["fine"]}"#,
    )
    .await
    .unwrap();
    let counts = progress(store, run_id).await;
    assert_eq!((counts.passed, counts.failed), (1, 0));
    let results = store.run_results(run_id, 10).await.unwrap();
    let decided = results
        .iter()
        .find(|result| result.verdict == "pass")
        .unwrap();
    assert!(
        decided
            .grade_reason
            .contains("correct: fail; helpful: 3 (Good); tone: formal"),
        "{}",
        decided.grade_reason
    );
    assert_eq!(decided.decided_by.as_deref(), Some("human"));

    // The run's dimensions: the decided item's consensus on each, free text left open.
    let dimensions = rubrics::run_dimensions(store, run_id).await.unwrap();
    let helpful = dimensions.iter().find(|d| d.key == "helpful").unwrap();
    assert_eq!(helpful.distribution[2], ("3 (Good)".to_string(), 1));
    assert_eq!((helpful.decided, helpful.mean), (1, Some(3.0)));
    let note = dimensions.iter().find(|d| d.key == "note").unwrap();
    assert_eq!((note.decided, note.open), (0, 1));

    // Each rater's answers against the consensus, per dimension of the rubric: Ann (correct:
    // fail, helpful: 4, tone: formal) matches on correct and tone, not on helpful (3).
    let records = store.raters().await.unwrap();
    let ann_labels = &records
        .iter()
        .find(|record| record.id == ann)
        .unwrap()
        .labels;
    assert_eq!(
        ann_labels[0].dimension_matches,
        [
            ("helpfulness: correct".to_string(), true),
            ("helpfulness: helpful".to_string(), false),
            ("helpfulness: tone".to_string(), true),
        ]
    );

    // The labels export a row each, with the rater, answers, rubric and guidelines versions.
    use arbiter_engine::reports::export::ExportFormat;
    use arbiter_engine::reports::label_export::export_labels;
    let (jsonl, rows) = export_labels(store, run_id, ExportFormat::Jsonl, Vec::new())
        .await
        .unwrap();
    assert_eq!(rows, 3);
    let records: Vec<serde_json::Value> = String::from_utf8(jsonl)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let raters: Vec<&str> = records
        .iter()
        .map(|record| record["rater"].as_str().unwrap())
        .collect();
    assert_eq!(raters, ["ann", "ben", "cat"]);
    let cat = &records[2];
    assert_eq!(cat["verdict"], "pass");
    let answers: serde_json::Value =
        serde_json::from_str(cat["answers"].as_str().unwrap()).unwrap();
    assert_eq!(answers["helpful"], 3.0);
    assert_eq!(answers["note"][0], "fine");
    assert_eq!(cat["rubric"], "helpfulness");
    assert_eq!(cat["rubric_version"], 1);
    assert_eq!(cat["rubric_hash"], first.content_hash.as_str());
    assert_eq!(cat["guideline_version"], 2);
    assert_eq!(cat["gold"], false);
    assert_eq!(cat["state"], "standing");
    assert!(cat["duration_ms"].as_i64().unwrap() >= 0);
    let (csv, _) = export_labels(store, run_id, ExportFormat::Csv, Vec::new())
        .await
        .unwrap();
    let csv = String::from_utf8(csv).unwrap();
    assert!(
        csv.starts_with("label_id,run_id,work_item_id,case_id"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 4);
    let (parquet, _) = export_labels(store, run_id, ExportFormat::Parquet, Vec::new())
        .await
        .unwrap();
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(bytes::Bytes::from(parquet)).unwrap();
    assert_eq!(reader.metadata().file_metadata().num_rows(), 3);
    let last = reader.get_row_iter(None).unwrap().last().unwrap().unwrap();
    let text = last.to_string();
    assert!(text.contains("rater: \"cat\""), "{text}");
    assert!(text.contains("guideline_version: 2"), "{text}");
    assert!(matches!(
        export_labels(
            store,
            arbiter_domain::ids::RunId(999),
            ExportFormat::Csv,
            Vec::new()
        )
        .await,
        Err(ServiceError::NotFound(_))
    ));
}

/// A case of `shared/golden/agreement.json`: the published data and values for `statistic`.
fn golden_case(statistic: &str, name: &str) -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/golden/agreement.json"
    );
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    golden[statistic]
        .as_array()
        .unwrap()
        .iter()
        .find(|case| case["name"] == name)
        .unwrap()
        .clone()
}

/// A launched run of `units` items ("Unit 0", "Unit 1", …) whose policy asks rubric `rubric`
/// (defined from `definition`) of `overlap` raters, every item sent to humans.
async fn run_of_units(
    store: &dyn Store,
    units: usize,
    rubric: &str,
    definition: &str,
    overlap: usize,
) -> arbiter_domain::ids::RunId {
    rubrics::create_rubric(store, rubric, definition, "", None)
        .await
        .unwrap();
    let dataset: String = (0..units)
        .map(|unit| {
            format!("{{\"id\": \"u{unit}\", \"input\": \"Unit {unit}\", \"target\": \"x\"}}\n")
        })
        .collect();
    let mut routed = policy(rubric);
    routed.human_overlap = overlap.to_string();
    let run_id = launch_with_policy(store, dataset.as_bytes(), 1, Some(&routed)).await;
    let ids = store
        .claim_work("worker", 100, LONG_LEASE_MS)
        .await
        .unwrap();
    escalate_as_routed(store, run_id, &ids).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    run_id
}

/// A new rater works through the queue: each item gets the answers `answers` gives for its
/// unit, or is skipped where it gives none.
async fn rate_units(store: &dyn Store, name: &str, answers: impl Fn(usize) -> Option<String>) {
    let rater = new_user(store, name, Role::Annotator).await;
    while let Some(task) = store
        .next_annotation_task(rater, LONG_LEASE_MS)
        .await
        .unwrap()
    {
        let unit: usize = task.input.trim_start_matches("Unit ").parse().unwrap();
        match answers(unit) {
            Some(answers) => {
                rubrics::submit_answers(store, &task.handle, rater, &answers, "", None)
                    .await
                    .unwrap();
            }
            None => store.skip_task(&task.handle, rater).await.unwrap(),
        }
    }
}

/// The same ratings given three ways (categories, an ordinal scale, a number) through the
/// queue come out of the run's agreement report with the published alpha at each level.
async fn published_agreement_values_come_out_of_labels_per_dimension(store: Arc<dyn Store>) {
    let store = &*store;
    // Krippendorff's (2011) worked example: four raters, twelve items, values 1 to 5, some
    // items unrated.
    let case = golden_case("krippendorff_alpha", "krippendorff_2011_4x12");
    let coders: Vec<Vec<Option<f64>>> = serde_json::from_value(case["coders"].clone()).unwrap();
    let expected = &case["expected"];
    let scale: Vec<String> = (1..=5)
        .map(|point| format!(r#"{{"label": "{point}", "description": "point {point}"}}"#))
        .collect();
    let definition = format!(
        r#"{{"dimensions": [
            {{"key": "category", "question": "Which?", "kind": "categorical", "options": ["1", "2", "3", "4", "5"]}},
            {{"key": "point", "question": "How good?", "kind": "ordinal", "scale": [{}]}},
            {{"key": "score", "question": "Score?", "kind": "numeric", "min": 0, "max": 10}}
        ], "verdict": {{"dimension": "point", "pass_at_least": 3}}}}"#,
        scale.join(", ")
    );
    let run_id = run_of_units(store, coders[0].len(), "graded", &definition, coders.len()).await;

    // Each rater labels the items they rated in the published table and skips the others.
    for (index, ratings) in coders.iter().enumerate() {
        rate_units(store, &format!("coder{index}"), |unit| {
            ratings[unit].map(|value| {
                format!(r#"{{"category": ["{value}"], "point": {value}, "score": {value}}}"#)
            })
        })
        .await;
    }

    let reports = arbiter_engine::annotation::agreement::run_agreement(store, run_id)
        .await
        .unwrap();
    let dimensions: Vec<&str> = reports
        .iter()
        .map(|report| report.dimension.as_str())
        .collect();
    assert_eq!(dimensions, ["verdict", "category", "point", "score"]);
    let alpha = |dimension: &str| {
        reports
            .iter()
            .find(|report| report.dimension == dimension)
            .unwrap()
            .alpha
            .statistic
            .value()
            .unwrap()
    };
    // Published to 12, 3 and 3 decimals.
    let published = |level: &str| expected[level].as_f64().unwrap();
    assert!(
        (alpha("category") - published("nominal")).abs() < 1e-9,
        "{}",
        alpha("category")
    );
    assert!(
        (alpha("point") - published("ordinal")).abs() < 5e-4,
        "{}",
        alpha("point")
    );
    assert!(
        (alpha("score") - published("interval")).abs() < 5e-4,
        "{}",
        alpha("score")
    );
    let rated = coders
        .iter()
        .map(|ratings| ratings.iter().flatten().count() as u64)
        .sum::<u64>();
    assert!(reports.iter().all(|report| report.labels == rated));

    // The queue's agreement (the lead's page and alerts) gives the same per dimension, named by
    // rubric; a dimension below the floor is an alert of its own, naming it.
    let by_queue = queue_agreement(store, 7, false).await.unwrap();
    let queue_alpha = |dimension: &str| {
        by_queue
            .iter()
            .find(|(_, report)| report.dimension == dimension)
            .unwrap_or_else(|| panic!("{dimension} in {by_queue:?}"))
            .1
            .alpha
            .statistic
            .value()
            .unwrap()
    };
    for dimension in ["category", "point", "score"] {
        let (queue, run) = (
            queue_alpha(&format!("graded v1: {dimension}")),
            alpha(dimension),
        );
        assert!(
            (queue - run).abs() < 1e-12,
            "{dimension}: {queue} against {run}"
        );
    }
    assert!((queue_alpha("verdict") - alpha("verdict")).abs() < 1e-12);
    let (queue, point) = by_queue
        .iter()
        .find(|(_, report)| report.dimension == "graded v1: point")
        .unwrap();
    // Twelve items are too few to alert on; as many as an alert needs, it names the dimension.
    assert_eq!(low_agreement_message(queue, point, 0.99), None);
    let mut point = point.clone();
    point.items = MIN_ITEMS_FOR_AGREEMENT_ALERT;
    let message = low_agreement_message(queue, &point, 0.99).unwrap();
    assert!(
        message.contains("(rubric dimension `graded v1: point`)"),
        "{message}"
    );
    assert_eq!(
        agreement_subject(queue, &point),
        format!("{queue} · graded v1: point")
    );
}

/// The SAS 3×3 table of `shared/golden/agreement.json` (rows: the first rater's category,
/// columns: the second's) given by two raters through the queue, once as categories and once
/// as points of a three-point scale: the pair's Cohen's kappa is the published unweighted and
/// linearly weighted value.
async fn published_kappas_come_out_of_two_raters_labels(store: Arc<dyn Store>) {
    let store = &*store;
    let case = golden_case("cohen_kappa", "sas_table_3x3");
    let table: Vec<Vec<usize>> = serde_json::from_value(case["table"].clone()).unwrap();
    // One item per counted cell: (first rater's point, second rater's point).
    let mut items: Vec<(usize, usize)> = Vec::new();
    for (first, row) in table.iter().enumerate() {
        for (second, count) in row.iter().enumerate() {
            items.extend(std::iter::repeat_n((first + 1, second + 1), *count));
        }
    }
    let definition = r#"{"dimensions": [
            {"key": "category", "question": "Which?", "kind": "categorical", "options": ["1", "2", "3"]},
            {"key": "point", "question": "How good?", "kind": "ordinal", "scale": [
                {"label": "low", "description": "l"}, {"label": "mid", "description": "m"},
                {"label": "high", "description": "h"}]}
        ], "verdict": {"dimension": "point", "pass_at_least": 2}}"#;
    let run_id = run_of_units(store, items.len(), "three", definition, 2).await;
    let answers = |point: usize| format!(r#"{{"category": ["{point}"], "point": {point}}}"#);
    rate_units(store, "first", |unit| Some(answers(items[unit].0))).await;
    rate_units(store, "second", |unit| Some(answers(items[unit].1))).await;
    let reports = arbiter_engine::annotation::agreement::run_agreement(store, run_id)
        .await
        .unwrap();
    let kappa = |dimension: &str| {
        let report = reports
            .iter()
            .find(|report| report.dimension == dimension)
            .unwrap();
        assert_eq!(report.pairs.len(), 1);
        assert_eq!(report.pairs[0].shared_items, items.len() as u64);
        report.pairs[0].kappa.statistic.value().unwrap()
    };
    // Published to four decimals.
    let published = |weighting: &str| case["expected"][weighting].as_f64().unwrap();
    assert!(
        (kappa("category") - published("unweighted")).abs() < 5e-5,
        "{}",
        kappa("category")
    );
    assert!(
        (kappa("point") - published("linear")).abs() < 5e-5,
        "{}",
        kappa("point")
    );
}

async fn reviewers_correct_rubric_labels_dimension_by_dimension(store: Arc<dyn Store>) {
    let store = &*store;
    rubrics::create_rubric(store, "helpfulness", HELPFULNESS, "", None)
        .await
        .unwrap();
    // One rater per item, every label reviewed.
    let form = PolicyForm {
        human_overlap: "1".into(),
        review_rate: "1".into(),
        ..policy("helpfulness")
    };
    let run_id = launch_with_policy(store, THREE_CASES.as_bytes(), 1, Some(&form)).await;
    let ids = store.claim_work("worker", 10, LONG_LEASE_MS).await.unwrap();
    escalate_as_routed(store, run_id, &ids).await;
    store.set_setting(GOLD_RATE_SETTING, "0").await.unwrap();
    let ann = new_user(store, "ann", Role::Annotator).await;
    let rev = new_user(store, "rev", Role::Reviewer).await;
    let task = store
        .next_annotation_task(ann, LONG_LEASE_MS)
        .await
        .unwrap()
        .unwrap();
    rubrics::submit_answers(
        store,
        &task.handle,
        ann,
        r#"{"correct": true, "helpful": 4, "tone": ["formal"]}"#,
        "",
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        progress(store, run_id).await.passed,
        1,
        "Ann's label decides"
    );

    // The reviewer gets the rubric and Ann's answers as given, to correct them in the form.
    let item = store.next_review(rev).await.unwrap().unwrap();
    let given = item
        .rubric
        .clone()
        .expect("a rubric label comes with its rubric");
    assert_eq!(given.rubric.dimensions.len(), 4);
    assert_eq!(
        serde_json::to_value(&given.answers).unwrap(),
        serde_json::json!({"correct": true, "helpful": 4.0, "tone": ["formal"]})
    );
    let review = |answers: &'static str| {
        arbiter_engine::annotation::review::review(
            store,
            item.label_id,
            rev,
            "correct",
            "",
            answers,
            "the answer is wrong and unhelpful",
        )
    };
    // Corrected answers are checked against the label's rubric like a rater's.
    let refused = invalid(review(r#"{"correct": false, "tone": ["formal"]}"#).await);
    assert!(refused.contains("`helpful` needs an answer"), "{refused}");
    let refused = invalid(review(r#"{"correct": false, "helpful": 9, "tone": ["formal"]}"#).await);
    assert!(refused.contains("from 1 to 4"), "{refused}");
    let refused = invalid(review("nope").await);
    assert!(refused.contains("JSON object"), "{refused}");
    assert_eq!(
        progress(store, run_id).await.passed,
        1,
        "refusals change nothing"
    );

    // helpful 1 fails (at least 3 passes): the item turns fail, and the item's consensus is
    // the reviewer's answer on each dimension.
    review(r#"{"correct": false, "helpful": 1, "tone": ["casual"]}"#)
        .await
        .unwrap();
    let counts = progress(store, run_id).await;
    assert_eq!((counts.passed, counts.failed), (0, 1));
    let dimensions = rubrics::run_dimensions(store, run_id).await.unwrap();
    let helpful = dimensions.iter().find(|d| d.key == "helpful").unwrap();
    assert_eq!((helpful.decided, helpful.mean), (1, Some(1.0)));
    let tone = dimensions.iter().find(|d| d.key == "tone").unwrap();
    assert!(
        tone.distribution
            .iter()
            .any(|(option, count)| option == "casual" && *count == 1),
        "{:?}",
        tone.distribution
    );

    // Ann reads the correction on her page: the decision, the reason and the answers.
    let own = store.own_labels(ann, 10).await.unwrap();
    let outcome = own[0].review.as_ref().expect("reviewed");
    assert_eq!(outcome.decision, "corrected");
    assert_eq!(outcome.corrected_to, Some(false));
    assert!(outcome
        .corrected_answers
        .contains(&("How helpful is it?".to_string(), "1 (Poor)".to_string())));
}
