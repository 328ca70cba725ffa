//! What an eval sends, as its page shows it: the API, the template syntax, the system prompt,
//! the template or message list, the field mapping, and the sampling settings beyond the
//! basic three.

use arbiter_domain::manifest::EvalSummary;
use arbiter_domain::prompt::{Api, TemplateSyntax};
use leptos::prelude::*;

#[component]
pub fn EvalPrompt(eval: EvalSummary) -> impl IntoView {
    let prompt = eval.prompt;
    let api = match prompt.api {
        Api::Chat => "chat completions",
        Api::Completions => "completions (base model)",
    };
    let syntax = match prompt.syntax {
        TemplateSyntax::Placeholder => "{input} placeholder",
        TemplateSyntax::Jinja => "Jinja",
    };
    let mapping = &prompt.mapping;
    let mapping_text = format!(
        "input ← {}{}{}{}{}",
        mapping.input,
        mapping
            .target
            .as_ref()
            .map(|field| format!(" · target ← {field}"))
            .unwrap_or_default(),
        mapping
            .choices
            .as_ref()
            .map(|field| format!(" · choices ← {field}"))
            .unwrap_or_default(),
        mapping
            .category
            .as_ref()
            .map(|field| format!(" · category ← {field}"))
            .unwrap_or_default(),
        if mapping.metadata.is_empty() {
            String::new()
        } else {
            format!(" · metadata: {}", mapping.metadata.join(", "))
        },
    );
    let mut sampling = Vec::new();
    if let Some(top_p) = eval.top_p {
        sampling.push(format!("top_p {top_p}"));
    }
    if !eval.stop.is_empty() {
        sampling.push(format!(
            "stop {}",
            serde_json::to_string(&eval.stop).unwrap_or_default()
        ));
    }
    for (name, value) in &eval.extra {
        sampling.push(format!("{name} {value}"));
    }
    view! {
        <p data-testid="eval-prompt-shape">
            "Sent to " <strong>{api}</strong> " · template syntax " <strong>{syntax}</strong>
            " · fields: " <code>{mapping_text}</code>
        </p>
        {(!sampling.is_empty()).then(|| view! { <p data-testid="eval-sampling">"Sampling: " {sampling.join(" · ")}</p> })}
        {(!prompt.system_prompt.is_empty()).then(|| view! {
            <h3>"System prompt"</h3>
            <pre class="output">{prompt.system_prompt.clone()}</pre>
        })}
        {(!prompt.template.is_empty()).then(|| view! {
            <h3>"Prompt template"</h3>
            <pre class="output" data-testid="eval-template">{prompt.template.clone()}</pre>
        })}
        {(!prompt.messages.is_empty()).then(|| view! {
            <h3>"Messages"</h3>
            {prompt.messages.iter().map(|message| view! {
                <p><strong>{message.role.as_str()}</strong></p>
                <pre class="output">{message.content.clone()}</pre>
            }).collect_view()}
        })}
        {(prompt.template.is_empty() && prompt.messages.is_empty()).then(|| view! {
            <p class="hint">"Each item's conversation is sent as it is."</p>
        })}
    }
}
