//! What an eval sends, as its page shows it: the API, the template syntax, the system prompt,
//! the template or message list, the field mapping, and the sampling settings beyond the
//! basic three; and the preview of the exact request for any item.

use crate::catalog::api::PreviewEval;
use crate::components::ActionError;
use arbiter_domain::ids::{CheckpointId, EvalId};
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
    if let Some(top_p) = eval.sampling.top_p {
        sampling.push(format!("top_p {top_p}"));
    }
    if !eval.sampling.stop.is_empty() {
        sampling.push(format!(
            "stop {}",
            serde_json::to_string(&eval.sampling.stop).unwrap_or_default()
        ));
    }
    for (name, value) in &eval.sampling.extra {
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

/// Pick an item (and a checkpoint) and see the exact request body and its generation key.
#[component]
pub fn EvalPreview(eval_id: EvalId, checkpoints: Vec<(CheckpointId, String)>) -> impl IntoView {
    let preview = ServerAction::<PreviewEval>::new();
    view! {
        <ActionForm action=preview attr:class="inline">
            <input type="hidden" name="eval_id" value=eval_id.to_string()/>
            <label>"Item id" <input name="case_id" placeholder="first item" data-testid="preview-case"/></label>
            <label>"Checkpoint"
                <select name="checkpoint_id">
                    <option value="">"none"</option>
                    {checkpoints.into_iter().map(|(id, name)| view! {
                        <option value=id.to_string()>{name}</option>
                    }).collect_view()}
                </select>
            </label>
            <button type="submit" class="secondary">"Preview request"</button>
        </ActionForm>
        <ActionError value=preview.value()/>
        {move || preview.value().get().and_then(Result::ok).map(|shown| view! {
            <div data-testid="request-preview">
                <p>"Item " <strong>{shown.case_id.clone()}</strong> " · POST " <code>{shown.route.clone()}</code>
                   " · target " <strong>{shown.targets.join(" | ")}</strong>
                   {(!shown.category.is_empty()).then(|| format!(" · category {}", shown.category))}</p>
                <p>"Generation key: " <code data-testid="preview-key">{shown.generation_key.clone().unwrap_or_else(|| "–".into())}</code></p>
                {shown.note.clone().map(|note| view! { <p class="hint" data-testid="preview-note">{note}</p> })}
                <pre class="output" data-testid="preview-body">{serde_json::to_string_pretty(&shown.body).unwrap_or_default()}</pre>
            </div>
        })}
    }
}
