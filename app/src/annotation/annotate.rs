//! The annotator's page: one item at a time, labelled from the keyboard.
//!
//! Keys ([`KEYS`]): `1`/`p` pass, `2`/`f` fail, `s` skip, `n` next item, `r` write a rationale
//! (Escape leaves the text box), `v` raw or rendered texts, `?` every key. The rater is blind:
//! no model, checkpoint or grader verdict is shown. Texts are rendered as people read them
//! (markdown, code, conversations) from HTML the server sanitised. Gold items look like any
//! other item; only a rater in training is told, and sees the right answer after each label.

use crate::annotation::api::{next_task, SkipTask, SubmitLabel, TaskView, TrainingFeedbackView};
use crate::components::{error_text, plain_item, ErrorNote};
use crate::format::verdict_word;
use crate::keys::{CheatSheet, KeyBinding, KeyLegend, KeyMap};
use crate::shown::{RawToggle, ShownItemView};
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

#[component]
pub fn AnnotatePage() -> impl IntoView {
    let tick = RwSignal::new(0u64);
    let task = Resource::new(move || tick.get(), |_| next_task());
    let submit = ServerAction::<SubmitLabel>::new();
    let skip = ServerAction::<SkipTask>::new();
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
    Effect::new(move |_| {
        if let Some(result) = submit.value().get() {
            let done = match &result {
                Ok(Some(feedback)) => training_message(feedback),
                _ => "Label saved.".to_string(),
            };
            after(result.map(|_| ()), &done);
        }
    });
    Effect::new(move |_| {
        if let Some(result) = skip.value().get() {
            after(result, "Skipped.");
        }
    });

    #[cfg(feature = "hydrate")]
    crate::components::keyboard_shortcuts(move |key, event| match KEYS.action(key) {
        Some(Key::Pass) => label("pass"),
        Some(Key::Fail) => label("fail"),
        Some(Key::Skip) => skip_current(),
        Some(Key::Next) => tick.update(|tick| *tick += 1),
        Some(Key::Rationale) => {
            if let Some(textarea) = rationale_box.get_untracked() {
                event.prevent_default();
                let _ = textarea.focus();
            }
        }
        Some(Key::Raw) => raw.update(|raw| *raw = !*raw),
        Some(Key::Help) => help.update(|open| *open = !*open),
        None => {}
    });

    view! {
        <h1>"Annotate"</h1>
        <KeyLegend legend=KEYS.legend(true)/>
        <CheatSheet legend=KEYS.legend(false) open=help/>
        {move || notice.get().map(|message| view! { <p class="notice" role="status" data-testid="notice">{message}</p> })}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match task.await {
                    Ok(Some(TaskView { task, item_id, remaining })) => {
                        current.set(Some(task.handle.clone()));
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
                                    images=task.images raw/>
                                <p>"Is the model's final answer correct?"</p>
                                <label>
                                    "Rationale (optional)"
                                    <textarea node_ref=rationale_box rows="2"
                                        prop:value=move || rationale.get()
                                        on:input=move |ev| rationale.set(event_target_value(&ev))></textarea>
                                </label>
                                <div class="row">
                                    <button class="pass" on:click=move |_| label("pass")>"Pass " <kbd>"1"</kbd></button>
                                    <button class="fail" on:click=move |_| label("fail")>"Fail " <kbd>"2"</kbd></button>
                                    <button class="secondary" on:click=move |_| skip_current()>"Skip " <kbd>"s"</kbd></button>
                                </div>
                            </section>
                        }.into_any()
                    }
                    Ok(None) => {
                        current.set(None);
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

/// What a rater in training reads after a label.
fn training_message(TrainingFeedbackView { feedback, out_of }: &TrainingFeedbackView) -> String {
    let answer = verdict_word(feedback.answer_pass);
    let verdict = if feedback.correct {
        format!("Right: the answer is {answer}.")
    } else {
        format!("Not quite: the answer is {answer}.")
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

#[cfg(test)]
mod tests {
    #[test]
    fn no_key_is_bound_twice() {
        assert!(super::KEYS.clashes().is_empty());
    }
}
