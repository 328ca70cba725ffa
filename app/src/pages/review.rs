//! The senior reviewer's page: one rater's label at a time, accepted, corrected or rejected
//! from the keyboard. Keys: `a` accept, `1`/`2` correct to pass/fail, `x` reject (a reason is
//! required: the rater sees it), `n` next. The model's output is shown as text, never as HTML.

use crate::annotation_api::{next_review, ReviewLabel};
use crate::components::{error_text, ErrorNote, ItemText};
use leptos::html;
use leptos::prelude::*;

#[component]
pub fn ReviewPage() -> impl IntoView {
    let tick = RwSignal::new(0u64);
    let item = Resource::new(move || tick.get(), |_| next_review());
    let decide = ServerAction::<ReviewLabel>::new();
    let current = RwSignal::new(None::<i64>);
    let reason = RwSignal::new(String::new());
    let notice = RwSignal::new(None::<String>);
    let reason_box = NodeRef::<html::Input>::new();

    let send = move |decision: &str, verdict: &str| {
        if let Some(label_id) = current.get_untracked() {
            decide.dispatch(ReviewLabel {
                label_id,
                decision: decision.to_string(),
                verdict: verdict.to_string(),
                reason: reason.get_untracked(),
            });
        }
    };
    Effect::new(move |_| match decide.value().get() {
        Some(Ok(())) => {
            notice.set(Some("Decision saved.".into()));
            reason.set(String::new());
            tick.update(|tick| *tick += 1);
        }
        Some(Err(err)) => notice.set(Some(error_text(&err))),
        None => {}
    });

    #[cfg(feature = "hydrate")]
    crate::components::keyboard_shortcuts(move |key, event| match key {
        "a" => send("accept", ""),
        "1" => send("correct", "pass"),
        "2" => send("correct", "fail"),
        "x" => send("reject", ""),
        "n" => tick.update(|tick| *tick += 1),
        "r" => {
            if let Some(input) = reason_box.get_untracked() {
                event.prevent_default();
                let _ = input.focus();
            }
        }
        _ => {}
    });

    view! {
        <h1>"Review labels"</h1>
        <p class="shortcuts">
            "Shortcuts: " <kbd>"a"</kbd> " accept · " <kbd>"1"</kbd> " / " <kbd>"2"</kbd> " correct to pass / fail · "
            <kbd>"x"</kbd> " reject (reason required) · " <kbd>"r"</kbd> " reason · " <kbd>"n"</kbd> " next"
        </p>
        {move || notice.get().map(|message| view! { <p class="notice" role="status" data-testid="notice">{message}</p> })}
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match item.await {
                    Ok(Some(item)) => {
                        current.set(Some(item.label_id));
                        view! {
                            <section class="card task" data-testid="review" data-label-id=item.label_id.to_string()>
                                <p class="hint">{item.why}</p>
                                <ItemText input=item.input target=item.target output=item.output/>
                                <h2>"The label"</h2>
                                <p data-testid="review-label"><strong>{item.rater}</strong> " said " <strong>{item.verdict}</strong></p>
                                <pre class="output">{item.rationale}</pre>
                                <label>
                                    "Reason (required to reject; the rater sees it)"
                                    <input node_ref=reason_box maxlength="2000"
                                        prop:value=move || reason.get()
                                        on:input=move |ev| reason.set(event_target_value(&ev))/>
                                </label>
                                <div class="row">
                                    <button class="pass" on:click=move |_| send("accept", "")>"Accept " <kbd>"a"</kbd></button>
                                    <button on:click=move |_| send("correct", "pass")>"Correct to pass " <kbd>"1"</kbd></button>
                                    <button on:click=move |_| send("correct", "fail")>"Correct to fail " <kbd>"2"</kbd></button>
                                    <button class="fail" on:click=move |_| send("reject", "")>"Reject " <kbd>"x"</kbd></button>
                                </div>
                            </section>
                        }.into_any()
                    }
                    Ok(None) => {
                        current.set(None);
                        view! {
                            <section class="card" data-testid="review-empty">
                                <p>"No labels are waiting for review. Press " <kbd>"n"</kbd> " to check again."</p>
                            </section>
                        }.into_any()
                    }
                    Err(error) => view! { <ErrorNote error/> }.into_any(),
                }
            })}
        </Transition>
    }
}
