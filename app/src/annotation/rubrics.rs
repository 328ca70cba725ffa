//! The Rubrics page: what raters are asked, as versioned rubrics of typed dimensions, and the
//! guidelines shown beside each item, versioned apart. Leads define both; everyone who reads
//! results sees them (an eval's triage policy names a rubric here).

use crate::annotation::api::{rubrics_page, AddGuidelines, CreateRubric};
use crate::components::{ActionError, ErrorNote};
use crate::format::format_time;
use arbiter_domain::annotation::consensus::answer_in_words;
use arbiter_domain::annotation::rubric::{DimensionAnswer, DimensionKind, RubricEntry};
use leptos::prelude::*;

/// What a new rubric's definition box starts with: two dimensions, the verdict from the first.
const EXAMPLE: &str = r#"{
  "dimensions": [
    {"key": "correct", "question": "Is the final answer correct?", "kind": "binary"},
    {"key": "helpful", "question": "How helpful is the answer?", "kind": "ordinal", "scale": [
      {"label": "Poor", "description": "Does not address the question"},
      {"label": "Fair", "description": "Addresses it partly"},
      {"label": "Good", "description": "Answers it fully"},
      {"label": "Excellent", "description": "Answers it fully, clearly and concisely"}
    ]}
  ],
  "verdict": {"dimension": "correct"}
}"#;

#[component]
pub fn RubricsPage() -> impl IntoView {
    let create = ServerAction::<CreateRubric>::new();
    let guidelines = ServerAction::<AddGuidelines>::new();
    let page = Resource::new(
        move || (create.version().get(), guidelines.version().get()),
        |_| rubrics_page(),
    );
    view! {
        <h1>"Rubrics"</h1>
        <p class="hint">
            "What raters answer about an item: one or more dimensions (pass/fail, an ordinal scale with an anchor per point, "
            "named categories, a number, free text). An eval's triage policy names a rubric; each launch freezes its newest version. "
            "Agreement and consensus are computed per dimension at its level of measurement."
        </p>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(data) => view! {
                        {if data.rubrics.is_empty() {
                            view! { <p class="notice" data-testid="no-rubrics">"No rubrics yet: raters answer pass or fail."</p> }.into_any()
                        } else {
                            data.rubrics.into_iter().map(|entry| view! { <RubricCard entry/> }).collect_view().into_any()
                        }}
                        {data.can_edit.then(|| view! {
                            <section class="card" data-testid="rubric-form">
                                <h2>"Define a rubric or its next version"</h2>
                                <ActionForm action=create attr:class="stack">
                                    <label>"Rubric name" <input name="name" maxlength="80" required/></label>
                                    <label>"Definition (JSON)" <textarea name="definition" rows="16" class="code">{EXAMPLE}</textarea></label>
                                    <label>"What changed and why" <input name="note" maxlength="1000"/></label>
                                    <button type="submit">"Save rubric"</button>
                                </ActionForm>
                                <ActionError value=create.value()/>
                                {move || create.value().get().and_then(Result::ok).map(|version| view! {
                                    <p class="notice" data-testid="rubric-saved">"Saved as version " {version} "."</p>
                                })}
                            </section>
                            <section class="card" data-testid="guidelines-form">
                                <h2>"Guidelines"</h2>
                                <p class="hint">"Markdown shown to raters beside every item of the rubric, with examples; each label records the version its rater saw."</p>
                                <ActionForm action=guidelines attr:class="stack">
                                    <label>"For rubric" <input name="rubric_name" maxlength="80" required/></label>
                                    <label>"Guidelines (markdown)" <textarea name="markdown" rows="10"></textarea></label>
                                    <label>"What changed and why" <input name="note" maxlength="1000"/></label>
                                    <button type="submit">"Save guidelines"</button>
                                </ActionForm>
                                <ActionError value=guidelines.value()/>
                                {move || guidelines.value().get().and_then(Result::ok).map(|version| view! {
                                    <p class="notice" data-testid="guidelines-saved">"Saved as guidelines version " {version} "."</p>
                                })}
                            </section>
                        })}
                    }.into_any(),
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// A rubric's newest version: its dimensions, what decides the verdict, its guidelines.
#[component]
fn RubricCard(entry: RubricEntry) -> impl IntoView {
    let RubricEntry {
        latest,
        older,
        guidelines,
        guidelines_html,
    } = entry;
    let verdict = latest.rubric.verdict.as_ref().map(|rule| {
        let from = latest.rubric.dimension(&rule.dimension);
        match (rule.pass_at_least, from) {
            (Some(point), Some(dimension)) => format!(
                "An item passes when `{}` is at least {}.",
                rule.dimension,
                answer_in_words(&dimension.kind, &DimensionAnswer::Number(point))
            ),
            _ => format!("An item passes when `{}` is pass.", rule.dimension),
        }
    });
    view! {
        <section class="card" data-testid="rubric" data-rubric=latest.name.clone()>
            <h2>{latest.name.clone()} " " <span class="hint">"version " {latest.version}</span></h2>
            <p class="hint">
                {format_time(latest.created_at)}
                {latest.created_by.clone().map(|by| format!(" by {by}"))}
                {(!latest.note.is_empty()).then(|| format!(" — {}", latest.note))}
                " · " <code title="SHA-256 of the definition">{latest.content_hash.chars().take(19).collect::<String>()}</code>
            </p>
            <table data-testid="dimensions">
                <thead><tr><th>"Key"</th><th>"Question"</th><th>"Answer"</th><th>"Level"</th></tr></thead>
                <tbody>
                    {latest.rubric.dimensions.iter().map(|dimension| view! {
                        <tr>
                            <td><code>{dimension.key.clone()}</code>{(!dimension.required).then_some(" (optional)")}</td>
                            <td>{dimension.question.clone()}</td>
                            <td>{kind_in_words(&dimension.kind)}</td>
                            <td>{dimension.kind.level().map_or("none (text)", |level| level.as_str())}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <p>{verdict.unwrap_or_else(|| "No verdict: this rubric cannot decide items for a triage policy.".into())}</p>
            {match guidelines {
                Some(guidelines) => view! {
                    <details data-testid="rubric-guidelines">
                        <summary>"Guidelines, version " {guidelines.version}</summary>
                        <div class="rendered guidelines" inner_html=guidelines_html></div>
                    </details>
                }.into_any(),
                None => view! { <p class="hint">"No guidelines yet."</p> }.into_any(),
            }}
            {(!older.is_empty()).then(|| view! {
                <p class="hint">"Earlier versions: "
                    {older.iter().map(|version| format!("{} ({})", version.version, format_time(version.created_at))).collect::<Vec<_>>().join(", ")}
                </p>
            })}
        </section>
    }
}

/// A dimension's kind in a few words: "pass / fail", "1–4: Poor … Excellent".
fn kind_in_words(kind: &DimensionKind) -> String {
    match kind {
        DimensionKind::Binary => "pass / fail".into(),
        DimensionKind::Ordinal { scale } => format!(
            "1–{}: {}",
            scale.len(),
            scale
                .iter()
                .map(|anchor| anchor.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DimensionKind::Categorical { options, multiple } => format!(
            "{} of: {}",
            if *multiple { "any" } else { "one" },
            options.join(", ")
        ),
        DimensionKind::Numeric { min, max } => format!("a number from {min} to {max}"),
        DimensionKind::FreeText { max_chars } => format!("text, up to {max_chars} characters"),
    }
}
