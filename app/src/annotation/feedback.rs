//! A rater's own labels: those a reviewer corrected or rejected, with the reason the reviewer
//! gave (and a second senior's word when they overturned the reviewer), and those not decided
//! yet: waiting for other raters (the rater can still change them) or for a reviewer.

use crate::annotation::api::{own_labels, EditLabel};
use crate::annotation::rubric_form::{AnswersTable, RubricForm};
use crate::components::{error_text, plain_item, ErrorNote};
use crate::format::{format_time, verdict_word};
use crate::shown::{RawToggle, ShownItemView};
use arbiter_domain::annotation::review::{OwnLabel, ReviewOutcome};
use leptos::prelude::*;

#[component]
pub fn FeedbackPage() -> impl IntoView {
    let edit = ServerAction::<EditLabel>::new();
    let labels = Resource::new(move || edit.version().get(), |_| own_labels());
    let raw = RwSignal::new(false);
    view! {
        <h1>"My labels"</h1>
        <p class="hint">
            "Labels a reviewer corrected or rejected, with their reasons, and labels not decided yet: "
            "a label can be changed until its item has all its labels."
        </p>
        {move || edit.value().get().map(|result| match result {
            Ok(()) => view! { <p class="notice" role="status" data-testid="notice">"Label changed."</p> }.into_any(),
            Err(err) => view! { <p class="error" role="alert" data-testid="notice">{error_text(&err)}</p> }.into_any(),
        })}
        <crate::annotation::pay::OwnPay/>
        <RawToggle raw/>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match labels.await {
                    Ok(labels) if labels.is_empty() => view! {
                        <p class="notice" data-testid="no-feedback">"No reviewed labels and none open to change."</p>
                    }.into_any(),
                    Ok(labels) => {
                        let (open, reviewed): (Vec<OwnLabel>, Vec<OwnLabel>) =
                            labels.into_iter().partition(|label| label.review.is_none());
                        view! {
                            {(!reviewed.is_empty()).then(|| view! {
                                <h2>"Reviewed"</h2>
                                {reviewed.into_iter().map(|label| view! { <OwnLabelCard label edit raw/> }).collect_view()}
                            })}
                            {(!open.is_empty()).then(|| view! {
                                <h2>"Not decided yet"</h2>
                                {open.into_iter().map(|label| view! { <OwnLabelCard label edit raw/> }).collect_view()}
                            })}
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
fn OwnLabelCard(
    label: OwnLabel,
    edit: ServerAction<EditLabel>,
    raw: RwSignal<bool>,
) -> impl IntoView {
    let shown = label
        .shown
        .clone()
        .unwrap_or_else(|| plain_item(&label.input, &label.target, &label.output));
    let label_id = label.label_id;
    let rationale = RwSignal::new(label.rationale.clone());
    let change = move |verdict: &str| {
        edit.dispatch(EditLabel {
            label_id,
            verdict: verdict.to_string(),
            answers: String::new(),
            rationale: rationale.get_untracked(),
        });
    };
    // A rubric label changes by its answers, starting from those given.
    let answers = RwSignal::new(
        label
            .rubric
            .as_ref()
            .map(|given| given.answers.clone())
            .unwrap_or_default(),
    );
    let focused = RwSignal::new(0usize);
    let change_answers = move || {
        edit.dispatch(EditLabel {
            label_id,
            verdict: String::new(),
            answers: serde_json::to_string(&answers.get_untracked()).unwrap_or_default(),
            rationale: rationale.get_untracked(),
        });
    };
    let edited = label
        .edited_at
        .map(|at| format!(" · changed {}", format_time(at)));
    view! {
        <section class="card own-label" data-testid="own-label" data-label-id=label_id.to_string()>
            <p class="hint">"Labelled " {format_time(label.created_at)} {edited}</p>
            <p data-testid="own-verdict">"You said " <strong>{match &label.pair {
                Some(pair) => pair.choice.words(),
                None => verdict_word(label.pass),
            }}</strong>
                {(!label.rationale.is_empty()).then(|| view! { ": " <span class="rationale">{label.rationale.clone()}</span> })}</p>
            <AnswersTable answers=label.answers.clone()/>
            {label.review.as_ref().map(|review| view! { <ReviewNote review=review.clone()/> })}
            <details>
                <summary>"The item"</summary>
                <ShownItemView shown images=label.images.clone() raw right=label.pair.as_ref().map(|pair| {
                    pair.right.right_shown.clone().unwrap_or_else(|| arbiter_domain::annotation::shown::ShownText {
                        raw: pair.right.right_output.clone(),
                        html: String::new(),
                    })
                })/>
            </details>
            {match (label.editable, label.rubric.clone()) {
                (Ok(()), Some(given)) => view! {
                    <details class="rubric" data-testid="change-answers">
                        <summary>"Change your answers"</summary>
                        <RubricForm rubric=given.rubric answers focused/>
                        <label>"Rationale"
                            <textarea rows="2" prop:value=move || rationale.get()
                                on:input=move |ev| rationale.set(event_target_value(&ev))></textarea>
                        </label>
                        <button class="pass" on:click=move |_| change_answers()>"Change the answers"</button>
                    </details>
                }.into_any(),
                (Ok(()), None) => view! {
                    <label>"Rationale"
                        <textarea rows="2" prop:value=move || rationale.get()
                            on:input=move |ev| rationale.set(event_target_value(&ev))></textarea>
                    </label>
                    <div class="row">
                        <button class="pass" on:click=move |_| change("pass")>"Change to pass"</button>
                        <button class="fail" on:click=move |_| change("fail")>"Change to fail"</button>
                    </div>
                }.into_any(),
                (Err(why), _) => view! { <p class="hint" data-testid="not-editable">{why}</p> }.into_any(),
            }}
        </section>
    }
}

/// What the reviewer decided, in words, with their reason.
#[component]
fn ReviewNote(review: ReviewOutcome) -> impl IntoView {
    let decision = match (review.decision.as_str(), review.corrected_to) {
        ("corrected", Some(pass)) => format!("A reviewer corrected it to {}", verdict_word(pass)),
        ("corrected", None) if review.corrected_choice.is_some() => format!(
            "A reviewer corrected it to {}",
            review.corrected_choice.map_or("", |choice| choice.words())
        ),
        ("rejected", _) => "A reviewer rejected it".to_string(),
        _ => "A reviewer accepted it".to_string(),
    };
    view! {
        <p data-testid="review-outcome" class="review-outcome">
            <strong>{decision}</strong>
            {(!review.reason.is_empty()).then(|| format!(": {}", review.reason))}
            <span class="hint">" (" {format_time(review.decided_at)} ")"</span>
        </p>
        {(!review.corrected_answers.is_empty()).then(|| view! {
            <p class="hint">"The reviewer's answers:"</p>
            <AnswersTable answers=review.corrected_answers.clone()/>
        })}
        {review.overturned_to.map(|(pass, reason)| view! {
            <p data-testid="review-overturned">
                "A second reviewer overturned that decision: the item is " <strong>{verdict_word(pass)}</strong>
                {(!reason.is_empty()).then(|| format!(" ({reason})"))}
            </p>
        })}
    }
}
