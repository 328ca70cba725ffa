//! Planning a run's result identities: generation cache keys, expected cost and shard.
//!
//! Pure. The launcher streams dataset items through [`plan_identities`] chunk by chunk, so a
//! million-item run never holds its items in memory.

use crate::dataset::DatasetItem;
use crate::likelihood::{scoring_key, ItemScoring};
use crate::manifest::{EndpointFingerprint, GenerationSettings, Manifest};
use crate::prompt::{Api, PromptBody, PromptRenderer};
use crate::rolling::{rolling_key, RollingSpec};
use sha2::{Digest, Sha256};

/// Shards a run's identities fall into (by a stable hash of the case id).
pub const SHARD_COUNT: u64 = 1024;

/// One result identity to create, before it has an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedIdentity {
    pub case_id: String,
    pub repetition: i64,
    /// The dataset item's category, kept on the identity so reports break down by it.
    pub category: String,
    /// Expected tokens (prompt estimate + observed or budgeted completion): claimed longest
    /// first.
    pub cost: i64,
    pub shard: i64,
    /// The request's cache key; `None` for later turns of a conversation, whose requests carry
    /// the model's earlier answers and are keyed by the worker that sends them.
    pub generation_key: Option<String>,
    /// The item's acceptable answers under the eval's mapping (for grading cached answers).
    pub targets: Vec<String>,
    /// The turn of a conversation (from 1; 1 for items that are not conversations), and how
    /// many turns the conversation has.
    pub turn: i64,
    pub turns: i64,
}

/// SHA-256 (hex) of length-prefixed fields: no two different field lists hash the same byte
/// stream.
pub(crate) fn fields_hash<'a>(fields: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hasher = Sha256::new();
    for bytes in fields {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hex::encode(hasher.finalize())
}

/// The seed sent for repetition `r`: each repetition is its own sample.
pub fn seed_for(settings: &GenerationSettings, repetition: i64) -> u64 {
    settings.seed.wrapping_add(repetition as u64)
}

/// Content hash of everything that determines a generation: endpoint fingerprint, rendered
/// prompt bytes, sampling parameters, seed and repetition. Fields are length-prefixed so no
/// two different inputs can produce the same byte stream.
pub fn generation_key(
    fingerprint: &EndpointFingerprint,
    prompt: &str,
    settings: &GenerationSettings,
    repetition: i64,
) -> String {
    let mut hasher = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(b"arbiter-generation-v1");
    let fingerprint = serde_json::to_vec(fingerprint).expect("fingerprints always serialize");
    field(&fingerprint);
    field(prompt.as_bytes());
    field(&settings.max_tokens.to_le_bytes());
    field(&settings.temperature.to_le_bytes());
    field(&seed_for(settings, repetition).to_le_bytes());
    field(&repetition.to_le_bytes());
    hex::encode(hasher.finalize())
}

/// The cache key of one rendered request. A request of the original shape (one user message,
/// only the original three settings) keeps the key Arbiter has always given it, so answers
/// cached before templates and sampling options existed are still found; any other request is
/// keyed by its whole body (API, every message with its role, and every setting), so only an
/// identical request ever hits the cache.
pub fn request_key(
    fingerprint: &EndpointFingerprint,
    body: &PromptBody,
    settings: &GenerationSettings,
    repetition: i64,
) -> String {
    if let (Some(prompt), true) = (body.single_user_message(), settings.is_basic()) {
        return generation_key(fingerprint, prompt, settings, repetition);
    }
    let mut hasher = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(b"arbiter-generation-v2");
    field(&serde_json::to_vec(fingerprint).expect("fingerprints always serialize"));
    let api = match body {
        PromptBody::Chat(_) => Api::Chat,
        PromptBody::Completion(_) => Api::Completions,
    };
    field(api.as_str().as_bytes());
    // Serialized JSON is unambiguous (roles and contents are quoted and escaped), and maps
    // serialize with sorted keys.
    field(&serde_json::to_vec(body).expect("prompt bodies always serialize"));
    field(&serde_json::to_vec(settings).expect("settings always serialize"));
    field(&seed_for(settings, repetition).to_le_bytes());
    field(&repetition.to_le_bytes());
    hex::encode(hasher.finalize())
}

/// A stable shard for a case id: xxh3 (fixed seed), never a per-process randomised hash.
pub fn shard_of(case_id: &str) -> i64 {
    (xxhash_rust::xxh3::xxh3_64(case_id.as_bytes()) % SHARD_COUNT) as i64
}

/// Tokens a request is expected to cost before anything is known about the case: about four
/// characters a prompt token, plus the whole completion budget.
pub fn estimated_cost(prompt: &str, max_tokens: u32) -> i64 {
    (prompt.len() as u64).div_ceil(4) as i64 + i64::from(max_tokens)
}

/// An [`estimated_cost`] refined by the completion tokens the case was seen to take in earlier
/// runs: the budget part is replaced by the observation (capped by the budget). Nonsense
/// observations leave the estimate as it was.
pub fn refined_cost(estimated: i64, max_tokens: u32, observed_completion: f64) -> i64 {
    if !observed_completion.is_finite() || observed_completion < 0.0 {
        return estimated;
    }
    let completion = observed_completion.round().min(f64::from(max_tokens)) as i64;
    estimated - i64::from(max_tokens) + completion
}

/// The identities of `items` at one repetition under `manifest`, each prompt rendered by
/// `renderer` (the manifest's, compiled once). The launcher plans every item at repetition 0
/// before any at repetition 1, so that (cost being equal) every case gets a first answer
/// before any gets a second. A conversation makes one identity per turn, in turn order; only
/// its first turn's request is known now. An item that cannot be rendered is an error naming
/// it.
pub fn plan_identities(
    manifest: &Manifest,
    renderer: &PromptRenderer,
    items: &[DatasetItem],
    repetition: i64,
) -> Result<Vec<PlannedIdentity>, String> {
    let settings = &manifest.eval.generation;
    // Rolling documents are keyed by the prefix the launch froze: two servers that agree on
    // everything else but their special tokens score differently.
    let rolling_spec = manifest
        .eval
        .prompt
        .rolling
        .as_ref()
        .map(|rolling| RollingSpec {
            prefix_token: manifest.rolling_prefix_token.or(rolling.prefix_token),
            ..rolling.clone()
        });
    let mut planned = Vec::with_capacity(items.len());
    for item in items {
        let rendered = renderer
            .render(item)
            .map_err(|problem| format!("item `{}` {problem}", item.case_id))?;
        // A likelihood eval sends one request per choice, each the whole text and one token.
        let scoring = match &manifest.eval.prompt.likelihood {
            Some(likelihood) => Some(
                likelihood
                    .item_scoring(&rendered)
                    .map_err(|problem| format!("item `{}` {problem}", item.case_id))?,
            ),
            None => None,
        };
        let rolling = match &rolling_spec {
            Some(rolling) => Some((
                rolling,
                crate::prompt::request::rolled_text(&rendered)
                    .map_err(|problem| format!("item `{}` {problem}", item.case_id))?,
            )),
            None => None,
        };
        let first_request = match (&scoring, rolling) {
            (Some(scoring), _) => FirstRequest::Choices(scoring),
            (None, Some((spec, text))) => FirstRequest::Rolling(spec, text),
            (None, None) => FirstRequest::Generated,
        };
        let generation_key = first_request_key(
            &manifest.fingerprint,
            &first_request,
            &rendered.body,
            settings,
            repetition,
        );
        let cost = match &first_request {
            FirstRequest::Choices(scoring) => scoring
                .requests
                .iter()
                .map(|request| estimated_cost(&request.text, 1))
                .sum(),
            FirstRequest::Rolling(spec, text) => rolling_cost(spec, text),
            FirstRequest::Generated => estimated_cost_of(&rendered.body, settings.max_tokens),
        };
        let first = PlannedIdentity {
            case_id: item.case_id.clone(),
            repetition,
            category: rendered.item.category.clone(),
            cost,
            shard: shard_of(&item.case_id),
            generation_key: Some(generation_key),
            targets: rendered.item.targets.clone(),
            turn: 1,
            turns: rendered.item.input.turn_count() as i64,
        };
        // A later turn costs its conversation so far: every earlier turn and a full answer to
        // each (the budget, as for any unseen case).
        let later_turns: Vec<PlannedIdentity> = rendered
            .item
            .turn_targets
            .iter()
            .enumerate()
            .skip(1)
            .map(|(index, targets)| PlannedIdentity {
                cost: first.cost * (index as i64 + 1),
                generation_key: None,
                targets: targets.clone(),
                turn: index as i64 + 1,
                ..first.clone()
            })
            .collect();
        planned.push(first);
        planned.extend(later_turns);
    }
    Ok(planned)
}

/// What an identity's first request is: a generation, a likelihood eval's choices, or a
/// rolling eval's document.
pub enum FirstRequest<'a> {
    Generated,
    Choices(&'a ItemScoring),
    Rolling(&'a RollingSpec, &'a str),
}

/// The cache key of an identity's first request: a likelihood eval's (the context and every
/// choice), a rolling eval's (the document and its windowing) or any other's (the rendered
/// body). Launches and previews both key by it, so a preview shows the key a launch would use.
pub fn first_request_key(
    fingerprint: &EndpointFingerprint,
    request: &FirstRequest<'_>,
    body: &PromptBody,
    settings: &GenerationSettings,
    repetition: i64,
) -> String {
    match request {
        FirstRequest::Choices(scoring) => scoring_key(
            fingerprint,
            &scoring.context,
            &scoring.continuations,
            repetition,
        ),
        FirstRequest::Rolling(spec, text) => rolling_key(fingerprint, text, spec, repetition),
        FirstRequest::Generated => request_key(fingerprint, body, settings, repetition),
    }
}

/// The planner's estimate for a rolling document: every window's tokens (a token per four
/// bytes, as [`estimated_cost`]) and the one each generates.
fn rolling_cost(spec: &RollingSpec, text: &str) -> i64 {
    let tokens = (text.len() as u64).div_ceil(4).max(1);
    let windows = tokens.div_ceil(u64::from(spec.stride().max(1)));
    let per_window = tokens.min(u64::from(spec.max_length)) + 1;
    i64::try_from(windows * per_window).unwrap_or(i64::MAX)
}

/// [`estimated_cost`] of a rendered request: its text bytes as the prompt.
pub fn estimated_cost_of(body: &PromptBody, max_tokens: u32) -> i64 {
    (body.text_len() as u64).div_ceil(4) as i64 + i64::from(max_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(model: &str) -> EndpointFingerprint {
        EndpointFingerprint {
            served_model: Some(model.into()),
            engine_build: "vllm 0.6".into(),
            parallel_layout: "tp=1".into(),
            probe_error: None,
        }
    }

    fn settings() -> GenerationSettings {
        GenerationSettings::basic(64, 0.0, 7)
    }

    fn user(text: &str) -> PromptBody {
        PromptBody::Chat(vec![crate::fields::ChatMessage {
            role: crate::fields::Role::User,
            content: text.into(),
            images: Vec::new(),
        }])
    }

    #[test]
    fn requests_of_the_original_shape_keep_their_key_and_others_key_their_whole_body() {
        let fingerprint = fingerprint("m");
        assert_eq!(
            request_key(&fingerprint, &user("Q: 1+1?"), &settings(), 0),
            generation_key(&fingerprint, "Q: 1+1?", &settings(), 0)
        );
        let completion = PromptBody::Completion("Q: 1+1?".into());
        let with_system = PromptBody::Chat(vec![
            crate::fields::ChatMessage {
                role: crate::fields::Role::System,
                content: "Be brief.".into(),
                images: Vec::new(),
            },
            crate::fields::ChatMessage {
                role: crate::fields::Role::User,
                content: "Q: 1+1?".into(),
                images: Vec::new(),
            },
        ]);
        let mut with_stop = settings();
        with_stop.sampling.stop = vec!["\n".into()];
        let keys = [
            request_key(&fingerprint, &user("Q: 1+1?"), &settings(), 0),
            request_key(&fingerprint, &completion, &settings(), 0),
            request_key(&fingerprint, &with_system, &settings(), 0),
            request_key(&fingerprint, &user("Q: 1+1?"), &with_stop, 0),
            request_key(&fingerprint, &completion, &with_stop, 0),
            request_key(&fingerprint, &completion, &with_stop, 1),
        ];
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{keys:?}");
        assert_eq!(
            keys[4],
            request_key(&fingerprint, &completion, &with_stop, 0),
            "identical requests share a key"
        );
    }

    #[test]
    fn generation_keys_change_with_every_input_that_changes_the_answer() {
        let base = generation_key(&fingerprint("m"), "Q: 1+1?", &settings(), 0);
        assert_eq!(
            base,
            generation_key(&fingerprint("m"), "Q: 1+1?", &settings(), 0)
        );
        assert_eq!(base.len(), 64);
        assert_ne!(
            base,
            generation_key(&fingerprint("m2"), "Q: 1+1?", &settings(), 0)
        );
        assert_ne!(
            base,
            generation_key(&fingerprint("m"), "Q: 1+1? ", &settings(), 0)
        );
        assert_ne!(
            base,
            generation_key(&fingerprint("m"), "Q: 1+1?", &settings(), 1)
        );
        let mut hotter = settings();
        hotter.temperature = 0.7;
        assert_ne!(
            base,
            generation_key(&fingerprint("m"), "Q: 1+1?", &hotter, 0)
        );
        let mut other_build = fingerprint("m");
        other_build.engine_build = "vllm 0.7".into();
        assert_ne!(
            base,
            generation_key(&other_build, "Q: 1+1?", &settings(), 0)
        );
    }

    #[test]
    fn a_conversation_plans_one_identity_per_turn_and_keys_only_the_first() {
        let manifest = Manifest::example();
        let spec = crate::prompt::PromptSpec {
            mapping: crate::fields::FieldMapping {
                input: "turns".into(),
                target: Some("reference".into()),
                ..crate::fields::FieldMapping::default()
            },
            ..crate::prompt::PromptSpec::jinja("")
        };
        let renderer = PromptRenderer::new(&spec).unwrap();
        let fields = |value: serde_json::Value| match value {
            serde_json::Value::Object(map) => map,
            _ => unreachable!(),
        };
        let items = [
            DatasetItem::structured(
                "c1",
                fields(
                    serde_json::json!({"turns": ["a", "b", "c"], "reference": ["1", null, "3"]}),
                ),
            ),
            DatasetItem::structured("c2", fields(serde_json::json!({"turns": ["only"]}))),
        ];
        let planned = plan_identities(&manifest, &renderer, &items, 1).unwrap();
        let turns: Vec<(&str, i64, i64, bool)> = planned
            .iter()
            .map(|p| {
                (
                    p.case_id.as_str(),
                    p.turn,
                    p.turns,
                    p.generation_key.is_some(),
                )
            })
            .collect();
        assert_eq!(
            turns,
            vec![
                ("c1", 1, 3, true),
                ("c1", 2, 3, false),
                ("c1", 3, 3, false),
                ("c2", 1, 1, true)
            ]
        );
        assert_eq!(planned[0].targets, vec!["1"]);
        assert!(planned[1].targets.is_empty());
        assert_eq!(planned[2].targets, vec!["3"]);
        assert!(planned[2].cost > planned[1].cost && planned[1].cost > planned[0].cost);
        assert!(planned.iter().all(|p| p.repetition == 1));
    }

    #[test]
    fn shards_are_stable_across_processes() {
        // Fixed values: a process-randomised hash would fail this on the next run.
        assert_eq!(shard_of("arith-001"), shard_of("arith-001"));
        assert_eq!(
            shard_of(""),
            (xxhash_rust::xxh3::xxh3_64(b"") % SHARD_COUNT) as i64
        );
        assert!((0..SHARD_COUNT as i64).contains(&shard_of("anything")));
        let spread: std::collections::HashSet<i64> =
            (0..1000).map(|i| shard_of(&format!("case-{i}"))).collect();
        assert!(
            spread.len() > 400,
            "1000 ids should use many shards, got {}",
            spread.len()
        );
    }

    #[test]
    fn longer_prompts_and_budgets_cost_more() {
        assert_eq!(estimated_cost("abcd", 10), 11);
        assert_eq!(estimated_cost("abcde", 10), 12);
        assert!(estimated_cost(&"x".repeat(4000), 64) > estimated_cost("short", 64));
    }

    #[test]
    fn observed_lengths_refine_the_estimate_within_the_budget() {
        let estimated = estimated_cost("abcd", 100);
        assert_eq!(refined_cost(estimated, 100, 7.4), 1 + 7);
        assert_eq!(
            refined_cost(estimated, 100, 500.0),
            1 + 100,
            "capped by the budget"
        );
        assert_eq!(refined_cost(estimated, 100, f64::NAN), estimated);
        assert_eq!(refined_cost(estimated, 100, -3.0), estimated);
        // A short prompt seen to answer at length now goes before a long, terse one.
        let verbose = refined_cost(estimated_cost("Why?", 512), 512, 400.0);
        let terse = refined_cost(estimated_cost(&"x".repeat(800), 512), 512, 3.0);
        assert!(verbose > terse);
        assert!(
            estimated_cost("Why?", 512) > terse,
            "unseen cases keep the budget"
        );
    }
}
