//! The annotator's page: one item at a time, labelled from the keyboard.
//!
//! Keys ([`KEYS`]): `1`/`p` pass, `2`/`f` fail, `s` skip, `n` next item, `r` write a rationale
//! (Escape leaves the text box), `v` raw or rendered texts, `?` every key. An item that asks a
//! rubric has its own keys ([`RUBRIC_KEYS`]): digits pick a level of the focused dimension,
//! arrows move between dimensions, Enter submits; its guidelines are shown beside the item,
//! and the label records their version. A pair shows two outputs side by side as A and B
//! ([`PAIR_KEYS`]): `a`, `b`, `t` (tie) or `x` (both bad). The rater is blind:
//! no model, checkpoint or grader verdict is shown. Texts are rendered as people read them
//! (markdown, code, conversations) from HTML the server sanitised. Gold items look like any
//! other item; only a rater in training is told, and sees the right answer after each label.

use crate::annotation::api::{
    next_task, SkipTask, SubmitLabel, SubmitRubricLabel, TaskView, TrainingFeedbackView,
};
use crate::annotation::preferences::SubmitPreference;
#[cfg(feature = "hydrate")]
use crate::annotation::rubric_form::{one_pick, pick, record, typed};
use crate::annotation::rubric_form::{GuidelinesPanel, RubricForm};
use crate::components::{error_text, plain_item, ErrorNote};
use crate::keys::{CheatSheet, KeyBinding, KeyLegend, KeyMap};
use crate::shown::{RawToggle, ShownItemView};
use arbiter_domain::annotation::gold::GoldAnswer;
use arbiter_domain::annotation::preference::{DimensionChoices, Preference};
use arbiter_domain::annotation::rubric::{Rubric, RubricAnswer};
use arbiter_domain::annotation::task::ClaimHandle;
use leptos::html;
use leptos::prelude::*;

/// What a key does on the annotate page.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Key {
    Pass,
    Fail,
    Skip,
    Next,
    Rationale,
    Raw,
    Help,
}

pub(crate) static KEYS: KeyMap<Key> = KeyMap(&[
    KeyBinding {
        keys: &["1", "p"],
        action: Key::Pass,
        does: "pass",
        in_legend: true,
    },
    KeyBinding {
        keys: &["2", "f"],
        action: Key::Fail,
        does: "fail",
        in_legend: true,
    },
    KeyBinding {
        keys: &["s"],
        action: Key::Skip,
        does: "skip",
        in_legend: true,
    },
    KeyBinding {
        keys: &["n"],
        action: Key::Next,
        does: "next item",
        in_legend: true,
    },
    KeyBinding {
        keys: &["r"],
        action: Key::Rationale,
        does: "rationale (Esc to leave it)",
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
]);

/// What a key does on an item that asks a rubric.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RubricKey {
    Pick,
    NextDimension,
    PreviousDimension,
    Submit,
    Skip,
    Next,
    Rationale,
    Raw,
    Help,
}

pub(crate) static RUBRIC_KEYS: KeyMap<RubricKey> = KeyMap(&[
    KeyBinding {
        keys: &["1", "2", "3", "4", "5", "6", "7", "8", "9", "0"],
        action: RubricKey::Pick,
        does: "pick a level of the focused dimension",
        in_legend: true,
    },
    KeyBinding {
        keys: &["ArrowDown", "ArrowRight"],
        action: RubricKey::NextDimension,
        does: "next dimension",
        in_legend: true,
    },
    KeyBinding {
        keys: &["ArrowUp", "ArrowLeft"],
        action: RubricKey::PreviousDimension,
        does: "previous dimension",
        in_legend: true,
    },
    KeyBinding {
        keys: &["Enter"],
        action: RubricKey::Submit,
        does: "submit the label",
        in_legend: true,
    },
    KeyBinding {
        keys: &["s"],
        action: RubricKey::Skip,
        does: "skip",
        in_legend: true,
    },
    KeyBinding {
        keys: &["n"],
        action: RubricKey::Next,
        does: "next item",
        in_legend: false,
    },
    KeyBinding {
        keys: &["r"],
        action: RubricKey::Rationale,
        does: "rationale (Esc to leave it)",
        in_legend: true,
    },
    KeyBinding {
        keys: &["v"],
        action: RubricKey::Raw,
        does: "raw or rendered texts",
        in_legend: false,
    },
    KeyBinding {
        keys: &["?"],
        action: RubricKey::Help,
        does: "all keys",
        in_legend: true,
    },
]);

/// What a key does on a pair of outputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PairKey {
    A,
    B,
    Tie,
    BothBad,
    Skip,
    Next,
    Rationale,
    Raw,
    Help,
    NextDimension,
    PreviousDimension,
}

pub(crate) static PAIR_KEYS: KeyMap<PairKey> = KeyMap(&[
    KeyBinding {
        keys: &["a"],
        action: PairKey::A,
        does: "A is better",
        in_legend: true,
    },
    KeyBinding {
        keys: &["b"],
        action: PairKey::B,
        does: "B is better",
        in_legend: true,
    },
    KeyBinding {
        keys: &["t"],
        action: PairKey::Tie,
        does: "tie",
        in_legend: true,
    },
    KeyBinding {
        keys: &["x"],
        action: PairKey::BothBad,
        does: "both bad",
        in_legend: true,
    },
    KeyBinding {
        keys: &["ArrowDown", "ArrowRight"],
        action: PairKey::NextDimension,
        does: "next dimension (a pair compared per dimension)",
        in_legend: false,
    },
    KeyBinding {
        keys: &["ArrowUp", "ArrowLeft"],
        action: PairKey::PreviousDimension,
        does: "previous dimension",
        in_legend: false,
    },
    KeyBinding {
        keys: &["s"],
        action: PairKey::Skip,
        does: "skip",
        in_legend: true,
    },
    KeyBinding {
        keys: &["n"],
        action: PairKey::Next,
        does: "next item",
        in_legend: false,
    },
    KeyBinding {
        keys: &["r"],
        action: PairKey::Rationale,
        does: "rationale (Esc to leave it)",
        in_legend: true,
    },
    KeyBinding {
        keys: &["v"],
        action: PairKey::Raw,
        does: "raw or rendered texts",
        in_legend: false,
    },
    KeyBinding {
        keys: &["?"],
        action: PairKey::Help,
        does: "all keys",
        in_legend: true,
    },
]);

/// The rubric on screen and the rater's answers so far.
#[derive(Clone)]
struct RubricState {
    // Read by the key handler, which only the browser build has.
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    rubric: Rubric,
    guideline_version: Option<i64>,
}

#[component]
pub fn AnnotatePage() -> impl IntoView {
    let tick = RwSignal::new(0u64);
    let task = Resource::new(move || tick.get(), |_| next_task());
    let submit = ServerAction::<SubmitLabel>::new();
    let submit_rubric = ServerAction::<SubmitRubricLabel>::new();
    let skip = ServerAction::<SkipTask>::new();
    let prefer = ServerAction::<SubmitPreference>::new();
    // Set while the item on screen is a pair of outputs.
    let pair = RwSignal::new(false);
    // A pair compared per dimension: its dimensions (key, question) and the choices so far.
    let pair_dimensions = RwSignal::new(Vec::<(String, String)>::new());
    let pair_choices = RwSignal::new(DimensionChoices::new());
    // Set while the item on screen asks a rubric.
    let rubric = RwSignal::new(None::<RubricState>);
    let answers = RwSignal::new(RubricAnswer::new());
    let focused = RwSignal::new(0usize);
    let current = RwSignal::new(None::<ClaimHandle>);
    let rationale = RwSignal::new(String::new());
    let notice = RwSignal::new(None::<String>);
    let rationale_box = NodeRef::<html::Textarea>::new();
    let raw = RwSignal::new(false);
    let help = RwSignal::new(false);

    let label = move |verdict: &str| {
        if let Some(handle) = current.get_untracked() {
            submit.dispatch(SubmitLabel {
                handle,
                verdict: verdict.to_string(),
                rationale: rationale.get_untracked(),
            });
        }
    };
    let submit_answers = move || {
        if let (Some(handle), Some(state)) = (current.get_untracked(), rubric.get_untracked()) {
            submit_rubric.dispatch(SubmitRubricLabel {
                handle,
                answers: serde_json::to_string(&answers.get_untracked()).unwrap_or_default(),
                rationale: rationale.get_untracked(),
                guideline_version: state.guideline_version,
            });
        }
    };
    // Sends the overall choice with the choices per dimension, once every dimension has one.
    let send_pair = move |choice: Preference| {
        let dimensions = pair_dimensions.get_untracked();
        let unanswered = dimensions
            .iter()
            .position(|(key, _)| !pair_choices.with_untracked(|choices| choices.contains_key(key)));
        if let Some(index) = unanswered {
            notice.set(Some(format!(
                "Say which output is better on “{}” first.",
                dimensions[index].1
            )));
            focused.set(index);
            return;
        }
        if let Some(handle) = current.get_untracked() {
            prefer.dispatch(SubmitPreference {
                handle,
                choice: choice.as_str().to_string(),
                dimensions: if dimensions.is_empty() {
                    String::new()
                } else {
                    serde_json::to_string(&pair_choices.get_untracked()).unwrap_or_default()
                },
                rationale: rationale.get_untracked(),
            });
        }
    };
    // A key answers the focused row of a pair asked per dimension (its dimensions, then
    // overall) and moves on; otherwise, like the buttons, it sends the choice.
    #[cfg(feature = "hydrate")]
    let choose = move |choice: Preference| {
        let row = focused.get_untracked();
        let key = pair_dimensions.with_untracked(|rows| rows.get(row).map(|(key, _)| key.clone()));
        match key {
            Some(key) => {
                pair_choices.update(|choices| {
                    choices.insert(key, choice);
                });
                focused.set(row + 1);
            }
            None => send_pair(choice),
        }
    };
    let skip_current = move || {
        if let Some(handle) = current.get_untracked() {
            skip.dispatch(SkipTask { handle });
        }
    };
    // After a label or a skip lands, move on (or say why not). One effect per action, so each
    // reports only its own latest result.
    let after = move |result: Result<(), ServerFnError>, done: &str| match result {
        Ok(()) => {
            notice.set(Some(done.to_string()));
            rationale.set(String::new());
            tick.update(|tick| *tick += 1);
        }
        Err(err) => notice.set(Some(error_text(&err))),
    };
    // A label's result: on a gold item in training, what the rater learns.
    let after_label = move |result: Result<Option<TrainingFeedbackView>, ServerFnError>,
                            saved: &str| {
        let done = match &result {
            Ok(Some(feedback)) => training_message(feedback),
            _ => saved.to_string(),
        };
        after(result.map(|_| ()), &done);
    };
    Effect::new(move |_| {
        if let Some(result) = submit.value().get() {
            after_label(result, "Label saved.");
        }
    });
    Effect::new(move |_| {
        if let Some(result) = submit_rubric.value().get() {
            after_label(result, "Label saved.");
        }
    });
    Effect::new(move |_| {
        if let Some(result) = prefer.value().get() {
            after_label(result, "Preference saved.");
        }
    });
    Effect::new(move |_| {
        if let Some(result) = skip.value().get() {
            after(result, "Skipped.");
        }
    });

    #[cfg(feature = "hydrate")]
    let focus_rationale = move |event: &leptos::ev::KeyboardEvent| {
        if let Some(textarea) = rationale_box.get_untracked() {
            event.prevent_default();
            let _ = textarea.focus();
        }
    };
    // Moves the focus to another dimension; a typed one gets the keyboard in its field.
    #[cfg(feature = "hydrate")]
    let move_focus = move |step: isize| {
        let Some(state) = rubric.get_untracked() else {
            return;
        };
        let last = state.rubric.dimensions.len().saturating_sub(1) as isize;
        let next = (focused.get_untracked() as isize + step).clamp(0, last) as usize;
        focused.set(next);
        if typed(&state.rubric.dimensions[next].kind) {
            focus_field(&state.rubric.dimensions[next].key);
        }
    };
    #[cfg(feature = "hydrate")]
    crate::components::keyboard_shortcuts(move |key, event| {
        if pair.get_untracked() {
            match PAIR_KEYS.action(key) {
                Some(PairKey::A) => choose(Preference::A),
                Some(PairKey::B) => choose(Preference::B),
                Some(PairKey::Tie) => choose(Preference::Tie),
                Some(PairKey::BothBad) => choose(Preference::BothBad),
                // Arrows move between the rows of a pair asked per dimension (and scroll
                // otherwise).
                Some(PairKey::NextDimension)
                    if pair_dimensions.with_untracked(|rows| !rows.is_empty()) =>
                {
                    event.prevent_default();
                    let last = pair_dimensions.with_untracked(Vec::len);
                    focused.update(|row| *row = (*row + 1).min(last));
                }
                Some(PairKey::PreviousDimension)
                    if pair_dimensions.with_untracked(|rows| !rows.is_empty()) =>
                {
                    event.prevent_default();
                    focused.update(|row| *row = row.saturating_sub(1));
                }
                Some(PairKey::NextDimension | PairKey::PreviousDimension) => {}
                Some(PairKey::Skip) => skip_current(),
                Some(PairKey::Next) => tick.update(|tick| *tick += 1),
                Some(PairKey::Rationale) => focus_rationale(event),
                Some(PairKey::Raw) => raw.update(|raw| *raw = !*raw),
                Some(PairKey::Help) => help.update(|open| *open = !*open),
                None => {}
            }
            return;
        }
        if rubric.with_untracked(Option::is_some) {
            match RUBRIC_KEYS.action(key) {
                Some(RubricKey::Pick) => {
                    let Some(state) = rubric.get_untracked() else {
                        return;
                    };
                    let Some(dimension) = state.rubric.dimensions.get(focused.get_untracked())
                    else {
                        return;
                    };
                    let current =
                        answers.with_untracked(|answers| answers.get(&dimension.key).cloned());
                    if let Some(answer) = pick(&dimension.kind, key, current.as_ref()) {
                        // The digit is the answer: it must not also land in a field the focus
                        // moves into next.
                        event.prevent_default();
                        answers.update(|answers| record(answers, &dimension.key, Some(answer)));
                        if one_pick(&dimension.kind) {
                            move_focus(1);
                        }
                    } else if typed(&dimension.kind) {
                        // The digit starts the number or text in the dimension's field.
                        focus_field(&dimension.key);
                    }
                }
                Some(RubricKey::NextDimension) => {
                    event.prevent_default();
                    move_focus(1);
                }
                Some(RubricKey::PreviousDimension) => {
                    event.prevent_default();
                    move_focus(-1);
                }
                Some(RubricKey::Submit) => {
                    event.prevent_default();
                    submit_answers();
                }
                Some(RubricKey::Skip) => skip_current(),
                Some(RubricKey::Next) => tick.update(|tick| *tick += 1),
                Some(RubricKey::Rationale) => focus_rationale(event),
                Some(RubricKey::Raw) => raw.update(|raw| *raw = !*raw),
                Some(RubricKey::Help) => help.update(|open| *open = !*open),
                None => {}
            }
            return;
        }
        match KEYS.action(key) {
            Some(Key::Pass) => label("pass"),
            Some(Key::Fail) => label("fail"),
            Some(Key::Skip) => skip_current(),
            Some(Key::Next) => tick.update(|tick| *tick += 1),
            Some(Key::Rationale) => focus_rationale(event),
            Some(Key::Raw) => raw.update(|raw| *raw = !*raw),
            Some(Key::Help) => help.update(|open| *open = !*open),
            None => {}
        }
    });

    view! {
        <h1>"Annotate"</h1>
        {move || if pair.get() {
            view! {
                <KeyLegend legend=PAIR_KEYS.legend(true)/>
                <CheatSheet legend=PAIR_KEYS.legend(false) open=help/>
            }.into_any()
        } else if rubric.with(Option::is_some) {
            view! {
                <KeyLegend legend=RUBRIC_KEYS.legend(true)/>
                <CheatSheet legend=RUBRIC_KEYS.legend(false) open=help/>
            }.into_any()
        } else {
            view! {
                <KeyLegend legend=KEYS.legend(true)/>
                <CheatSheet legend=KEYS.legend(false) open=help/>
            }.into_any()
        }}
        <p class="hint"><a href="/annotate/mine">"My labels"</a>": reviewers' corrections, and labels you can still change."</p>
        {move || notice.get().map(|message| view! { <p class="notice" role="status" data-testid="notice">{message}</p> })}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match task.await {
                    Ok(Some(TaskView { task, item_id, remaining })) => {
                        current.set(Some(task.handle.clone()));
                        pair.set(task.pair.is_some());
                        pair_choices.set(DimensionChoices::new());
                        pair_dimensions.set(match (&task.pair, &task.rubric) {
                            (Some(_), Some(asked)) => asked
                                .version
                                .rubric
                                .dimensions
                                .iter()
                                .map(|dimension| (dimension.key.clone(), dimension.question.clone()))
                                .collect(),
                            _ => Vec::new(),
                        });
                        answers.set(RubricAnswer::new());
                        focused.set(0);
                        rubric.set(task.rubric.as_ref().map(|asked| RubricState {
                            rubric: asked.version.rubric.clone(),
                            guideline_version: asked.guidelines.as_ref().map(|guidelines| guidelines.version),
                        }));
                        let right = task.pair.as_ref().map(|pair| {
                            pair.right_shown.clone().unwrap_or_else(|| arbiter_domain::annotation::shown::ShownText {
                                raw: pair.right_output.clone(),
                                html: String::new(),
                            })
                        });
                        let questions = match task.rubric.clone() {
                            Some(asked) if task.pair.is_some() => view! {
                                <GuidelinesPanel rubric=asked.clone()/>
                                <p>"Which output is better on each dimension, then overall? Judge the answers, not their position. "
                                    <kbd>"a"</kbd>" "<kbd>"b"</kbd>" "<kbd>"t"</kbd>" "<kbd>"x"</kbd>" answer the highlighted row; arrows move between rows."</p>
                                <PairDimensions dimensions=pair_dimensions choices=pair_choices focused/>
                            }.into_any(),
                            _ if task.pair.is_some() => view! {
                                <p>"Which output answers the question better? Judge the answers, not their position."</p>
                            }.into_any(),
                            Some(asked) => view! {
                                <GuidelinesPanel rubric=asked.clone()/>
                                <div class="rubric" data-testid="rubric-form" data-rubric=asked.version.name.clone()>
                                    <RubricForm rubric=asked.version.rubric answers focused/>
                                </div>
                            }.into_any(),
                            None => view! { <p>"Is the model's final answer correct?"</p> }.into_any(),
                        };
                        let buttons = if task.pair.is_some() {
                            view! {
                                <button class="pass" on:click=move |_| send_pair(Preference::A)>"A is better " <kbd>"a"</kbd></button>
                                <button class="pass" on:click=move |_| send_pair(Preference::B)>"B is better " <kbd>"b"</kbd></button>
                                <button class="secondary" on:click=move |_| send_pair(Preference::Tie)>"Tie " <kbd>"t"</kbd></button>
                                <button class="fail" on:click=move |_| send_pair(Preference::BothBad)>"Both bad " <kbd>"x"</kbd></button>
                            }.into_any()
                        } else if task.rubric.is_some() {
                            view! {
                                <button class="pass" on:click=move |_| submit_answers()>"Submit " <kbd>"Enter"</kbd></button>
                            }.into_any()
                        } else {
                            view! {
                                <button class="pass" on:click=move |_| label("pass")>"Pass " <kbd>"1"</kbd></button>
                                <button class="fail" on:click=move |_| label("fail")>"Fail " <kbd>"2"</kbd></button>
                            }.into_any()
                        };
                        let training = task.training.then(|| view! {
                            <p class="notice" data-testid="training">
                                "Training: these items have known answers. After each label you see the right one; "
                                "once enough of your latest labels are right, you label real items."
                            </p>
                        });
                        view! {
                            {training}
                            <section class="card task" data-testid="task" data-claim=task.handle.to_string()>
                                <p class="hint">
                                    {remaining} " items in the queue"
                                    {item_id.map(|id| view! { " · item " <span data-testid="item-id">{id.get()}</span> })}
                                </p>
                                <RawToggle raw/>
                                <ShownItemView
                                    shown=task.shown.unwrap_or_else(|| plain_item(&task.input, &task.target, &task.output))
                                    images=task.images raw right/>
                                {questions}
                                <label>
                                    "Rationale (optional)"
                                    <textarea node_ref=rationale_box rows="2"
                                        prop:value=move || rationale.get()
                                        on:input=move |ev| rationale.set(event_target_value(&ev))></textarea>
                                </label>
                                <div class="row">
                                    {buttons}
                                    <button class="secondary" on:click=move |_| skip_current()>"Skip " <kbd>"s"</kbd></button>
                                </div>
                            </section>
                        }.into_any()
                    }
                    Ok(None) => {
                        current.set(None);
                        pair.set(false);
                        pair_dimensions.set(Vec::new());
                        rubric.set(None);
                        view! {
                            <section class="card" data-testid="queue-empty">
                                <p>"The queue is empty. Press " <kbd>"n"</kbd> " to check again."</p>
                            </section>
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// A pair compared per dimension: one row per dimension with the rater's choice so far, then
/// the overall row (answered by the buttons below it), the focused row highlighted.
#[component]
fn PairDimensions(
    dimensions: RwSignal<Vec<(String, String)>>,
    choices: RwSignal<DimensionChoices>,
    focused: RwSignal<usize>,
) -> impl IntoView {
    view! {
        <table class="pair-dimensions" data-testid="pair-dimensions">
            <tbody>
                {move || dimensions.get().into_iter().enumerate().map(|(index, (key, question))| {
                    let chosen = {
                        let key = key.clone();
                        move || choices.with(|choices| choices.get(&key).map(|choice| choice.words()).unwrap_or("—"))
                    };
                    let buttons = Preference::ALL.map(|choice| {
                        let key = key.clone();
                        view! {
                            <button class="secondary" on:click=move |ev| {
                                // Not the row's own click too, which would focus it again.
                                ev.stop_propagation();
                                choices.update(|choices| { choices.insert(key.clone(), choice); });
                                focused.set(index + 1);
                            }>{choice.words()}</button>
                        }
                    });
                    view! {
                        <tr data-testid="pair-dimension" data-key=key.clone()
                            class:focused=move || focused.get() == index on:click=move |_| focused.set(index)>
                            <th>{question}</th>
                            <td data-testid="pair-dimension-choice"><strong>{chosen}</strong></td>
                            <td>{buttons.into_iter().collect_view()}</td>
                        </tr>
                    }
                }).collect_view()}
                <tr data-testid="pair-dimension" data-key="overall"
                    class:focused={move || focused.get() >= dimensions.with(Vec::len)}>
                    <th>"Overall (sends the answers)"</th><td></td><td></td>
                </tr>
            </tbody>
        </table>
    }
}

/// What a rater in training reads after a label.
fn training_message(TrainingFeedbackView { feedback, out_of }: &TrainingFeedbackView) -> String {
    let answer = match feedback.answer {
        GoldAnswer::Pair(choice) => format!("the right choice: {}", choice.words()),
        verdict => format!("the answer is {}", verdict.words()),
    };
    let verdict = if feedback.correct {
        format!("Right: {answer}.")
    } else {
        format!("Not quite: {answer}.")
    };
    let note = if feedback.note.is_empty() {
        String::new()
    } else {
        format!(" {}", feedback.note)
    };
    let progress = if feedback.graduated {
        " You passed training: from now on you label real items.".to_string()
    } else {
        format!(
            " {} of your latest {} training labels are right.",
            feedback.latest_right, out_of
        )
    };
    format!("{verdict}{note}{progress}")
}

/// Puts the keyboard in a typed dimension's field (a number or text).
#[cfg(feature = "hydrate")]
fn focus_field(key: &str) {
    use leptos::wasm_bindgen::JsCast;
    let field = document()
        .query_selector(&format!("[data-testid='dimension-{key}'] .dimension-field"))
        .ok()
        .flatten()
        .and_then(|element| element.dyn_into::<leptos::web_sys::HtmlElement>().ok());
    if let Some(field) = field {
        let _ = field.focus();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_key_is_bound_twice() {
        assert!(super::KEYS.clashes().is_empty());
        assert!(super::RUBRIC_KEYS.clashes().is_empty());
        assert!(super::PAIR_KEYS.clashes().is_empty());
    }
}
