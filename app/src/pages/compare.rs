//! Comparing two runs: each run's score with counts, and the items whose outcome flipped,
//! regressions first, each opening both outputs side by side.

use crate::api::compare_runs;
use crate::components::ErrorNote;
use crate::views::{FlipView, ScoreView};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[component]
pub fn ComparePage() -> impl IntoView {
    let query = use_query_map();
    let run = move |name: &str| {
        query
            .read()
            .get(name)
            .and_then(|id| id.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let comparison = Resource::new(
        move || (run("baseline"), run("candidate")),
        |(baseline, candidate)| compare_runs(baseline, candidate),
    );
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match comparison.await {
                    Ok(comparison) => view! {
                        <h1>"Comparison: " {comparison.eval_name.clone()}</h1>
                        <section class="scores">
                            <ScoreCard title="Baseline" score=comparison.baseline/>
                            <ScoreCard title="Candidate" score=comparison.candidate/>
                        </section>
                        <section class="card">
                            <p>
                                {comparison.paired} " paired items; "
                                <strong data-testid="pass-to-fail">{comparison.pass_to_fail}</strong> " pass→fail, "
                                <strong data-testid="fail-to-pass">{comparison.fail_to_pass}</strong> " fail→pass."
                            </p>
                            <table class="flips">
                                <thead><tr><th>"Change"</th><th>"Case"</th><th>"Rep"</th><th>"Input and both outputs"</th></tr></thead>
                                <tbody>
                                    {comparison.flips.into_iter().map(|flip| view! { <FlipRow flip/> }).collect_view()}
                                </tbody>
                            </table>
                        </section>
                    }.into_any(),
                    Err(error) => view! { <h1>"Comparison"</h1> <ErrorNote error/> <p><a href="/runs">"Pick two runs"</a></p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn ScoreCard(title: &'static str, score: ScoreView) -> impl IntoView {
    view! {
        <div class="card score" data-testid=format!("score-{}", title.to_lowercase())>
            <h2>{title} ": " <a href=format!("/runs/{}", score.run_id)>{score.checkpoint_name.clone()}</a></h2>
            <p class="big">{score.pass_rate_text()}</p>
            <p>
                {score.passed} " passed of " {score.passed + score.failed} " graded · "
                {score.uncertain} " awaiting human review · " {score.errors} " errors · "
                {score.total} " result identities (" {score.status.clone()} ")"
            </p>
        </div>
    }
}

#[component]
fn FlipRow(flip: FlipView) -> impl IntoView {
    let class = if flip.direction.starts_with("pass") {
        "flip regression"
    } else {
        "flip improvement"
    };
    view! {
        <tr class=class>
            <td><strong>{flip.direction}</strong></td>
            <td><code>{flip.case_id}</code></td>
            <td>{flip.repetition}</td>
            <td>
                <details>
                    <summary>{flip.input} " (target: " {flip.target} ")"</summary>
                    <div class="side-by-side">
                        <div>
                            <h3>"Baseline"</h3>
                            <pre class="output">{flip.baseline_output}</pre>
                            <p class="hint">{flip.baseline_reason}</p>
                        </div>
                        <div>
                            <h3>"Candidate"</h3>
                            <pre class="output">{flip.candidate_output}</pre>
                            <p class="hint">{flip.candidate_reason}</p>
                        </div>
                    </div>
                </details>
            </td>
        </tr>
    }
}
