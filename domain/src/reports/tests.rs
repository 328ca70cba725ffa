use super::compare::{
    apply_correction, changed_items, compare_snapshots, Change, DiffFilter, PairedComparison,
};
use super::sample_compare::{compare_sample_metrics, RunSamples};
use super::snapshot::{Expectation, ScanRow, Snapshot, SnapshotBuilder};
use super::*;
use crate::ids::{IdentityId, RevisionId};
use crate::stats::correction::Correction;

fn tally(category: &str, field: &str, value: &str, count: i64) -> TallyRow {
    TallyRow {
        category: category.into(),
        field: field.into(),
        value: value.into(),
        count,
    }
}

fn expectation() -> Expectation {
    Expectation {
        revision_id: RevisionId(7),
        grader: "exact_match".into(),
        repetitions: 1,
    }
}

fn row(id: i64, case: &str, repetition: i64, category: &str, verdict: &str) -> ScanRow {
    ScanRow {
        identity_id: IdentityId(id),
        case_id: case.into(),
        repetition,
        turn: 1,
        revision_id: RevisionId(7),
        category: category.into(),
        verdict: (!verdict.is_empty()).then(|| verdict.into()),
        outcome: Some("ok".into()),
        model_used: Some("m-1".into()),
        fallback_used: false,
        latency_ms: Some(300 * id),
    }
}

#[test]
fn the_snapshot_keeps_a_latency_histogram_through_encoding() {
    // 300, 600, 900 and 1,200 ms: one in 0.25–0.5 s, two in 0.5–1 s, one in 1–2 s.
    let built = snapshot(&[
        row(1, "a", 0, "", "pass"),
        row(2, "b", 0, "", "fail"),
        row(3, "c", 0, "", "pass"),
        row(4, "d", 0, "", "pass"),
    ]);
    assert_eq!(&built.header.latency[..5], &[0, 0, 1, 2, 1]);
    assert_eq!(built.header.latency.iter().sum::<u64>(), 4);
    let decoded = Snapshot::decode(&built.encode(), built.identity_hash.clone()).unwrap();
    assert_eq!(decoded.header.latency, built.header.latency);
}

fn snapshot(rows: &[ScanRow]) -> Snapshot {
    let mut builder = SnapshotBuilder::new(expectation());
    for row in rows {
        builder.push(row);
    }
    builder.finish()
}

fn facts(expected: u64) -> RunFacts {
    RunFacts {
        expected,
        repetitions: 1,
    }
}

#[test]
fn rates_pool_numerators_and_denominators() {
    // 9 of 10 easy and 10 of 20 hard: 19 of 30, not the mean of 90% and 50%.
    let tallies = [
        tally("easy", "verdict", "pass", 9),
        tally("easy", "verdict", "fail", 1),
        tally("hard", "verdict", "pass", 10),
        tally("hard", "verdict", "fail", 10),
        tally("hard", "outcome", "ok", 18),
        tally("hard", "outcome", "truncated", 2),
        tally("easy", "outcome", "ok", 10),
    ];
    let report = build_report(&facts(30), &tallies, &[], &BTreeMap::new());
    assert_eq!(report.completeness, Completeness::Complete);
    assert_eq!(report.overall.pass_rate, Some(19.0 / 30.0));
    assert_eq!(
        report.overall.outcomes[1], 2,
        "truncated answers shown beside the score"
    );
    let hard = &report.categories[0];
    assert_eq!(
        (hard.category.as_str(), hard.pass_rate),
        ("hard", Some(0.5))
    );
    let interval = hard.interval.unwrap();
    assert!(interval.lower < 0.5 && interval.upper > 0.5);
    assert_eq!(hard.interval_method, "wilson");
}

#[test]
fn errors_and_uncertain_results_are_never_counted_as_wrong() {
    let tallies = [
        tally("", "verdict", "pass", 6),
        tally("", "verdict", "fail", 2),
        tally("", "verdict", "error", 2),
        tally("", "outcome", "endpoint_error", 2),
    ];
    let report = build_report(&facts(10), &tallies, &[], &BTreeMap::new());
    assert_eq!(report.overall.pass_rate, Some(0.75));
    assert_eq!(report.overall.errors, 2);
    assert_eq!(report.completeness, Completeness::Complete);
    assert!(report.categories.is_empty(), "no categories in the dataset");

    let tallies = [
        tally("", "verdict", "pass", 6),
        tally("", "verdict", "uncertain", 4),
    ];
    let report = build_report(&facts(10), &tallies, &[], &BTreeMap::new());
    assert_eq!(report.completeness, Completeness::Partial);
    assert_eq!(report.overall.pass_rate, Some(1.0));
    assert!(report.explanations()[0].contains("4 results have no final verdict"));
}

#[test]
fn a_missing_result_makes_the_report_partial_with_counts() {
    let tallies = [
        tally("", "verdict", "pass", 5),
        tally("", "verdict", "fail", 3),
    ];
    let report = build_report(&facts(10), &tallies, &[], &BTreeMap::new());
    assert_eq!(report.completeness, Completeness::Partial);
    assert_eq!((report.completed, report.expected), (8, 10));
    assert_eq!(report.overall.pending, 2);
    assert_eq!(
        report.explanations(),
        vec!["2 of 10 expected results are missing (8 present)".to_string()]
    );
}

#[test]
fn duplicates_conflicts_and_mixed_versions_are_refused_with_reasons() {
    let duplicated = snapshot(&[
        row(1, "a", 0, "", "pass"),
        row(2, "a", 0, "", "pass"),
        row(3, "b", 0, "", "fail"),
    ]);
    assert!(matches!(
        duplicated.header.problems[..],
        [Problem::Duplicates { count: 1, .. }]
    ));
    let conflicting = snapshot(&[row(1, "a", 0, "", "pass"), row(2, "a", 0, "", "fail")]);
    assert!(matches!(
        conflicting.header.problems[..],
        [Problem::ConflictingDuplicates { count: 1, .. }]
    ));
    assert!(conflicting.header.problems[0]
        .explain()
        .contains("different verdicts (first: a#0)"));

    let mut other_revision = row(2, "b", 0, "", "pass");
    other_revision.revision_id = RevisionId(8);
    let mixed = snapshot(&[row(1, "a", 0, "", "pass"), other_revision]);
    assert!(mixed.header.problems[0]
        .explain()
        .contains("dataset revisions [7, 8]"));

    let mut builder = SnapshotBuilder::new(expectation());
    builder.push(&row(1, "a", 0, "", "pass"));
    builder.push(&row(2, "b", 0, "", "pass"));
    builder.note_graders(["exact_match".to_string(), "regex".to_string()]);
    let mixed = builder.finish();
    assert!(mixed.header.problems[0]
        .explain()
        .contains("graded by exact_match, regex"));

    let mut other_model = row(2, "b", 0, "", "pass");
    other_model.model_used = Some("m-2".into());
    let mut fallback = row(3, "c", 0, "", "pass");
    fallback.model_used = Some("backup".into());
    fallback.fallback_used = true;
    let changed = snapshot(&[row(1, "a", 0, "", "pass"), other_model, fallback]);
    assert_eq!(
        changed.header.problems.len(),
        1,
        "fallback answers are recorded, not a change"
    );
    assert!(changed.header.problems[0]
        .explain()
        .contains("served model changed within the run (m-1, m-2)"));

    // Any of these makes the report invalid, not partial: waiting will not fix it.
    let tallies = [tally("", "verdict", "pass", 2)];
    let report = build_report(
        &facts(2),
        &tallies,
        &changed.header.problems,
        &BTreeMap::new(),
    );
    assert_eq!(report.completeness, Completeness::Invalid);
}

#[test]
fn snapshots_round_trip_and_reject_corruption() {
    let original = snapshot(&[
        row(10, "a", 0, "math", "pass"),
        row(11, "b", 0, "code", ""),
        row(12, "c", 0, "math", "error"),
    ]);
    let bytes = original.encode();
    let decoded = Snapshot::decode(&bytes, original.identity_hash.clone()).unwrap();
    assert_eq!(decoded, original);
    assert_eq!(decoded.category_name(decoded.categories[1]), "code");
    assert!(Snapshot::decode(&bytes[..bytes.len() - 1], String::new()).is_err());
    assert!(Snapshot::decode(b"nope", String::new()).is_err());
}

#[test]
fn comparisons_pair_by_identity_and_list_regressions_first() {
    let baseline = snapshot(&[
        row(1, "a", 0, "math", "fail"),
        row(2, "b", 0, "math", "pass"),
        row(3, "c", 0, "code", "pass"),
        row(4, "d", 0, "code", "pass"),
        row(5, "e", 0, "code", "pass"),
    ]);
    let candidate = snapshot(&[
        row(11, "a", 0, "math", "pass"),
        row(12, "b", 0, "math", "fail"),
        row(13, "c", 0, "code", "uncertain"),
        row(14, "d", 0, "code", "fail"),
        row(15, "e", 0, "code", "pass"),
    ]);
    let comparison = compare_snapshots(&baseline, &candidate).unwrap();
    assert_eq!(comparison.changed, 4);
    let t = comparison.overall.table;
    assert_eq!(
        (t.both_pass, t.pass_to_fail, t.fail_to_pass, t.both_fail),
        (1, 2, 1, 0)
    );
    assert_eq!(comparison.overall.p_value, 1.0);
    let code = comparison
        .categories
        .iter()
        .find(|c| c.category == "code")
        .unwrap();
    assert_eq!(code.shared, 3);
    assert_eq!(code.table.pass_to_fail, 1);

    let all = changed_items(&baseline, &candidate, &DiffFilter::default());
    let kinds: Vec<(Change, i64)> = all
        .iter()
        .map(|i| (i.change, i.candidate_id.get()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (Change::Regression, 12),
            (Change::Regression, 14),
            (Change::LostPass, 13),
            (Change::Improvement, 11)
        ]
    );
    let filter = DiffFilter {
        category: Some("code".into()),
        change: Some(Change::Regression),
        outcome: None,
    };
    let only = changed_items(&baseline, &candidate, &filter);
    assert_eq!(only.len(), 1);
    assert_eq!(
        (only[0].baseline_id.get(), only[0].candidate_id.get()),
        (4, 14)
    );

    let shorter = snapshot(&[row(1, "a", 0, "math", "fail")]);
    assert!(compare_snapshots(&baseline, &shorter)
        .unwrap_err()
        .contains("do not share one list"));
}

#[test]
fn many_tests_on_one_page_are_corrected_together() {
    // 30 regressions and 5 improvements of 400: significant alone and after Holm over 3 tests.
    let mut base = Vec::new();
    let mut cand = Vec::new();
    for i in 0..400 {
        let category = if i % 2 == 0 { "x" } else { "y" };
        let (b, c) = match i {
            0..30 => ("pass", "fail"),
            30..35 => ("fail", "pass"),
            _ => ("pass", "pass"),
        };
        base.push(row(i, &format!("c{i}"), 0, category, b));
        cand.push(row(1000 + i, &format!("c{i}"), 0, category, c));
    }
    let mut comparisons = vec![compare_snapshots(&snapshot(&base), &snapshot(&cand)).unwrap()];
    apply_correction(&mut comparisons, Correction::Holm);
    let overall = &comparisons[0].overall;
    assert!(overall.p_value < 1e-4 && overall.adjusted_p >= overall.p_value);
    assert!(overall.is_regression());
    assert!(overall.interval.unwrap().upper < 0.0);
    let adjusted: Vec<f64> = comparisons[0]
        .categories
        .iter()
        .map(|c| c.adjusted_p)
        .collect();
    assert!(adjusted.iter().all(|p| *p >= overall.p_value));
}

/// Rows of `cases` cases × `repetitions`, repetition by repetition; `verdict(case, rep)`.
fn repeated_rows(
    cases: usize,
    repetitions: i64,
    verdict: impl Fn(usize, i64) -> &'static str,
) -> Vec<ScanRow> {
    let mut rows = Vec::new();
    for repetition in 0..repetitions {
        for case in 0..cases {
            let id = rows.len() as i64 + 1;
            let category = if case % 2 == 0 { "even" } else { "odd" };
            rows.push(row(
                id,
                &format!("c{case}"),
                repetition,
                category,
                verdict(case, repetition),
            ));
        }
    }
    rows
}

fn snapshot_with_repetitions(rows: &[ScanRow], repetitions: i64) -> Snapshot {
    let mut builder = SnapshotBuilder::new(Expectation {
        repetitions,
        ..expectation()
    });
    for row in rows {
        builder.push(row);
    }
    builder.finish()
}

#[test]
fn with_repetitions_cases_are_resampled_together() {
    // 200 cases × 3 repetitions. The candidate fails every repetition of 30 cases the baseline
    // passed: 90 identity flips, but only 30 independent cases.
    let baseline_rows = repeated_rows(200, 3, |_, _| "pass");
    let candidate_rows = repeated_rows(200, 3, |case, _| if case < 30 { "fail" } else { "pass" });
    let baseline = snapshot_with_repetitions(&baseline_rows, 3);
    let candidate = snapshot_with_repetitions(&candidate_rows, 3);
    assert_eq!(baseline.header.cases, Some(200));
    let comparison = compare_snapshots(&baseline, &candidate).unwrap();
    let overall = &comparison.overall;
    assert_eq!(overall.method(), "paired bootstrap over cases");
    assert_eq!(overall.table.pass_to_fail, 90);
    let bootstrap = overall.cluster_bootstrap.unwrap();
    assert!((bootstrap.mean_difference + 0.15).abs() < 1e-12);
    assert_eq!(overall.interval, Some(bootstrap.interval));
    // Case-level sampling: the interval is about √3 wider than McNemar's identity-level view
    // would make it; both see a clear regression.
    let identity_level = crate::stats::proportion::paired_difference(&overall.table, 0.95).unwrap();
    let width = |i: crate::stats::Interval| i.upper - i.lower;
    assert!(
        width(bootstrap.interval) > 1.4 * width(identity_level),
        "{bootstrap:?} vs {identity_level:?}"
    );
    assert!(overall.is_regression(), "{overall:?}");
    // Per category too: the even and odd cases each have their own test.
    assert!(comparison
        .categories
        .iter()
        .all(|c| c.cluster_bootstrap.is_some()));

    // One repetition, or identities not laid out repetition by repetition: McNemar as before.
    let single = snapshot(&repeated_rows(20, 1, |_, _| "pass"));
    assert_eq!(single.header.cases, None);
    let mut shuffled = baseline_rows.clone();
    shuffled.swap(0, 250);
    let shuffled = snapshot_with_repetitions(&shuffled, 3);
    assert_eq!(shuffled.header.cases, None);
    let comparison = compare_snapshots(&shuffled, &shuffled).unwrap();
    assert_eq!(comparison.overall.method(), "exact McNemar");
}

/// Samples of `items` cases (one turn each) with `samples` each: case i has `correct(i)` right
/// answers, and the first `correct(i)` samples answer "right", the rest "wrong".
fn run_samples(items: usize, samples: u64, correct: impl Fn(usize) -> u64) -> RunSamples {
    let mut run = RunSamples::default();
    for item in 0..items {
        let right = correct(item).min(samples);
        run.items
            .insert((format!("c{item}"), 1), votes(samples, right));
    }
    run
}

fn votes(samples: u64, right: u64) -> Vec<crate::stats::sampling::VotedSample> {
    (0..samples)
        .map(|sample| crate::stats::sampling::VotedSample {
            answer: Some(if sample < right { "right" } else { "wrong" }.into()),
            verdict: Some(sample < right),
        })
        .collect()
}

#[test]
fn metrics_over_samples_are_compared_pairwise_and_corrected_with_the_page() {
    use crate::stats::sampling::SampleMetric;
    // 300 cases, 4 samples each. The baseline gets one sample right on every case; the
    // candidate three on the first 150 and one on the rest: pass@4 is 1 on both sides, while
    // pass^4 is 0 on both and maj@4 improves on half the cases.
    let baseline = run_samples(300, 4, |_| 1);
    let candidate = run_samples(300, 4, |item| if item < 150 { 3 } else { 1 });
    let tests = compare_sample_metrics(&baseline, &candidate);
    let labels: Vec<String> = tests.iter().map(|test| test.label()).collect();
    assert_eq!(
        labels,
        ["pass@4", "pass^4", "maj@4"],
        "k = the samples both have"
    );
    let find = |metric: SampleMetric| tests.iter().find(|t| t.metric == metric).unwrap();
    let pass_at = find(SampleMetric::PassAtK);
    assert_eq!((pass_at.items, pass_at.cases), (300, 300));
    assert_eq!(
        (pass_at.baseline_samples, pass_at.candidate_samples),
        (1200, 1200)
    );
    assert_eq!((pass_at.baseline, pass_at.candidate), (1.0, 1.0));
    assert_eq!(pass_at.p_value, 1.0, "nothing differs");
    let majority = find(SampleMetric::MajAtK);
    assert_eq!((majority.baseline, majority.candidate), (0.0, 0.5));
    assert_eq!(majority.method, "exact McNemar", "0/1 per case");
    assert!(majority.p_value < 1e-10, "{majority:?}");
    let interval = majority.bootstrap.unwrap().interval;
    assert!(interval.lower > 0.4 && interval.upper < 0.6, "{interval:?}");

    // The page's correction sees the overall test, the categories and these three: the
    // smallest of four p-values is multiplied by four under Holm.
    let mut comparison = PairedComparison {
        sample_metrics: tests,
        ..PairedComparison::default()
    };
    comparison.overall.p_value = 0.5;
    let mut comparisons = [comparison];
    apply_correction(&mut comparisons, Correction::Holm);
    let majority = &comparisons[0].sample_metrics[2];
    assert!((majority.adjusted_p - (majority.p_value * 4.0).min(1.0)).abs() < 1e-12);
    assert!(majority.is_improvement());

    // Runs with one sample per item have nothing to compare over samples.
    assert!(
        compare_sample_metrics(&run_samples(10, 1, |_| 1), &run_samples(10, 1, |_| 0)).is_empty()
    );
}

#[test]
fn a_few_changed_cases_are_not_significant_and_k_follows_most_items() {
    use crate::stats::sampling::SampleMetric;
    // Five cases of 300 go from every sample wrong to every sample right: McNemar's p is
    // 2/2⁵, where a bootstrap over cases would call it significant.
    let baseline = run_samples(300, 4, |_| 0);
    let candidate = run_samples(300, 4, |item| if item < 5 { 4 } else { 0 });
    for test in compare_sample_metrics(&baseline, &candidate) {
        assert!((test.p_value - 0.0625).abs() < 1e-9, "{test:?}");
    }
    // One case sampled 40 times does not make the tested k 40.
    let mut many = run_samples(20, 12, |item| item as u64 % 13);
    many.items.insert(("c0".into(), 1), votes(40, 20));
    let tests = compare_sample_metrics(&many, &run_samples(20, 12, |_| 6));
    let ks: Vec<u64> = tests
        .iter()
        .filter(|t| t.metric == SampleMetric::PassAtK)
        .map(|t| t.k)
        .collect();
    assert_eq!(ks, [12], "10 is too close to 12 to be worth a test");
    // Fractional scores (pass@k below n) use the sign-flip test over cases.
    let tests = compare_sample_metrics(&run_samples(200, 25, |_| 5), &run_samples(200, 25, |_| 10));
    let pass_at_10 = tests
        .iter()
        .find(|t| t.metric == SampleMetric::PassAtK && t.k == 10)
        .unwrap();
    assert_eq!(pass_at_10.method, "sign-flip permutation over cases");
    // Every case better: with few distinct differences the test draws enough sign flips that
    // its p-value can fall far below what a page's correction needs.
    assert!(pass_at_10.p_value < 1e-4, "{pass_at_10:?}");
}

#[test]
fn conversation_turns_are_one_case_in_sample_comparisons() {
    use crate::stats::sampling::SampleMetric;
    // 40 conversations of 3 turns; the candidate improves every turn of the first 4.
    let run = |better: bool| {
        let mut run = RunSamples::default();
        for case in 0..40 {
            for turn in 1..=3 {
                let right = if better && case < 4 { 2 } else { 0 };
                run.items
                    .insert((format!("d{case}"), turn), votes(2, right));
            }
        }
        run
    };
    let tests = compare_sample_metrics(&run(false), &run(true));
    let majority = tests
        .iter()
        .find(|t| t.metric == SampleMetric::MajAtK)
        .unwrap();
    assert_eq!((majority.items, majority.cases), (120, 40));
    // Four cases, each better on all three turns: as likely as 2/2⁴ under no difference, not
    // twelve independent improvements.
    assert_eq!(majority.method, "sign-flip permutation over cases");
    assert!(majority.p_value > 0.1, "{majority:?}");
}
