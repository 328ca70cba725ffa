//! The senior reviewer's page: one rater's label at a time, accepted, corrected or rejected
//! from the keyboard. Keys ([`KEYS`]): `a` accept, `1`/`2` correct to pass/fail, `x` reject (a
//! reason is required: the rater sees it), `r` reason, `n` next, `v` raw or rendered texts, `?`
//! every key; a rubric label can also be corrected dimension by dimension in its form, sent with
//! `c`. A rater's choice on a pair is reviewed the same way ([`PAIR_KEYS`]), corrected
//! with `1`–`4` to A better, B better, tie or both bad. When no label waits, a sample of other
//! reviewers' decisions comes up for a spot check: `a` upholds it, `1`/`2` overturn it with the
//! right verdict. Texts are rendered from HTML the server sanitised; the rater's rationale is
//! plain text.

use crate::annotation::api::{next_review, CheckReview, ReviewLabel, ReviewPreference};
use crate::annotation::rubric_form::{AnswersTable, RubricForm};
use crate::components::{error_text, plain_item, ErrorNote};
use crate::format::verdict_word;
use crate::keys::{CheatSheet, KeyBinding, KeyLegend, KeyMap};
use crate::shown::{RawToggle, ShownItemView};
use arbiter_domain::annotation::preference::Preference;
use arbiter_domain::annotation::review::ReviewCheck;
use arbiter_domain::annotation::rubric::RubricAnswer;
use leptos::html;
use leptos::prelude::*;

/// What is on screen: a label to review, or another reviewer's decision to check.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Current {
    Label(i64),
    /// A rater's choice on a pair, by its id.
    Preference(i64),
    Check(i64),
}

/// What a key does on the review page.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Key {
    Accept,
    CorrectToPass,
    CorrectToFail,
    /// A rubric label: send the answers as corrected in its form.
    CorrectAnswers,
    Reject,
    Reason,
    Next,
    Raw,
    Help,
    /// On a pair: the right choice.
    CorrectPair(Preference),
}

/// A review key map: the given accept and correction keys, then the keys every review page
/// shares.
macro_rules! review_key_map {
    ($($binding:expr),* $(,)?) => {
        KeyMap(&[
        $($binding,)*
        KeyBinding {
            keys: &["x"],
            action: Key::Reject,
            does: "reject (reason required)",
            in_legend: true,
        },
        KeyBinding {
            keys: &["r"],
            action: Key::Reason,
            does: "reason",
            in_legend: true,
        },
        KeyBinding {
            keys: &["n"],
            action: Key::Next,
            does: "next",
            in_legend: true,
        },
        KeyBinding {
            keys: &["v"],
            action: Key::Raw,
            does: "raw or rendered texts",
            in_legend: false,
        },
        KeyBinding {
            keys: &["?"],
            action: Key::Help,
            does: "all keys",
            in_legend: true,
        },
        ])
    };
}

pub(crate) static KEYS: KeyMap<Key> = review_key_map![
    KeyBinding {
        keys: &["a"],
        action: Key::Accept,
        does: "accept",
        in_legend: true,
    },
    KeyBinding {
        keys: &["1"],
        action: Key::CorrectToPass,
        does: "correct to pass",
        in_legend: true,
    },
    KeyBinding {
        keys: &["2"],
        action: Key::CorrectToFail,
        does: "correct to fail",
        in_legend: true,
    },
    KeyBinding {
        keys: &["c"],
        action: Key::CorrectAnswers,
        does: "correct a rubric label's answers as set in its form",
        in_legend: false,
    },
];

/// The keys while a rater's choice on a pair is on screen.
pub(crate) static PAIR_KEYS: KeyMap<Key> = review_key_map![
    KeyBinding {
        keys: &["a"],
        action: Key::Accept,
        does: "accept",
        in_legend: true,
    },
    KeyBinding {
        keys: &["1"],
        action: Key::CorrectPair(Preference::A),
        does: "correct to A is better",
        in_legend: true,
    },
    KeyBinding {
        keys: &["2"],
        action: Key::CorrectPair(Preference::B),
        does: "correct to B is better",
        in_legend: true,
    },
    KeyBinding {
        keys: &["3"],
        action: Key::CorrectPair(Preference::Tie),
        does: "correct to tie",
        in_legend: true,
    },
    KeyBinding {
        keys: &["4"],
        action: Key::CorrectPair(Preference::BothBad),
        does: "correct to both bad",
        in_legend: true,
    },
];

#[component]
pub fn ReviewPage() -> impl IntoView {
    let tick = RwSignal::new(0u64);
    let item = Resource::new(move || tick.get(), |_| next_review());
    let decide = ServerAction::<ReviewLabel>::new();
    let decide_pair = ServerAction::<ReviewPreference>::new();
    let check = ServerAction::<CheckReview>::new();
    let current = RwSignal::new(None::<Current>);
    let reason = RwSignal::new(String::new());
    let notice = RwSignal::new(None::<String>);
    let reason_box = NodeRef::<html::Input>::new();
    let raw = RwSignal::new(false);
    let help = RwSignal::new(false);
    // A rubric label's answers as the reviewer corrects them (starting from the rater's).
    let corrected = RwSignal::new(RubricAnswer::new());
    let focused = RwSignal::new(0usize);

    // `decision` is accept, correct (with a verdict, or a pair's choice) or reject; on a spot
    // check accept upholds the other reviewer and a correction overturns them.
    let send = move |decision: &str, verdict: &str| match current.get_untracked() {
        Some(Current::Preference(label_id)) => {
            decide_pair.dispatch(ReviewPreference {
                label_id,
                decision: decision.to_string(),
                choice: verdict.to_string(),
                reason: reason.get_untracked(),
            });
        }
        Some(Current::Label(label_id)) => {
            decide.dispatch(ReviewLabel {
                label_id,
                decision: decision.to_string(),
                verdict: verdict.to_string(),
                answers: String::new(),
                reason: reason.get_untracked(),
            });
        }
        Some(Current::Check(review_id)) => {
            let decision = match decision {
                "accept" => "uphold",
                "correct" => "overturn",
                _ => {
                    notice.set(Some(
                        "On a spot check, uphold the decision (a) or overturn it with the right verdict (1 or 2)."
                            .into(),
                    ));
                    return;
                }
            };
            check.dispatch(CheckReview {
                review_id,
                decision: decision.to_string(),
                verdict: verdict.to_string(),
                reason: reason.get_untracked(),
            });
        }
        None => {}
    };
    let send_answers = move || {
        if corrected.with_untracked(RubricAnswer::is_empty) {
            notice.set(Some(
                "This label answers pass or fail: correct it with 1 or 2.".into(),
            ));
            return;
        }
        if let Some(Current::Label(label_id)) = current.get_untracked() {
            decide.dispatch(ReviewLabel {
                label_id,
                decision: "correct".into(),
                verdict: String::new(),
                answers: serde_json::to_string(&corrected.get_untracked()).unwrap_or_default(),
                reason: reason.get_untracked(),
            });
        }
    };
    let after = move |result: Option<Result<(), ServerFnError>>| match result {
        Some(Ok(())) => {
            notice.set(Some("Decision saved.".into()));
            reason.set(String::new());
            tick.update(|tick| *tick += 1);
        }
        Some(Err(err)) => notice.set(Some(error_text(&err))),
        None => {}
    };
    Effect::new(move |_| after(decide.value().get()));
    Effect::new(move |_| after(decide_pair.value().get()));
    Effect::new(move |_| after(check.value().get()));

    #[cfg(feature = "hydrate")]
    crate::components::keyboard_shortcuts(move |key, event| {
        let keys = match current.get_untracked() {
            Some(Current::Preference(_)) => &PAIR_KEYS,
            _ => &KEYS,
        };
        match keys.action(key) {
            Some(Key::Accept) => send("accept", ""),
            Some(Key::CorrectPair(choice)) => send("correct", choice.as_str()),
            Some(Key::CorrectAnswers) => send_answers(),
            Some(Key::CorrectToPass) => send("correct", "pass"),
            Some(Key::CorrectToFail) => send("correct", "fail"),
            Some(Key::Reject) => send("reject", ""),
            Some(Key::Next) => tick.update(|tick| *tick += 1),
            Some(Key::Reason) => {
                if let Some(input) = reason_box.get_untracked() {
                    event.prevent_default();
                    let _ = input.focus();
                }
            }
            Some(Key::Raw) => raw.update(|raw| *raw = !*raw),
            Some(Key::Help) => help.update(|open| *open = !*open),
            None => {}
        }
    });

    view! {
        <h1>"Review labels"</h1>
        {move || if matches!(current.get(), Some(Current::Preference(_))) {
            view! {
                <KeyLegend legend=PAIR_KEYS.legend(true)/>
                <CheatSheet legend=PAIR_KEYS.legend(false) open=help/>
            }.into_any()
        } else {
            view! {
                <KeyLegend legend=KEYS.legend(true)/>
                <CheatSheet legend=KEYS.legend(false) open=help/>
            }.into_any()
        }}
        {move || notice.get().map(|message| view! { <p class="notice" role="status" data-testid="notice">{message}</p> })}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match item.await {
                    Ok(Some(item)) => {
                        let shown = item.shown.clone().unwrap_or_else(|| plain_item(&item.input, &item.target, &item.output));
                        let reason_input = view! {
                            <input node_ref=reason_box maxlength="2000"
                                prop:value=move || reason.get()
                                on:input=move |ev| reason.set(event_target_value(&ev))/>
                        };
                        if let Some(pair) = item.pair.clone() {
                            current.set(Some(Current::Preference(item.label_id)));
                            let right = pair.right.right_shown.clone().unwrap_or_else(|| arbiter_domain::annotation::shown::ShownText {
                                raw: pair.right.right_output.clone(),
                                html: String::new(),
                            });
                            return view! {
                                <section class="card task" data-testid="review-pair" data-label-id=item.label_id.to_string()>
                                    <p class="hint">{item.why}</p>
                                    <RawToggle raw/>
                                    <ShownItemView shown=shown.clone() images=item.images.clone() raw right=Some(right)/>
                                    <h2>"The preference"</h2>
                                    <p data-testid="review-label"><strong>{item.rater}</strong> " said " <strong>{pair.choice.words()}</strong></p>
                                <AnswersTable answers=item.answers.clone()/>
                                    <pre class="rationale" data-testid="review-rationale">{item.rationale}</pre>
                                    <label>"Reason (required to reject; the rater sees it)" {reason_input}</label>
                                    <div class="row">
                                        <button class="pass" on:click=move |_| send("accept", "")>"Accept " <kbd>"a"</kbd></button>
                                        {Preference::ALL.into_iter().zip(["1", "2", "3", "4"]).map(|(choice, key)| view! {
                                            <button on:click=move |_| send("correct", choice.as_str())>
                                                {format!("Correct to {} ", choice.words())} <kbd>{key}</kbd>
                                            </button>
                                        }).collect_view()}
                                        <button class="fail" on:click=move |_| send("reject", "")>"Reject " <kbd>"x"</kbd></button>
                                    </div>
                                </section>
                            }.into_any();
                        }
                        match item.check {
                            Some(spot) => {
                                current.set(Some(Current::Check(spot.review_id)));
                                view! {
                                    <section class="card task" data-testid="spot-check" data-review-id=spot.review_id.to_string()>
                                        <p class="hint">{item.why}</p>
                                        <RawToggle raw/>
                                        <ShownItemView shown=shown.clone() images=item.images.clone() raw/>
                                        <h2>"The label and the decision to check"</h2>
                                        <p><strong>{item.rater}</strong> " said " <strong>{verdict_word(item.pass)}</strong></p>
                                        <AnswersTable answers=item.answers.clone()/>
                                        <pre class="rationale" data-testid="review-rationale">{item.rationale}</pre>
                                        <p data-testid="checked-decision">"Reviewer " <strong>{spot.reviewer.clone()}</strong> " " {decision_in_words(&spot)}
                                            {(!spot.reason.is_empty()).then(|| format!(": {}", spot.reason))}</p>
                                        <label>"Reason (optional; the reviewer sees it)" {reason_input}</label>
                                        <div class="row">
                                            <button class="pass" on:click=move |_| send("accept", "")>"Uphold " <kbd>"a"</kbd></button>
                                            <button on:click=move |_| send("correct", "pass")>"Overturn: pass " <kbd>"1"</kbd></button>
                                            <button on:click=move |_| send("correct", "fail")>"Overturn: fail " <kbd>"2"</kbd></button>
                                        </div>
                                    </section>
                                }.into_any()
                            }
                            None => {
                                current.set(Some(Current::Label(item.label_id)));
                                corrected.set(RubricAnswer::new());
                                let correction_form = item.rubric.clone().map(|given| {
                                    corrected.set(given.answers.clone());
                                    focused.set(0);
                                    view! {
                                        <details class="rubric review-correction" data-testid="correct-answers">
                                            <summary>"Correct the answers dimension by dimension"</summary>
                                            <div class="rubric-form"><RubricForm rubric=given.rubric answers=corrected focused/></div>
                                            <button on:click=move |_| send_answers()>"Correct the answers " <kbd>"c"</kbd></button>
                                        </details>
                                    }
                                });
                                view! {
                                    <section class="card task" data-testid="review" data-label-id=item.label_id.to_string()>
                                        <p class="hint">{item.why}</p>
                                        <RawToggle raw/>
                                        <ShownItemView shown=shown.clone() images=item.images.clone() raw/>
                                        <h2>"The label"</h2>
                                        <p data-testid="review-label"><strong>{item.rater}</strong> " said " <strong>{verdict_word(item.pass)}</strong></p>
                                        <AnswersTable answers=item.answers.clone()/>
                                        <pre class="rationale" data-testid="review-rationale">{item.rationale}</pre>
                                        {correction_form}
                                        <label>"Reason (required to reject; the rater sees it)" {reason_input}</label>
                                        <div class="row">
                                            <button class="pass" on:click=move |_| send("accept", "")>"Accept " <kbd>"a"</kbd></button>
                                            <button on:click=move |_| send("correct", "pass")>"Correct to pass " <kbd>"1"</kbd></button>
                                            <button on:click=move |_| send("correct", "fail")>"Correct to fail " <kbd>"2"</kbd></button>
                                            <button class="fail" on:click=move |_| send("reject", "")>"Reject " <kbd>"x"</kbd></button>
                                        </div>
                                    </section>
                                }.into_any()
                            }
                        }
                    }
                    Ok(None) => {
                        current.set(None);
                        view! {
                            <section class="card" data-testid="review-empty">
                                <p>"No labels or decisions are waiting for review. Press " <kbd>"n"</kbd> " to check again."</p>
                            </section>
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// A reviewer's decision in words: "accepted the label", "corrected it to fail", "rejected the
/// label".
fn decision_in_words(check: &ReviewCheck) -> &'static str {
    match (check.decision.as_str(), check.corrected_to) {
        ("corrected", Some(true)) => "corrected it to pass",
        ("corrected", _) => "corrected it to fail",
        ("accepted", _) => "accepted the label",
        _ => "rejected the label",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_key_is_bound_twice() {
        assert!(super::KEYS.clashes().is_empty());
        assert!(super::PAIR_KEYS.clashes().is_empty());
    }
}
