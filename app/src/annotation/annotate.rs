//! The annotator's page: one item at a time, labelled from the keyboard.
//!
//! Keys: `1`/`p` pass, `2`/`f` fail, `s` skip, `n` next item, `r` write a rationale (Escape
//! leaves the text box). The rater is blind: no model, checkpoint or grader verdict is shown,
//! and the model's output is rendered as text, never as HTML. Gold items look like any other
//! item; only a rater in training is told, and sees the right answer after each label.

use crate::annotation::api::{next_task, SkipTask, SubmitLabel, TaskView, TrainingFeedbackView};
use crate::components::{error_text, ErrorNote, ItemText};
use crate::format::verdict_word;
use arbiter_domain::annotation::task::ClaimHandle;
use leptos::html;
use leptos::prelude::*;

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
    crate::components::keyboard_shortcuts(move |key, event| match key {
        "1" | "p" => label("pass"),
        "2" | "f" => label("fail"),
        "s" => skip_current(),
        "n" => tick.update(|tick| *tick += 1),
        "r" => {
            if let Some(textarea) = rationale_box.get_untracked() {
                event.prevent_default();
                let _ = textarea.focus();
            }
        }
        _ => {}
    });

    view! {
        <h1>"Annotate"</h1>
        <p class="shortcuts">
            "Shortcuts: " <kbd>"1"</kbd> " pass · " <kbd>"2"</kbd> " fail · " <kbd>"s"</kbd> " skip · "
            <kbd>"n"</kbd> " next item · " <kbd>"r"</kbd> " rationale (" <kbd>"Esc"</kbd> " to leave it)"
        </p>
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
                                <ItemText input=task.input target=task.target output=task.output images=task.images/>
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
