//! An item as raters and reviewers read it: markdown and code rendered (the server made and
//! sanitised the HTML), a conversation as its turns under their roles, long texts folded, and
//! a raw view of every text a key away.

use arbiter_domain::annotation::shown::{ShownItem, ShownText};
use leptos::prelude::*;

/// One text, rendered or raw as `raw` says; a long one is folded until "show all".
#[component]
pub fn ShownTextView(
    text: ShownText,
    #[prop(into)] raw: Signal<bool>,
    /// The part of the item it is (`input`, `target`, `output`): its class and test id.
    part: &'static str,
) -> impl IntoView {
    let long = text.is_long();
    let lines = text.line_count();
    let unfolded = RwSignal::new(!long);
    let ShownText {
        raw: raw_text,
        html,
    } = text;
    // Nothing rendered (an item the server could not render): the text as it is.
    let nothing_rendered = html.is_empty();
    let raw = Signal::derive(move || raw.get() || nothing_rendered);
    view! {
        <div class=move || format!("shown {part}{}", if unfolded.get() { "" } else { " folded" })
            data-testid=format!("task-{part}")>
            {move || if raw.get() {
                view! { <pre class="raw">{raw_text.clone()}</pre> }.into_any()
            } else {
                // The server rendered this from markdown or code and sanitised it.
                view! { <div class="rendered" inner_html=html.clone()></div> }.into_any()
            }}
        </div>
        {long.then(|| view! {
            <button class="link fold" on:click=move |_| unfolded.update(|open| *open = !*open)>
                {move || if unfolded.get() { "Fold".to_string() } else { format!("Show all ({lines} lines)") }}
            </button>
        })}
    }
}

/// The question (or conversation), its images, the reference answer and the model's output.
#[component]
pub fn ShownItemView(
    shown: ShownItem,
    images: Vec<String>,
    #[prop(into)] raw: Signal<bool>,
    /// A pair's second output: the two are shown side by side as A (left, `shown.output`) and
    /// B (right).
    #[prop(optional_no_strip)]
    right: Option<ShownText>,
) -> impl IntoView {
    let ShownItem {
        input,
        conversation,
        target,
        output,
    } = shown;
    // A conversation shows each message's images with it.
    let images = if conversation.is_empty() {
        images
    } else {
        Vec::new()
    };
    let question = if conversation.is_empty() {
        view! { <ShownTextView text=input raw part="input"/> }.into_any()
    } else {
        view! {
            <ol class="transcript" data-testid="task-input">
                {conversation.into_iter().map(|turn| view! {
                    <li class=format!("turn {}", turn.role)>
                        <span class="role">{turn.role.clone()}</span>
                        <ShownTextView text=turn.text raw part="turn"/>
                        <crate::components::ItemImages images=turn.images/>
                    </li>
                }).collect_view()}
            </ol>
        }
        .into_any()
    };
    view! {
        <h2>"Question"</h2>
        {question}
        <crate::components::ItemImages images/>
        <h2>"Reference answer"</h2>
        <ShownTextView text=target raw part="target"/>
        {match right {
            None => view! {
                <h2>"Model output"</h2>
                <ShownTextView text=output raw part="output"/>
            }.into_any(),
            Some(right) => view! {
                <div class="pair-outputs">
                    <div class="side">
                        <h2>"Output A"</h2>
                        <ShownTextView text=output raw part="output"/>
                    </div>
                    <div class="side">
                        <h2>"Output B"</h2>
                        <ShownTextView text=right raw part="output-b"/>
                    </div>
                </div>
            }.into_any(),
        }}
    }
}

/// The raw/rendered switch above an item.
#[component]
pub fn RawToggle(raw: RwSignal<bool>) -> impl IntoView {
    view! {
        <button class="secondary raw-toggle" data-testid="raw-toggle" aria-pressed=move || raw.get().to_string()
            on:click=move |_| raw.update(|raw| *raw = !*raw)>
            {move || if raw.get() { "Show rendered " } else { "Show raw " }} <kbd>"v"</kbd>
        </button>
    }
}
