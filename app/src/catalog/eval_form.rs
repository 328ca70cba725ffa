//! The eval form as a researcher meets it: the dataset's fields listed beside the template,
//! the template checked against a sample item as it is typed, the grader picked from a list
//! with its settings as fields (raw JSON stays as an advanced option), and the optional parts
//! (system prompt, API, field mapping, few-shot, sampling) folded away until wanted.

use crate::catalog::api::{check_prompt, CreateEval};
use crate::components::ActionError;
use arbiter_domain::dataset::DatasetSummary;
use arbiter_domain::eval_form::EvalFormText;
use arbiter_domain::ids::DatasetId;
use leptos::prelude::*;

const DEFAULT_TEMPLATE: &str =
    "Answer the question. End your reply with a final line `Answer: <answer>`.\n\nQuestion: {{ input }}";

/// Graders offered in the list: (kind, what it does).
const GRADERS: [(&str, &str); 13] = [
    (
        "",
        "exact match on the final `Answer:` line, or the JSON spec below when given",
    ),
    ("exact_match", "exact match on the final `Answer:` line"),
    (
        "normalised_match",
        "match ignoring case, punctuation and articles",
    ),
    ("multiple_choice", "the option letter chosen (A, B, C…)"),
    ("numeric", "a number, within a relative tolerance"),
    ("regex_match", "a pattern's capture group equals the target"),
    ("contains", "the output contains every listed string"),
    (
        "not_contains",
        "the output contains none of the listed strings",
    ),
    ("json_valid", "the output is one JSON document"),
    ("length", "at most so many words"),
    (
        "code_tests",
        "the answer's code passes the item's tests, run in a sandbox",
    ),
    (
        "instructions",
        "the answer follows the item's instructions (IFEval: instruction_id_list and kwargs)",
    ),
    ("json", "advanced: a grader spec as JSON (below)"),
];

#[component]
pub fn DefineEval(
    datasets: Vec<DatasetSummary>,
    create: ServerAction<CreateEval>,
) -> impl IntoView {
    let first = datasets
        .first()
        .map(|dataset| dataset.id.to_string())
        .unwrap_or_default();
    let exemplar_datasets = datasets.clone();
    let dataset = RwSignal::new(first);
    let template = RwSignal::new(DEFAULT_TEMPLATE.to_string());
    let messages: RwSignal<Vec<MessageRow>> = RwSignal::new(Vec::new());
    let messages_json = Memo::new(move |_| messages_as_json(&messages.get()));
    let system_prompt = RwSignal::new(String::new());
    let api = RwSignal::new(String::new());
    let input_field = RwSignal::new(String::new());
    let target_field = RwSignal::new(String::new());
    let choices_field = RwSignal::new(String::new());
    let category_field = RwSignal::new(String::new());
    let images_field = RwSignal::new(String::new());
    let template_syntax = RwSignal::new(String::new());
    let few_shot_dataset = RwSignal::new(String::new());
    let few_shot_count = RwSignal::new("5".to_string());
    let few_shot_style = RwSignal::new(String::new());
    let sample = Resource::new(
        move || {
            (
                dataset.get(),
                if messages.with(Vec::is_empty) {
                    template.get()
                } else {
                    String::new()
                },
                EvalFormText {
                    messages: messages_json.get(),
                    template_syntax: template_syntax.get(),
                    few_shot_dataset: few_shot_dataset.get(),
                    few_shot_count: few_shot_count.get(),
                    few_shot_style: few_shot_style.get(),
                    system_prompt: system_prompt.get(),
                    api: api.get(),
                    input_field: input_field.get(),
                    target_field: target_field.get(),
                    choices_field: choices_field.get(),
                    category_field: category_field.get(),
                    images_field: images_field.get(),
                    ..EvalFormText::default()
                },
            )
        },
        |(dataset, template, options)| async move {
            match dataset.parse::<DatasetId>() {
                Ok(dataset) => check_prompt(dataset, template, options).await.ok(),
                Err(_) => None,
            }
        },
    );
    let bind = |signal: RwSignal<String>| move |ev| signal.set(event_target_value(&ev));
    view! {
        <ActionForm action=create attr:class="stack">
            <label>"Name" <input name="name" required maxlength="200"/></label>
            <label>
                "Dataset"
                <select name="dataset_id" required on:change=bind(dataset)>
                    {datasets.into_iter().map(|dataset| view! {
                        <option value=dataset.id.to_string()>{dataset.name}</option>
                    }).collect_view()}
                </select>
            </label>
            <div class="row">
                <div class="grow">
                    <label>
                        "Prompt template"
                        <textarea name="prompt_template" rows="5" data-testid="prompt-template"
                            prop:disabled=move || !messages.with(Vec::is_empty)
                            prop:value=move || template.get() on:input=bind(template)>{DEFAULT_TEMPLATE}</textarea>
                    </label>
                    // A disabled field is not sent: the message list is the whole prompt then.
                    {move || (!messages.with(Vec::is_empty)).then(|| view! { <input type="hidden" name="prompt_template" value=""/> })}
                    <input type="hidden" name="options[messages]" prop:value=move || messages_json.get()/>
                    <MessageListEditor messages/>
                    <p class="hint">
                        "Jinja over the item's fields: " <code>"{{ question }}"</code> ", " <code>"{{ choices | lettered }}"</code>
                        " (A. …, B. …), " <code>"{{ letter(0) }}"</code> ". A field an item lacks is an error when the eval is saved, "
                        "never an empty string. Templates with " <code>"{input}"</code> " and no Jinja tag keep the original form."
                    </p>
                </div>
                <aside class="card" data-testid="prompt-check">
                    <Transition fallback=|| view! { <p class="hint">"Checking…"</p> }>
                        {move || Suspend::new(async move {
                            match sample.await {
                                None => view! { <p class="hint">"Choose a dataset to see its fields."</p> }.into_any(),
                                Some(sample) => view! { <PromptCheck sample/> }.into_any(),
                            }
                        })}
                    </Transition>
                </aside>
            </div>
            <details>
                <summary>"System prompt, API, field mapping"</summary>
                <label>"System prompt (a template too)"
                    <textarea name="options[system_prompt]" rows="2" on:input=bind(system_prompt)></textarea>
                </label>
                <div class="row">
                    <label>"API"
                        <select name="options[api]" on:change=bind(api)>
                            <option value="chat">"chat completions"</option>
                            <option value="completions">"completions (base checkpoints)"</option>
                        </select>
                    </label>
                    <label>"Template syntax"
                        <select name="options[template_syntax]" on:change=bind(template_syntax)>
                            <option value="">"detect"</option>
                            <option value="jinja">"Jinja"</option>
                            <option value="placeholder">"{input} only"</option>
                        </select>
                    </label>
                </div>
                <div class="row">
                    <label>"Input field" <input name="options[input_field]" placeholder="input" on:input=bind(input_field)/></label>
                    <label>"Target field" <input name="options[target_field]" placeholder="target" on:input=bind(target_field)/></label>
                    <label>"Choices field" <input name="options[choices_field]" placeholder="none" on:input=bind(choices_field)/></label>
                    <label>"Category field" <input name="options[category_field]" placeholder="category" on:input=bind(category_field)/></label>
                </div>
                <div class="row">
                    <label>"Metadata fields (comma-separated)" <input name="options[metadata_fields]"/></label>
                    <label>"Images field (data URLs, or files of an uploaded .zip; chat API)" <input name="options[images_field]" placeholder="none" on:input=bind(images_field)/></label>
                    <label>"Shuffle choices (a seed; empty keeps the order)" <input name="options[shuffle_seed]" type="number" min="0"/></label>
                </div>
            </details>
            <details>
                <summary>"Scoring: generate an answer, the likelihood of each choice, or perplexity"</summary>
                <div class="row">
                    <label>"Scoring"
                        <select name="options[scoring]">
                            <option value="generate">"generate an answer (graded below)"</option>
                            <option value="likelihood">"likelihood of each choice (lm-eval multiple_choice)"</option>
                            <option value="rolling">"rolling likelihood of the whole text: perplexity, bits per byte (lm-eval loglikelihood_rolling)"</option>
                        </select>
                    </label>
                    <label>"Between prompt and choice (\\s a space, \\n a newline)" <input name="options[target_delimiter]" placeholder="\\s"/></label>
                    <label>"Answer by"
                        <select name="options[select_by]">
                            <option value="acc">"highest log-likelihood (acc)"</option>
                            <option value="acc_norm">"per character (acc_norm)"</option>
                            <option value="acc_bytes">"per byte (acc_bytes)"</option>
                        </select>
                    </label>
                </div>
                <p class="hint">
                    "By likelihood, nothing is generated: each choice is sent after the prompt to /v1/completions with "
                    <code>"echo"</code> " and " <code>"logprobs"</code> ", and the model's answer is the letter of the likeliest choice, "
                    "graded by the grader below. Needs the completions API, a choices field, and an endpoint that returns prompt "
                    "logprobs (vLLM, SGLang, arbiter model serve, the simulator): the launch checks, rather than report chance."
                </p>
                <div class="row">
                    <label>"Rolling: max_length (tokens per request + 1, as lm-eval's)" <input name="options[rolling_max_length]" type="number" min="3" placeholder="2048"/></label>
                    <label>"Rolling: stride (new tokens per window)" <input name="options[rolling_stride]" type="number" min="1" placeholder="max_length − 2"/></label>
                    <label>"Rolling: prefix token id" <input name="options[rolling_prefix_token]" type="number" min="0" placeholder="from the server"/></label>
                </div>
                <p class="hint">
                    "By rolling likelihood, the prompt template's text (for example " <code>"{{ text }}"</code> ") is tokenised by the "
                    "server's " <code>"/tokenize"</code> " and scored in windows, every token once; the report gives word and byte "
                    "perplexity and bits per byte over the corpus, and no grader is asked. Needs the completions API and a server "
                    "with " <code>"/tokenize"</code> " and prompt logprobs on token prompts (vLLM, arbiter model serve, the simulator)."
                </p>
            </details>
            <details>
                <summary>"Contamination check"</summary>
                <div class="row">
                    <label>"Training corpus index (a file on the server, from " <code>"arbiter contamination index"</code> ")"
                        <input name="options[contamination_index]" placeholder="none"/>
                    </label>
                    <label>"Check targets too" <input type="checkbox" name="options[contamination_targets]" value="yes"/></label>
                </div>
                <p class="hint">"Each item's input (and choices) is checked for any 13-gram of the corpus as a run expands; the run's report gives scores with and without the items found."</p>
            </details>
            <details>
                <summary>"Few-shot exemplars"</summary>
                <div class="row">
                    <label>"Exemplars from"
                        <select name="options[few_shot_dataset]" on:change=bind(few_shot_dataset)>
                            <option value="">"none"</option>
                            {exemplar_datasets.into_iter().map(|dataset| view! {
                                <option value=dataset.id.to_string()>{dataset.name}</option>
                            }).collect_view()}
                        </select>
                    </label>
                    <label>"Shots" <input name="options[few_shot_count]" type="number" min="1" max="64" value="5" on:input=bind(few_shot_count)/></label>
                    <label>"Draw seed" <input name="options[few_shot_seed]" type="number" min="0" value="0"/></label>
                    <label>"As"
                        <select name="options[few_shot_style]" on:change=bind(few_shot_style)>
                            <option value="text">"text before the question"</option>
                            <option value="turns">"earlier chat turns"</option>
                        </select>
                    </label>
                </div>
            </details>
            <div class="row">
                <label>"Max tokens" <input name="max_tokens" type="number" value="128" min="1"/></label>
                <label>"Temperature" <input name="temperature" type="number" value="0" min="0" max="2" step="0.1"/></label>
                <label>"Repetitions" <input name="repetitions" type="number" value="1" min="1" max="100"/></label>
                <label>"Seed" <input name="seed" type="number" value="0" min="0"/></label>
            </div>
            <details>
                <summary>"Sampling options"</summary>
                <div class="row">
                    <label>"top_p" <input name="options[top_p]" type="number" min="0" max="1" step="0.01"/></label>
                    <label>"Stop sequences (one per line; \\n for a newline)" <textarea name="options[stop]" rows="2"></textarea></label>
                    <label>"Engine parameters (JSON: top_k, min_p, repetition_penalty, …)" <input name="options[extra]" placeholder="{\"top_k\": 20}"/></label>
                </div>
            </details>
            <fieldset>
                <legend>"Grader"</legend>
                <select name="options[grader_kind]" aria-label="grader">
                    {GRADERS.iter().map(|(kind, what)| view! {
                        <option value=*kind>{if kind.is_empty() { (*what).to_string() } else { format!("{kind}: {what}") }}</option>
                    }).collect_view()}
                </select>
                <div class="row">
                    <label>"Relative tolerance (numeric)" <input name="options[grader_tolerance]" type="number" min="0" step="any"/></label>
                    <label>"Pattern (regex_match)" <input name="options[grader_pattern]" placeholder="Answer: (\\w+)"/></label>
                    <label>"Strings, one per line (contains)" <textarea name="options[grader_strings]" rows="2"></textarea></label>
                    <label>"Most words (length)" <input name="options[grader_max_words]" type="number" min="1"/></label>
                </div>
                <div class="row">
                    <label>"Tests field (code_tests)" <input name="options[grader_tests_field]" placeholder="test"/></label>
                    <label>"Entry-point field (code_tests)" <input name="options[grader_entry_point_field]" placeholder="entry_point"/></label>
                    <label>"Code before the answer (field)" <input name="options[grader_prefix_field]" placeholder="prompt"/></label>
                    <label>"The answer's code"
                        <select name="options[grader_extract]">
                            <option value="fenced">"its first fenced block (chat)"</option>
                            <option value="whole">"the whole answer (a completion)"</option>
                        </select>
                    </label>
                </div>
                <details>
                    <summary>"Advanced: grader as JSON"</summary>
                    <label>"Grader spec as JSON (used when no grader is picked above)"
                        <textarea name="grader" rows="2" placeholder="{\"kind\": \"all_of\", \"graders\": […]}"></textarea>
                    </label>
                </details>
                <p class="hint">"Answers the grader cannot decide go to the eval's judges (set on the eval's page), else to the human annotation queue."</p>
            </fieldset>
            <button type="submit">"Define eval"</button>
        </ActionForm>
        <ActionError value=create.value()/>
    }
}

/// One message of the message list being written.
#[derive(Clone, Copy)]
struct MessageRow {
    role: RwSignal<String>,
    content: RwSignal<String>,
}

/// The message list as the form sends it: '' when empty.
fn messages_as_json(rows: &[MessageRow]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| serde_json::json!({"role": row.role.get(), "content": row.content.get()}))
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// The conversation written message by message (system, user and assistant turns, each a
/// template), instead of one user-message template.
#[component]
fn MessageListEditor(messages: RwSignal<Vec<MessageRow>>) -> impl IntoView {
    let add = move |role: &'static str, content: &'static str| {
        messages.update(|rows| {
            rows.push(MessageRow {
                role: RwSignal::new(role.to_string()),
                content: RwSignal::new(content.to_string()),
            })
        })
    };
    view! {
        <details data-testid="message-list">
            <summary>"Or write the prompt as a message list"</summary>
            <p class="hint">"Each message is a template over the item's fields; the list ends with the user message the model answers. While it has messages, the template above is not used."</p>
            <ol class="message-list">
                {move || messages.get().into_iter().enumerate().map(|(index, row)| view! {
                    <li class="row">
                        <select aria-label=format!("role of message {}", index + 1)
                            prop:value=move || row.role.get()
                            on:change=move |ev| row.role.set(event_target_value(&ev))>
                            // `selected` on each option: the select's value set before its
                            // options exist would show the first one whatever the role.
                            {["system", "user", "assistant"].into_iter().map(|role| view! {
                                <option value=role selected=move || row.role.get() == role>{role}</option>
                            }).collect_view()}
                        </select>
                        <textarea class="grow" rows="2" aria-label=format!("message {}", index + 1)
                            prop:value=move || row.content.get()
                            on:input=move |ev| row.content.set(event_target_value(&ev))></textarea>
                        <button type="button" class="secondary"
                            on:click=move |_| messages.update(|rows| { rows.remove(index); })>"Remove"</button>
                    </li>
                }).collect_view()}
            </ol>
            <div class="row">
                <button type="button" class="secondary" on:click=move |_| add("system", "")>"+ system"</button>
                <button type="button" class="secondary" data-testid="add-user-message" on:click=move |_| add("user", "{{ input }}")>"+ user"</button>
                <button type="button" class="secondary" on:click=move |_| add("assistant", "")>"+ assistant"</button>
            </div>
        </details>
    }
}

#[component]
fn PromptCheck(sample: arbiter_domain::prompt::request::PromptSample) -> impl IntoView {
    view! {
        <p data-testid="dataset-fields">"Fields: "
            {sample.fields.iter().map(|field| view! { <code>{field.clone()}</code> " " }).collect_view()}
        </p>
        {match (sample.prompt, sample.problem) {
            (_, Some(problem)) => view! {
                <p class="error" data-testid="prompt-problem">{format!("Item {}: {problem}", sample.case_id)}</p>
            }.into_any(),
            (Some(prompt), None) => view! {
                <p class="hint">{format!("Item {} renders as:", sample.case_id)}</p>
                <pre class="output" data-testid="prompt-sample">{prompt}</pre>
                <p class="hint">{format!("Target: {}", sample.targets.join(" | "))}</p>
            }.into_any(),
            (None, None) => view! { <p class="hint">"The dataset has no items yet."</p> }.into_any(),
        }}
    }
}
