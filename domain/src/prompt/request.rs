//! What an eval sends for one item: its prompt parts (template, system prompt, message list,
//! API, field mapping) and their rendering into a chat conversation or a completion prompt.
//!
//! Two template syntaxes live side by side. `placeholder` is the original one, where `{input}`
//! is replaced by the item's input and nothing else is special; evals saved before Jinja keep
//! it, so their prompts, manifests and cache keys are unchanged. `jinja` is minijinja over all
//! of the item's fields (see [`super::template`]). Pure: no I/O.

use super::few_shot::{Exemplars, FewShotSpec, FewShotStyle};
use super::template::JinjaTemplates;
use super::{
    describe_bytes, render_prompt, rendered_len_problem, validate_template, INPUT_PLACEHOLDER,
    MAX_PROMPT_BYTES, MAX_TEMPLATE_BYTES,
};
use crate::dataset::DatasetItem;
use crate::fields::{choice_letter, ChatMessage, FieldMapping, MappedInput, MappedItem, Role};
use crate::likelihood::LikelihoodSpec;
use crate::rolling::RollingSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Most messages a message-list template may have.
/// Longest delimiter between a likelihood eval's context and its choices.
const MAX_DELIMITER_BYTES: usize = 100;
pub const MAX_TEMPLATE_MESSAGES: usize = 64;

/// How a template marks where item fields go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TemplateSyntax {
    /// `{input}` is replaced by the input; nothing else is special.
    #[default]
    Placeholder,
    /// Jinja over the item's fields: `{{ question }}`, `{{ choices | lettered }}`, `{% for %}`.
    Jinja,
}

impl TemplateSyntax {
    pub fn is_placeholder(&self) -> bool {
        *self == TemplateSyntax::Placeholder
    }

    /// The syntax of an eval's parts written without saying (the template first): Jinja when
    /// any has a Jinja tag, else as the template alone says ([`TemplateSyntax::detect`]).
    pub fn detect_in<'a>(parts: impl IntoIterator<Item = &'a str>) -> TemplateSyntax {
        let mut parts = parts.into_iter();
        let template = parts.next().unwrap_or_default();
        if parts.any(has_jinja_tag) {
            return TemplateSyntax::Jinja;
        }
        TemplateSyntax::detect(template)
    }

    /// The syntax a template written without saying is in: Jinja when it has a Jinja tag, the
    /// original `{input}` placeholder otherwise (so clients written before Jinja keep working).
    pub fn detect(template: &str) -> TemplateSyntax {
        if has_jinja_tag(template) || !template.contains(INPUT_PLACEHOLDER) {
            TemplateSyntax::Jinja
        } else {
            TemplateSyntax::Placeholder
        }
    }
}

/// Whether a text holds a Jinja tag (`{{`, `{%` or `{#`).
fn has_jinja_tag(text: &str) -> bool {
    ["{{", "{%", "{#"].iter().any(|tag| text.contains(tag))
}

/// Which OpenAI-compatible route an eval's requests go to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `/v1/chat/completions`: a conversation, formatted by the server's chat template.
    #[default]
    Chat,
    /// `/v1/completions`: raw text, for base checkpoints.
    Completions,
}

impl Api {
    pub fn is_chat(&self) -> bool {
        *self == Api::Chat
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
        }
    }
}

/// One message of a message-list template: its role and its content template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessageTemplate {
    pub role: Role,
    pub content: String,
}

/// An eval's prompt parts. Everything but the template is optional and, when left at its
/// default, absent from the frozen manifest, so evals saved before these existed keep their
/// manifest hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PromptSpec {
    /// The user message (chat) or the whole prompt (completions). Empty when the eval uses a
    /// message list, or sends items' conversations as they are.
    #[serde(rename = "prompt_template")]
    pub template: String,
    #[serde(
        default,
        rename = "template_syntax",
        skip_serializing_if = "TemplateSyntax::is_placeholder"
    )]
    pub syntax: TemplateSyntax,
    /// Sent first, as the system message (a template in the eval's syntax).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system_prompt: String,
    /// A whole conversation of templates, sent instead of the single user message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<MessageTemplate>,
    #[serde(default, skip_serializing_if = "Api::is_chat")]
    pub api: Api,
    /// Which item fields are the input, target, choices, category and metadata.
    #[serde(default, rename = "fields", skip_serializing_if = "is_default_mapping")]
    pub mapping: FieldMapping,
    /// Exemplars shown before each question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub few_shot: Option<FewShotSpec>,
    /// Score each choice by its likelihood after the prompt instead of generating an answer
    /// (lm-eval's `multiple_choice`); `None` generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<LikelihoodSpec>,
    /// Score each item's whole prompt text by rolling log-likelihood instead of generating an
    /// answer (lm-eval's `loglikelihood_rolling`: perplexity and bits per byte); `None`
    /// generates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling: Option<RollingSpec>,
    /// Check each item's text against a training corpus's n-grams when a run expands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<crate::contamination::ContaminationSpec>,
}

fn is_default_mapping(mapping: &FieldMapping) -> bool {
    *mapping == FieldMapping::default()
}

impl PromptSpec {
    /// The original shape: one `{input}` template sent as the user message.
    pub fn placeholder(template: impl Into<String>) -> PromptSpec {
        PromptSpec {
            template: template.into(),
            syntax: TemplateSyntax::Placeholder,
            system_prompt: String::new(),
            messages: Vec::new(),
            api: Api::Chat,
            mapping: FieldMapping::default(),
            few_shot: None,
            likelihood: None,
            rolling: None,
            contamination: None,
        }
    }

    /// A Jinja template sent as the user message.
    pub fn jinja(template: impl Into<String>) -> PromptSpec {
        PromptSpec {
            syntax: TemplateSyntax::Jinja,
            ..PromptSpec::placeholder(template)
        }
    }

    /// The parts beyond the template as an eval row stores them (JSON; `None` for the
    /// original shape).
    pub fn options_column(&self) -> Option<String> {
        let mut json = match serde_json::to_value(self).expect("prompt specs always serialize") {
            Value::Object(json) => json,
            _ => unreachable!("a struct serializes as an object"),
        };
        json.remove("prompt_template");
        (!json.is_empty()).then(|| Value::Object(json).to_string())
    }

    /// A spec from an eval row's template and options columns.
    pub fn from_columns(template: String, options: Option<&str>) -> Result<PromptSpec, String> {
        let mut json = match options {
            None => Map::new(),
            Some(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(json)) => json,
                _ => return Err("unreadable prompt options".into()),
            },
        };
        json.insert("prompt_template".into(), Value::String(template));
        serde_json::from_value(Value::Object(json))
            .map_err(|err| format!("unreadable prompt options: {err}"))
    }

    /// Checks the parts alone (not against items): sizes, syntax, and that they fit together.
    pub fn validate(&self) -> Result<(), String> {
        self.mapping
            .validate()
            .map_err(|problem| format!("the field mapping is invalid: {problem}"))?;
        if !self.template.is_empty() && !self.messages.is_empty() {
            return Err(
                "give either a prompt template or a message list, not both (the message list \
                 is the whole conversation)"
                    .into(),
            );
        }
        if self.messages.len() > MAX_TEMPLATE_MESSAGES {
            return Err(format!(
                "a message list has at most {MAX_TEMPLATE_MESSAGES} messages"
            ));
        }
        if let Some(last) = self.messages.last() {
            if last.role != Role::User {
                return Err(
                    "the message list must end with a user message, which the model answers".into(),
                );
            }
            if self
                .messages
                .iter()
                .any(|message| message.role == Role::System)
                && !self.system_prompt.is_empty()
            {
                return Err(
                    "the message list has its own system message; leave the system prompt empty"
                        .into(),
                );
            }
        }
        if self.api == Api::Completions {
            if !self.system_prompt.is_empty() || !self.messages.is_empty() {
                return Err(
                    "system prompts and message lists need the chat API; a completions eval \
                     sends one text prompt"
                        .into(),
                );
            }
            if self.template.is_empty() {
                return Err("a completions eval needs a prompt template".into());
            }
        }
        if let Some(likelihood) = &self.likelihood {
            if self.api != Api::Completions {
                return Err(
                    "likelihood scoring needs the completions API: chat APIs return no prompt \
                     logprobs"
                        .into(),
                );
            }
            if self.mapping.choices.is_none() {
                return Err("likelihood scoring needs a choices field to score".into());
            }
            if self.mapping.images.is_some() {
                return Err(
                    "likelihood scoring sends text only; leave the images field empty".into(),
                );
            }
            if likelihood.target_delimiter.len() > MAX_DELIMITER_BYTES {
                return Err(format!(
                    "the target delimiter is longer than {MAX_DELIMITER_BYTES} bytes"
                ));
            }
        }
        if let Some(rolling) = &self.rolling {
            rolling.validate()?;
            if self.api != Api::Completions {
                return Err(
                    "rolling likelihood needs the completions API: chat APIs return no prompt \
                     logprobs"
                        .into(),
                );
            }
            if self.likelihood.is_some() {
                return Err(
                    "an eval scores either choices by likelihood or whole texts by rolling \
                     likelihood, not both"
                        .into(),
                );
            }
            if self.few_shot.is_some() || self.mapping.images.is_some() {
                return Err(
                    "rolling likelihood scores each item's text alone; leave few-shot exemplars \
                     and the images field out"
                        .into(),
                );
            }
        }
        if let Some(few_shot) = &self.few_shot {
            few_shot.validate()?;
            if self.mapping.images.is_some() {
                return Err(
                    "few-shot exemplars cannot show images yet; leave the images field empty or \
                     drop the shots"
                        .into(),
                );
            }
            if self.template.is_empty() {
                return Err(
                    "few-shot exemplars need a prompt template (each shot is the template \
                     rendered for an exemplar)"
                        .into(),
                );
            }
            if few_shot.style == FewShotStyle::Turns && self.api == Api::Completions {
                return Err("few-shot turns need the chat API; use the text style".into());
            }
        }
        match self.syntax {
            TemplateSyntax::Placeholder => {
                if !self.messages.is_empty() {
                    return Err("message lists are written in the Jinja syntax".into());
                }
                if !self.template.is_empty() {
                    validate_template(&self.template)?;
                }
                if self.system_prompt.len() > MAX_TEMPLATE_BYTES {
                    return Err("the system prompt is longer than a template may be".into());
                }
            }
            TemplateSyntax::Jinja => {
                let compiled = self.compile_jinja()?;
                let reads_the_item = compiled
                    .names()
                    .any(|name| !compiled.reads(name).is_empty());
                let sends_conversations = self.template.is_empty() && self.messages.is_empty();
                if !reads_the_item && !sends_conversations {
                    return Err(
                        "the prompt uses no field of the item, so every item would get the same \
                         prompt: write `{{ input }}` (or `{input}` in the original form), or \
                         another field, where each item's text goes"
                            .into(),
                    );
                }
            }
        }
        Ok(())
    }

    fn compile_jinja(&self) -> Result<JinjaTemplates, String> {
        let mut sources: Vec<(String, &str)> = Vec::new();
        if !self.template.is_empty() {
            sources.push((PROMPT.into(), &self.template));
        }
        if !self.system_prompt.is_empty() {
            sources.push((SYSTEM.into(), &self.system_prompt));
        }
        for (index, message) in self.messages.iter().enumerate() {
            sources.push((message_name(index), &message.content));
        }
        let named: Vec<(&str, &str)> = sources
            .iter()
            .map(|(name, source)| (name.as_str(), *source))
            .collect();
        JinjaTemplates::compile(&named)
    }
}

/// The text a rolling-likelihood eval scores: the rendered prompt of a single-turn item (an
/// empty one scores nothing, as in lm-eval).
pub fn rolled_text(rendered: &RenderedPrompt) -> Result<&str, String> {
    if rendered.item.input.turn_count() > 1 {
        return Err("is a conversation; rolling likelihood scores one text per item".into());
    }
    match &rendered.body {
        PromptBody::Completion(text) => Ok(text),
        PromptBody::Chat(_) => Err("renders a chat conversation, not a text to score".into()),
    }
}

fn too_long(bytes: usize) -> String {
    format!(
        "its prompt would be {}; the limit is {} per prompt",
        describe_bytes(bytes),
        describe_bytes(MAX_PROMPT_BYTES)
    )
}

const PROMPT: &str = "the prompt template";
const SYSTEM: &str = "the system prompt";

/// The item's images go with the user message that asks its question: the last one, or for a
/// conversation of turns, its first turn (the later turns refer back to them).
fn with_images(mut body: PromptBody, item: &MappedItem) -> Result<PromptBody, String> {
    if item.images.is_empty() {
        return Ok(body);
    }
    let PromptBody::Chat(messages) = &mut body else {
        return Err("has images, which only the chat API can send".into());
    };
    let mut users = messages
        .iter_mut()
        .filter(|message| message.role == Role::User);
    let asking = match item.input {
        MappedInput::Turns(_) => users.next(),
        _ => users.last(),
    };
    match asking {
        Some(message) => {
            message.images.extend(item.images.iter().cloned());
            if message.images.len() > crate::images::MAX_IMAGES {
                return Err(format!(
                    "sends {} images with one message; the limit is {}",
                    message.images.len(),
                    crate::images::MAX_IMAGES
                ));
            }
        }
        None => return Err("has images but no user message to send them with".into()),
    }
    Ok(body)
}

fn message_name(index: usize) -> String {
    format!("message {} of the message list", index + 1)
}

/// What goes to the endpoint for one item, before sampling settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptBody {
    /// `messages` of a chat completion.
    Chat(Vec<ChatMessage>),
    /// `prompt` of a completion.
    Completion(String),
}

impl PromptBody {
    /// Bytes of text sent (for cost estimates).
    pub fn text_len(&self) -> usize {
        match self {
            PromptBody::Chat(messages) => messages.iter().map(|m| m.content.len()).sum(),
            PromptBody::Completion(prompt) => prompt.len(),
        }
    }

    /// The original request shape: one user message and nothing else. Its cache key is the
    /// one Arbiter has always used, so answers cached before Jinja are still found.
    pub fn single_user_message(&self) -> Option<&str> {
        match self {
            PromptBody::Chat(messages) => match &messages[..] {
                [only] if only.role == Role::User && only.images.is_empty() => Some(&only.content),
                _ => None,
            },
            PromptBody::Completion(_) => None,
        }
    }

    /// The images sent, in order (data URLs).
    pub fn images(&self) -> Vec<String> {
        match self {
            PromptBody::Chat(messages) => messages
                .iter()
                .flat_map(|message| message.images.iter().cloned())
                .collect(),
            PromptBody::Completion(_) => Vec::new(),
        }
    }

    /// The prompt as one text, for people: the conversation's turns, or the completion prompt.
    pub fn as_text(&self) -> String {
        match self {
            PromptBody::Chat(messages) => match self.single_user_message() {
                Some(text) => text.to_string(),
                None => messages
                    .iter()
                    .map(|message| {
                        let images = match message.images.len() {
                            0 => String::new(),
                            1 => "\n[1 image]".to_string(),
                            count => format!("\n[{count} images]"),
                        };
                        format!("[{}]\n{}{images}", message.role.as_str(), message.content)
                    })
                    .collect::<Vec<_>>()
                    .join("\n\n"),
            },
            PromptBody::Completion(prompt) => prompt.clone(),
        }
    }
}

/// One item rendered: what is sent, and how the eval reads the item (targets, category).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedPrompt {
    pub body: PromptBody,
    pub item: MappedItem,
}

/// The exact request an eval will send for one item, shown before launching.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequestPreview {
    pub case_id: String,
    /// The dataset revision the item comes from (the newest, as a launch would use).
    pub dataset_revision: String,
    /// Where it is posted, under the checkpoint's base URL: `chat/completions` or
    /// `completions`; or, for a rolling eval's tokenisation, `/tokenize` at the server's root
    /// (the base URL without its `/v1`).
    pub route: String,
    /// The JSON body, byte for byte as a worker sends it (the model is the checkpoint's).
    #[schema(value_type = Object)]
    pub body: Value,
    /// The generation cache key; `None` without a checkpoint (the key covers the endpoint's
    /// fingerprint, which only probing the endpoint tells).
    pub generation_key: Option<String>,
    pub checkpoint: Option<String>,
    pub repetition: u32,
    /// The item's acceptable answers under the eval's mapping.
    pub targets: Vec<String>,
    pub category: String,
    /// Something the reader should know (the probe failed, no checkpoint was chosen).
    pub note: Option<String>,
}

/// The eval form's live check: the dataset's fields, and one sample item's prompt under the
/// template being typed (or why it cannot be rendered).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptSample {
    /// Field names of the dataset's first items, in order of first appearance.
    pub fields: Vec<String>,
    /// The sample item's id, and its fields as text.
    pub case_id: String,
    pub item_text: String,
    /// The rendered prompt as one text (a conversation as its turns), when it renders.
    pub prompt: Option<String>,
    pub targets: Vec<String>,
    /// Why the sample cannot be rendered, when it cannot.
    pub problem: Option<String>,
}

/// An eval's prompt parts, compiled once and rendered for each item.
#[derive(Debug)]
pub struct PromptRenderer {
    spec: PromptSpec,
    jinja: Option<JinjaTemplates>,
    /// The shots, each as its prompt text and answer, in the order drawn (spare last).
    shots: Vec<Shot>,
    /// Whether the shots come from the evaluated dataset (an item never sees itself).
    shots_from_same_dataset: bool,
}

#[derive(Debug)]
struct Shot {
    case_id: String,
    text: String,
    answer: String,
}

/// A prompt before few-shot exemplars are laid out: one text with its system prompt, or a
/// whole conversation.
enum Parts {
    Text {
        system: String,
        text: String,
    },
    Chat(Vec<ChatMessage>),
    /// A conversation's user turns, each rendered by the template.
    Turns {
        system: String,
        texts: Vec<String>,
    },
}

impl PromptRenderer {
    pub fn new(spec: &PromptSpec) -> Result<PromptRenderer, String> {
        spec.validate()?;
        let jinja = match spec.syntax {
            TemplateSyntax::Jinja => Some(spec.compile_jinja()?),
            TemplateSyntax::Placeholder => None,
        };
        Ok(PromptRenderer {
            spec: spec.clone(),
            jinja,
            shots: Vec::new(),
            shots_from_same_dataset: false,
        })
    }

    /// The renderer with its few-shot exemplars (a launch's frozen draw), each rendered once
    /// here: an exemplar the template cannot render, or without an answer, is refused by id.
    pub fn with_exemplars(
        mut self,
        exemplars: &Exemplars,
        evaluated_dataset: crate::ids::DatasetId,
    ) -> Result<PromptRenderer, String> {
        let mut shots = Vec::with_capacity(exemplars.items.len());
        for exemplar in &exemplars.items {
            let refused =
                |problem: String| format!("few-shot exemplar `{}` {problem}", exemplar.case_id);
            let fields = exemplar.fields();
            let item = self
                .spec
                .mapping
                .apply(&exemplar.case_id, &fields)
                .map_err(|err| refused(err.to_string()))?;
            let text = match self.parts(&fields, &item).map_err(refused)? {
                Parts::Text { text, .. } => text,
                Parts::Chat(_) | Parts::Turns { .. } => {
                    return Err(refused("is a conversation; shots must be text".into()))
                }
            };
            let answer = item
                .targets
                .first()
                .cloned()
                .ok_or_else(|| refused("has no target to show as its answer".into()))?;
            shots.push(Shot {
                case_id: exemplar.case_id.clone(),
                text,
                answer,
            });
        }
        self.shots = shots;
        self.shots_from_same_dataset = exemplars.dataset_id == evaluated_dataset;
        Ok(self)
    }

    pub fn spec(&self) -> &PromptSpec {
        &self.spec
    }

    /// Renders one item (the first turn of a conversation); errors say what is wrong with the
    /// item and are prefixed by the caller with the item's id.
    pub fn render(&self, dataset_item: &DatasetItem) -> Result<RenderedPrompt, String> {
        self.render_turn(dataset_item, 1, &[])
    }

    /// Renders turn `turn` (from 1) of an item: for a conversation, every earlier user turn
    /// followed by the model's own answer to it (`earlier_answers`, one per earlier turn), then
    /// this turn. The rendered item's targets are this turn's. Items that are not
    /// conversations have only turn 1.
    pub fn render_turn(
        &self,
        dataset_item: &DatasetItem,
        turn: usize,
        earlier_answers: &[String],
    ) -> Result<RenderedPrompt, String> {
        let fields = dataset_item.fields();
        let mut item = self
            .spec
            .mapping
            .apply(&dataset_item.case_id, &fields)
            .map_err(|err| err.to_string())?;
        let turns = item.input.turn_count();
        if turn == 0 || turn > turns || earlier_answers.len() != turn - 1 {
            return Err(format!(
                "has {turns} turn(s); turn {turn} with {} earlier answer(s) cannot be rendered",
                earlier_answers.len()
            ));
        }
        if let MappedInput::Messages(messages) = &item.input {
            let carries_images = messages.iter().any(|message| !message.images.is_empty());
            if carries_images && !(self.spec.template.is_empty() && self.spec.messages.is_empty()) {
                return Err(
                    "its messages carry images, which are sent only as the item's own \
                     conversation: leave the template empty"
                        .into(),
                );
            }
        }
        let parts = self.parts(&fields, &item)?;
        let body = match (&self.spec.few_shot, parts) {
            (None, Parts::Text { system, text }) => self.wrap(text, system),
            (None, Parts::Chat(messages)) => PromptBody::Chat(messages),
            (None, Parts::Turns { system, texts }) => {
                conversation_so_far(system, &texts[..turn], earlier_answers)
            }
            (Some(few_shot), Parts::Text { system, text }) => {
                self.with_shots(few_shot, &dataset_item.case_id, system, text)?
            }
            (Some(_), Parts::Chat(_) | Parts::Turns { .. }) => {
                return Err(
                    "its input is a conversation, which few-shot prompts cannot hold".into(),
                )
            }
        };
        let body = with_images(body, &item)?;
        let total = body.text_len();
        if total > MAX_PROMPT_BYTES {
            return Err(too_long(total));
        }
        if let Some(targets) = item.turn_targets.get(turn - 1) {
            item.targets = targets.clone();
        }
        Ok(RenderedPrompt { body, item })
    }

    /// Renders every turn of an item (earlier answers left empty: a check of the item and the
    /// template, not of answers yet to come) and returns how many there are.
    pub fn check_turns(&self, dataset_item: &DatasetItem) -> Result<usize, String> {
        let first = self.render(dataset_item)?;
        if let Some(likelihood) = &self.spec.likelihood {
            likelihood.item_scoring(&first)?;
        }
        if self.spec.rolling.is_some() {
            rolled_text(&first)?;
        }
        let turns = first.item.input.turn_count();
        let no_answers = vec![String::new(); turns];
        for turn in 2..=turns {
            self.render_turn(dataset_item, turn, &no_answers[..turn - 1])?;
        }
        Ok(turns)
    }

    /// The shots an item sees: the first `count` of the draw that are not the item itself.
    fn shots_for(&self, few_shot: &FewShotSpec, case_id: &str) -> Result<Vec<&Shot>, String> {
        let chosen: Vec<&Shot> = self
            .shots
            .iter()
            .filter(|shot| !(self.shots_from_same_dataset && shot.case_id == case_id))
            .take(few_shot.count as usize)
            .collect();
        if chosen.len() < few_shot.count as usize {
            return Err(format!(
                "needs {} few-shot exemplars; the exemplar dataset has {} to offer it",
                few_shot.count,
                chosen.len()
            ));
        }
        Ok(chosen)
    }

    fn with_shots(
        &self,
        few_shot: &FewShotSpec,
        case_id: &str,
        system: String,
        text: String,
    ) -> Result<PromptBody, String> {
        let shots = self.shots_for(few_shot, case_id)?;
        Ok(match few_shot.style {
            FewShotStyle::Text => {
                let mut prompt = String::new();
                for shot in shots {
                    prompt.push_str(&shot.text);
                    prompt.push_str(&few_shot.target_delimiter);
                    prompt.push_str(&shot.answer);
                    prompt.push_str(&few_shot.delimiter);
                }
                prompt.push_str(&text);
                self.wrap(prompt, system)
            }
            FewShotStyle::Turns => {
                let mut messages = Vec::with_capacity(2 * shots.len() + 2);
                if !system.is_empty() {
                    messages.push(ChatMessage {
                        role: Role::System,
                        content: system,
                        images: Vec::new(),
                    });
                }
                for shot in shots {
                    messages.push(ChatMessage {
                        role: Role::User,
                        content: shot.text.clone(),
                        images: Vec::new(),
                    });
                    messages.push(ChatMessage {
                        role: Role::Assistant,
                        content: shot.answer.clone(),
                        images: Vec::new(),
                    });
                }
                messages.push(ChatMessage {
                    role: Role::User,
                    content: text,
                    images: Vec::new(),
                });
                PromptBody::Chat(messages)
            }
        })
    }

    fn parts(&self, fields: &Map<String, Value>, item: &MappedItem) -> Result<Parts, String> {
        match &self.jinja {
            None => self.placeholder_parts(item),
            Some(jinja) => self.jinja_parts(jinja, fields, item),
        }
    }

    fn placeholder_parts(&self, item: &MappedItem) -> Result<Parts, String> {
        match (&item.input, self.spec.template.is_empty()) {
            (MappedInput::Messages(conversation), true) => {
                self.conversation_as_is(conversation, String::new())
            }
            (MappedInput::Messages(_), false) => Err(format!(
                "its input `{}` is a conversation, which {INPUT_PLACEHOLDER} cannot hold; \
                 leave the template empty to send it as it is",
                self.spec.mapping.input
            )),
            (MappedInput::Text(input), _) => Ok(Parts::Text {
                system: self.spec.system_prompt.clone(),
                text: self.placeholder_text(input)?,
            }),
            (MappedInput::Turns(turns), template_is_empty) => {
                self.chat_only("a conversation of turns")?;
                let texts = if template_is_empty {
                    turns.clone()
                } else {
                    turns
                        .iter()
                        .map(|turn| self.placeholder_text(turn))
                        .collect::<Result<_, _>>()?
                };
                Ok(Parts::Turns {
                    system: self.spec.system_prompt.clone(),
                    texts,
                })
            }
        }
    }

    /// The `{input}` template filled with one text, its length measured before rendering (a
    /// template may repeat `{input}` many times).
    fn placeholder_text(&self, input: &str) -> Result<String, String> {
        if let Some(problem) = rendered_len_problem(&self.spec.template, input.len()) {
            return Err(problem);
        }
        Ok(render_prompt(&self.spec.template, input))
    }

    /// Refuses an input only the chat API can carry, when the eval sends completions.
    fn chat_only(&self, what: &str) -> Result<(), String> {
        match self.spec.api {
            Api::Completions => Err(format!("its input is {what}, which needs the chat API")),
            Api::Chat => Ok(()),
        }
    }

    fn jinja_parts(
        &self,
        jinja: &JinjaTemplates,
        fields: &Map<String, Value>,
        item: &MappedItem,
    ) -> Result<Parts, String> {
        let variables = variables_for(fields, item);
        let system = if self.spec.system_prompt.is_empty() {
            String::new()
        } else {
            jinja.render(SYSTEM, &variables)?
        };
        if let MappedInput::Turns(turns) = &item.input {
            return self.jinja_turns(jinja, variables, system, turns);
        }
        if !self.spec.messages.is_empty() {
            let mut messages = Vec::with_capacity(self.spec.messages.len() + 1);
            if !system.is_empty() {
                messages.push(ChatMessage {
                    role: Role::System,
                    content: system,
                    images: Vec::new(),
                });
            }
            for (index, message) in self.spec.messages.iter().enumerate() {
                messages.push(ChatMessage {
                    role: message.role,
                    content: jinja.render(&message_name(index), &variables)?,
                    images: Vec::new(),
                });
            }
            return Ok(Parts::Chat(messages));
        }
        if self.spec.template.is_empty() {
            return match &item.input {
                MappedInput::Messages(conversation) => {
                    self.conversation_as_is(conversation, system)
                }
                MappedInput::Text(_) | MappedInput::Turns(_) => Err(
                    "the eval has no prompt template and its input is not a conversation".into(),
                ),
            };
        }
        Ok(Parts::Text {
            system,
            text: jinja.render(PROMPT, &variables)?,
        })
    }

    /// A conversation's turns under a Jinja template: each turn rendered with `input` bound to
    /// its text, `turn` to its number (from 1) and `turn_count` to the number of turns; with no
    /// template, the turns as they are.
    fn jinja_turns(
        &self,
        jinja: &JinjaTemplates,
        mut variables: Map<String, Value>,
        system: String,
        turns: &[String],
    ) -> Result<Parts, String> {
        self.chat_only("a conversation of turns")?;
        if !self.spec.messages.is_empty() {
            return Err(format!(
                "its input `{}` is a conversation of turns, which a message-list template \
                 cannot hold; use a prompt template (applied to each turn) or none",
                self.spec.mapping.input
            ));
        }
        if self.spec.template.is_empty() {
            return Ok(Parts::Turns {
                system,
                texts: turns.to_vec(),
            });
        }
        variables.insert("turn_count".into(), Value::from(turns.len()));
        let mut texts = Vec::with_capacity(turns.len());
        for (index, turn) in turns.iter().enumerate() {
            variables.insert("input".into(), Value::String(turn.clone()));
            variables.insert("turn".into(), Value::from(index + 1));
            texts.push(jinja.render(PROMPT, &variables)?);
        }
        Ok(Parts::Turns { system, texts })
    }

    /// A single prompt as the API takes it: the user message after any system prompt, or the
    /// completion prompt.
    fn wrap(&self, text: String, system: String) -> PromptBody {
        match self.spec.api {
            Api::Completions => PromptBody::Completion(text),
            Api::Chat => {
                let mut messages = Vec::with_capacity(2);
                if !system.is_empty() {
                    messages.push(ChatMessage {
                        role: Role::System,
                        content: system,
                        images: Vec::new(),
                    });
                }
                messages.push(ChatMessage {
                    role: Role::User,
                    content: text,
                    images: Vec::new(),
                });
                PromptBody::Chat(messages)
            }
        }
    }

    fn conversation_as_is(
        &self,
        conversation: &[ChatMessage],
        system: String,
    ) -> Result<Parts, String> {
        if self.spec.api == Api::Completions {
            return Err("its input is a conversation, which needs the chat API".into());
        }
        let mut messages = Vec::with_capacity(conversation.len() + 1);
        if !system.is_empty() {
            if conversation
                .iter()
                .any(|message| message.role == Role::System)
            {
                return Err(
                    "its conversation has its own system message, and the eval has a system \
                     prompt"
                        .into(),
                );
            }
            messages.push(ChatMessage {
                role: Role::System,
                content: system,
                images: Vec::new(),
            });
        }
        messages.extend(conversation.iter().cloned());
        Ok(Parts::Chat(messages))
    }
}

/// The request for the last of `texts`: the system prompt, then each earlier user turn with
/// the model's answer to it, then the turn itself.
fn conversation_so_far(system: String, texts: &[String], earlier_answers: &[String]) -> PromptBody {
    let mut messages = Vec::with_capacity(2 * texts.len() + 1);
    if !system.is_empty() {
        messages.push(ChatMessage {
            role: Role::System,
            content: system,
            images: Vec::new(),
        });
    }
    for (index, text) in texts.iter().enumerate() {
        messages.push(ChatMessage {
            role: Role::User,
            content: text.clone(),
            images: Vec::new(),
        });
        if let Some(answer) = earlier_answers.get(index) {
            messages.push(ChatMessage {
                role: Role::Assistant,
                content: answer.clone(),
                images: Vec::new(),
            });
        }
    }
    PromptBody::Chat(messages)
}

/// What a Jinja template sees: every field of the item by name, `item` (all of them, for
/// fields whose names the mapped ones shadow), and the mapped `input`, `target` (the answers
/// joined by " | "), `targets`, `choices` and `letters`.
fn variables_for(fields: &Map<String, Value>, item: &MappedItem) -> Map<String, Value> {
    let mut variables = fields.clone();
    variables.insert("item".into(), Value::Object(fields.clone()));
    let input = match &item.input {
        MappedInput::Text(text) => Value::String(text.clone()),
        MappedInput::Messages(messages) => {
            serde_json::to_value(messages).expect("messages always serialize")
        }
        // Each turn's own text is bound when the turn is rendered.
        MappedInput::Turns(turns) => Value::from(turns.clone()),
    };
    variables.insert("input".into(), input);
    if !item.targets.is_empty() {
        variables.insert("target".into(), Value::String(item.target_text()));
        variables.insert("targets".into(), Value::from(item.targets.clone()));
    }
    if !item.choices.is_empty() {
        variables.insert("choices".into(), Value::from(item.choices.clone()));
        let letters: Vec<String> = (0..item.choices.len())
            .filter_map(choice_letter)
            .map(String::from)
            .collect();
        variables.insert("letters".into(), Value::from(letters));
    }
    variables
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    fn item_of(value: Value) -> DatasetItem {
        DatasetItem::structured("t", fields(value))
    }

    fn mmlu() -> PromptSpec {
        PromptSpec {
            system_prompt: "You are answering {{ subject }} questions.".into(),
            mapping: FieldMapping {
                input: "question".into(),
                target: Some("answer".into()),
                choices: Some("choices".into()),
                category: Some("subject".into()),
                metadata: Vec::new(),
                shuffle_choices: None,
                images: None,
            },
            ..PromptSpec::jinja("{{ question }}\n{{ choices | lettered }}\nAnswer:")
        }
    }

    fn mmlu_item() -> Map<String, Value> {
        fields(json!({
            "question": "Capital of France?",
            "choices": ["Berlin", "Paris"],
            "answer": 1,
            "subject": "geography"
        }))
    }

    #[test]
    fn the_original_shape_renders_as_it_always_did() {
        let renderer = PromptRenderer::new(&PromptSpec::placeholder("Q: {input}\nA:")).unwrap();
        let rendered = renderer
            .render(&item_of(json!({"input": "2+2?", "target": "4"})))
            .unwrap();
        assert_eq!(rendered.body.single_user_message(), Some("Q: 2+2?\nA:"));
        assert_eq!(rendered.item.targets, vec!["4"]);
        // `{{input}}` is Jinja now, no longer the input wrapped in braces.
        let jinja = PromptRenderer::new(&PromptSpec::jinja("Q: {{input}}")).unwrap();
        let rendered = jinja
            .render(&item_of(json!({"input": "2+2?", "target": "4"})))
            .unwrap();
        assert_eq!(rendered.body.single_user_message(), Some("Q: 2+2?"));
    }

    #[test]
    fn images_go_with_the_question_and_into_the_cache_key() {
        let png = |bytes: &[u8]| crate::images::data_url("image/png", bytes);
        let spec = PromptSpec {
            system_prompt: "Look carefully.".into(),
            mapping: FieldMapping {
                input: "question".into(),
                images: Some("picture".into()),
                ..FieldMapping::default()
            },
            ..PromptSpec::jinja("{{ question }}")
        };
        let renderer = PromptRenderer::new(&spec).unwrap();
        let render = |picture: Value| {
            renderer
                .render(&item_of(
                    json!({"question": "What is it?", "picture": picture, "target": "cat"}),
                ))
                .map(|rendered| rendered.body)
        };
        let body = render(json!(png(b"cat"))).unwrap();
        let PromptBody::Chat(messages) = &body else {
            panic!("{body:?}")
        };
        assert!(messages[0].images.is_empty(), "not with the system prompt");
        assert_eq!(messages[1].images, vec![png(b"cat")]);
        assert_eq!(body.images(), vec![png(b"cat")]);
        assert!(body.as_text().ends_with("What is it?\n[1 image]"));
        let fingerprint = crate::manifest::EndpointFingerprint {
            served_model: Some("vision".into()),
            engine_build: String::new(),
            parallel_layout: String::new(),
            probe_error: None,
        };
        let settings = crate::manifest::GenerationSettings::basic(16, 0.0, 1);
        let key =
            |body: &PromptBody| crate::expansion::request_key(&fingerprint, body, &settings, 0);
        assert_ne!(key(&body), key(&render(json!([png(b"dog")])).unwrap()));
        // Links and non-images are refused when the item is read.
        let refused = render(json!("https://example.com/cat.png")).unwrap_err();
        assert!(
            refused.contains("`picture`") && refused.contains("data URL"),
            "{refused}"
        );
        let completions = PromptRenderer::new(&PromptSpec {
            api: Api::Completions,
            system_prompt: String::new(),
            ..spec.clone()
        })
        .unwrap();
        let refused = completions
            .render(&item_of(
                json!({"question": "Q", "picture": png(b"cat"), "target": "cat"}),
            ))
            .unwrap_err();
        assert!(refused.contains("chat API"), "{refused}");
        // Few-shot shots would lose their images: refused until they can carry them.
        let with_shots = PromptSpec {
            few_shot: Some(FewShotSpec {
                dataset_id: crate::ids::DatasetId(1),
                count: 1,
                seed: 0,
                style: FewShotStyle::Text,
                delimiter: "\n\n".into(),
                target_delimiter: " ".into(),
                in_order: false,
            }),
            ..spec.clone()
        };
        assert!(with_shots.validate().unwrap_err().contains("images"));
        // An item's own conversation with images is sent as it is, never through a template.
        let conversation = json!([{"role": "user", "content": [{"type": "text", "text": "What is it?"}, {"type": "image", "image": png(b"cat")}]}]);
        let templated = PromptRenderer::new(&PromptSpec::jinja("{{ input }}")).unwrap();
        let refused = templated
            .render(&item_of(
                json!({"input": conversation.clone(), "target": "cat"}),
            ))
            .unwrap_err();
        assert!(refused.contains("leave the template empty"), "{refused}");
        let as_is = PromptRenderer::new(&PromptSpec::jinja("")).unwrap();
        let body = as_is
            .render(&item_of(json!({"input": conversation, "target": "cat"})))
            .unwrap()
            .body;
        assert_eq!(body.images(), vec![png(b"cat")]);
    }

    #[test]
    fn structured_items_render_with_a_system_prompt_and_lettered_choices() {
        let rendered = PromptRenderer::new(&mmlu())
            .unwrap()
            .render(&DatasetItem::structured("t", mmlu_item()))
            .unwrap();
        assert_eq!(
            rendered.body,
            PromptBody::Chat(vec![
                ChatMessage {
                    role: Role::System,
                    content: "You are answering geography questions.".into(),
                    images: Vec::new(),
                },
                ChatMessage {
                    role: Role::User,
                    content: "Capital of France?\nA. Berlin\nB. Paris\nAnswer:".into(),
                    images: Vec::new(),
                },
            ])
        );
        assert_eq!(rendered.item.targets, vec!["B"]);
        assert_eq!(rendered.item.category, "geography");
    }

    #[test]
    fn completions_send_one_text_and_refuse_chat_only_parts() {
        let spec = PromptSpec {
            api: Api::Completions,
            ..PromptSpec::jinja("Question: {{ input }}\nAnswer:")
        };
        let rendered = PromptRenderer::new(&spec)
            .unwrap()
            .render(&item_of(json!({"input": "2+2?", "target": "4"})))
            .unwrap();
        assert_eq!(
            rendered.body,
            PromptBody::Completion("Question: 2+2?\nAnswer:".into())
        );
        let with_system = PromptSpec {
            system_prompt: "Be brief.".into(),
            ..spec
        };
        assert!(with_system.validate().unwrap_err().contains("chat API"));
    }

    #[test]
    fn message_lists_render_every_turn() {
        let spec = PromptSpec {
            messages: vec![
                MessageTemplate {
                    role: Role::User,
                    content: "What is 1+1?".into(),
                },
                MessageTemplate {
                    role: Role::Assistant,
                    content: "2".into(),
                },
                MessageTemplate {
                    role: Role::User,
                    content: "What is {{ input }}?".into(),
                },
            ],
            ..PromptSpec::jinja("")
        };
        let rendered = PromptRenderer::new(&spec)
            .unwrap()
            .render(&item_of(json!({"input": "2+2", "target": "4"})))
            .unwrap();
        let PromptBody::Chat(messages) = rendered.body else {
            panic!("chat")
        };
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[2].content, "What is 2+2?");
        let ends_with_assistant = PromptSpec {
            messages: spec.messages[..2].to_vec(),
            ..spec
        };
        assert!(ends_with_assistant.validate().is_err());
    }

    #[test]
    fn conversations_in_items_are_sent_as_they_are() {
        let renderer = PromptRenderer::new(&PromptSpec {
            system_prompt: "Be kind.".into(),
            ..PromptSpec::jinja("")
        })
        .unwrap();
        let rendered = renderer
            .render(&item_of(json!({
                "input": [{"role": "user", "content": "Hi"}],
                "target": "hello"
            })))
            .unwrap();
        assert_eq!(rendered.body.text_len(), "Be kind.".len() + 2);
        assert!(rendered.body.single_user_message().is_none());
        let placeholder = PromptRenderer::new(&PromptSpec::placeholder("Q: {input}")).unwrap();
        let refused = placeholder
            .render(&item_of(
                json!({"input": [{"role": "user", "content": "Hi"}], "target": "x"}),
            ))
            .unwrap_err();
        assert!(refused.contains("is a conversation"), "{refused}");
    }

    fn mt_bench_item() -> DatasetItem {
        item_of(json!({
            "turns": ["Write a haiku about rain.", "Now make it about snow."],
            "category": "writing"
        }))
    }

    fn conversation_spec(spec: PromptSpec) -> PromptSpec {
        PromptSpec {
            system_prompt: "Be brief.".into(),
            mapping: FieldMapping {
                input: "turns".into(),
                ..FieldMapping::default()
            },
            ..spec
        }
    }

    #[test]
    fn later_turns_carry_the_models_own_earlier_answers() {
        let renderer = PromptRenderer::new(&conversation_spec(PromptSpec::jinja(""))).unwrap();
        let item = mt_bench_item();
        let first = renderer.render(&item).unwrap();
        assert_eq!(first.item.input.turn_count(), 2);
        let message = |role, content: &str| ChatMessage {
            role,
            content: content.into(),
            images: Vec::new(),
        };
        assert_eq!(
            first.body,
            PromptBody::Chat(vec![
                message(Role::System, "Be brief."),
                message(Role::User, "Write a haiku about rain."),
            ])
        );
        let second = renderer
            .render_turn(&item, 2, &["Drops on the window".into()])
            .unwrap();
        assert_eq!(
            second.body,
            PromptBody::Chat(vec![
                message(Role::System, "Be brief."),
                message(Role::User, "Write a haiku about rain."),
                message(Role::Assistant, "Drops on the window"),
                message(Role::User, "Now make it about snow."),
            ])
        );
        // A turn needs exactly its earlier answers, and exists.
        assert!(renderer.render_turn(&item, 2, &[]).is_err());
        assert!(renderer
            .render_turn(&item, 3, &["a".into(), "b".into()])
            .is_err());
        assert_eq!(renderer.check_turns(&item).unwrap(), 2);
    }

    #[test]
    fn each_turn_is_rendered_by_the_template_with_its_number() {
        let jinja = PromptRenderer::new(&conversation_spec(PromptSpec::jinja(
            "[{{ category }} {{ turn }}/{{ turn_count }}] {{ input }}",
        )))
        .unwrap();
        let second = jinja
            .render_turn(&mt_bench_item(), 2, &["rain haiku".into()])
            .unwrap();
        let PromptBody::Chat(messages) = second.body else {
            panic!("a chat")
        };
        assert_eq!(
            messages[1].content,
            "[writing 1/2] Write a haiku about rain."
        );
        assert_eq!(messages[3].content, "[writing 2/2] Now make it about snow.");
        let placeholder =
            PromptRenderer::new(&conversation_spec(PromptSpec::placeholder("Q: {input}"))).unwrap();
        let first = placeholder.render(&mt_bench_item()).unwrap();
        let PromptBody::Chat(messages) = first.body else {
            panic!("a chat")
        };
        assert_eq!(messages[1].content, "Q: Write a haiku about rain.");
    }

    #[test]
    fn conversations_of_turns_need_the_chat_api_and_no_message_list() {
        let completions = PromptSpec {
            api: Api::Completions,
            system_prompt: String::new(),
            ..conversation_spec(PromptSpec::jinja("{{ input }}"))
        };
        let refused = PromptRenderer::new(&completions)
            .unwrap()
            .render(&mt_bench_item())
            .unwrap_err();
        assert_eq!(
            refused,
            "its input is a conversation of turns, which needs the chat API"
        );
        let message_list = PromptSpec {
            messages: vec![MessageTemplate {
                role: Role::User,
                content: "{{ input }}".into(),
            }],
            system_prompt: String::new(),
            ..conversation_spec(PromptSpec::jinja(""))
        };
        let refused = PromptRenderer::new(&message_list)
            .unwrap()
            .render(&mt_bench_item())
            .unwrap_err();
        assert!(
            refused.contains("a message-list template cannot hold"),
            "{refused}"
        );
    }

    #[test]
    fn bad_items_are_refused_with_the_field_named() {
        let renderer = PromptRenderer::new(&mmlu()).unwrap();
        let mut item = mmlu_item();
        item.remove("subject");
        // The mapping reads a missing category as none, but the system prompt needs it.
        assert_eq!(
            renderer
                .render(&DatasetItem::structured("t", item))
                .unwrap_err(),
            "the system prompt uses `subject`, which the item does not have"
        );
        let mut item = mmlu_item();
        item.insert("answer".into(), json!(5));
        assert!(renderer
            .render(&DatasetItem::structured("t", item))
            .unwrap_err()
            .contains("out of range for 2 choices"));
    }

    fn shots(count: u32, style: FewShotStyle) -> (PromptSpec, Exemplars) {
        let spec = PromptSpec {
            few_shot: Some(FewShotSpec {
                dataset_id: crate::ids::DatasetId(1),
                count,
                seed: 0,
                style,
                delimiter: "\n\n".into(),
                target_delimiter: " ".into(),
                in_order: false,
            }),
            ..PromptSpec::jinja("Q: {{ input }}\nA:")
        };
        let exemplars = Exemplars {
            dataset_id: crate::ids::DatasetId(1),
            dataset_revision: "sha256:x".into(),
            items: ["e1", "e2", "e3"]
                .iter()
                .map(|id| {
                    DatasetItem::four_field(
                        *id,
                        format!("question {id}"),
                        format!("answer {id}"),
                        "",
                    )
                })
                .collect(),
        };
        (spec, exemplars)
    }

    #[test]
    fn few_shot_text_follows_the_harness_layout() {
        let (spec, exemplars) = shots(2, FewShotStyle::Text);
        let renderer = PromptRenderer::new(&spec)
            .unwrap()
            .with_exemplars(&exemplars, crate::ids::DatasetId(2))
            .unwrap();
        let rendered = renderer
            .render(&DatasetItem::four_field("x", "2+2?", "4", ""))
            .unwrap();
        assert_eq!(
            rendered.body.single_user_message(),
            Some("Q: question e1\nA: answer e1\n\nQ: question e2\nA: answer e2\n\nQ: 2+2?\nA:")
        );
        // Without the frozen draw, a few-shot eval renders nothing.
        assert!(PromptRenderer::new(&spec)
            .unwrap()
            .render(&DatasetItem::four_field("x", "2+2?", "4", ""))
            .unwrap_err()
            .contains("needs 2 few-shot exemplars"));
    }

    #[test]
    fn few_shot_turns_are_earlier_messages_and_an_item_never_sees_itself() {
        let (spec, exemplars) = shots(2, FewShotStyle::Turns);
        // Drawn from the evaluated dataset: e1 is asked with e2 and the spare e3.
        let renderer = PromptRenderer::new(&spec)
            .unwrap()
            .with_exemplars(&exemplars, crate::ids::DatasetId(1))
            .unwrap();
        let rendered = renderer.render(&exemplars.items[0]).unwrap();
        let PromptBody::Chat(messages) = rendered.body else {
            panic!("chat")
        };
        let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            contents,
            [
                "Q: question e2\nA:",
                "answer e2",
                "Q: question e3\nA:",
                "answer e3",
                "Q: question e1\nA:"
            ]
        );
        assert_eq!(messages[1].role, Role::Assistant);
        let completions = PromptSpec {
            api: Api::Completions,
            ..spec
        };
        assert!(completions.validate().unwrap_err().contains("chat API"));
    }

    #[test]
    fn syntax_is_detected_for_clients_that_do_not_say() {
        assert_eq!(
            TemplateSyntax::detect("Q: {input}\nA:"),
            TemplateSyntax::Placeholder
        );
        assert_eq!(
            TemplateSyntax::detect("Q: {{ input }}"),
            TemplateSyntax::Jinja
        );
        assert_eq!(TemplateSyntax::detect("{{input}}"), TemplateSyntax::Jinja);
        assert_eq!(TemplateSyntax::detect("Say hello."), TemplateSyntax::Jinja);
        assert_eq!(
            TemplateSyntax::detect_in(["Q: {input}", "You answer {{ subject }} questions."]),
            TemplateSyntax::Jinja,
            "a Jinja system prompt makes the eval Jinja"
        );
        assert_eq!(
            TemplateSyntax::detect_in(["Q: {input}", "Be brief."]),
            TemplateSyntax::Placeholder
        );
    }
}
