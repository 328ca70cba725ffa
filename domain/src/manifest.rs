//! Eval definitions and the frozen manifest a run is launched from.
//!
//! A manifest pins everything that determines a run's results; its content hash is the run's
//! identity, so launching an unchanged manifest twice finds the same run. Pure: no I/O.

use crate::ids::{CheckpointId, DatasetId, EvalId, RevisionId};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::grading::triage::FrozenTriage;
use crate::grading::{GraderSpec, EXACT_MATCH_GRADER};
use crate::prompt::PromptSpec;
pub use crate::sampling::SamplingOptions;

/// Sampling settings sent with every generation request of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerationSettings {
    pub max_tokens: u32,
    pub temperature: f64,
    /// Base seed; repetition `r` of a case is sampled with `seed + r`.
    pub seed: u64,
    /// Settings beyond the original three, absent from manifests when unset (so manifests
    /// frozen before they existed keep their hashes).
    #[serde(flatten)]
    pub sampling: SamplingOptions,
}

impl GenerationSettings {
    /// The original three settings, nothing else.
    pub fn basic(max_tokens: u32, temperature: f64, seed: u64) -> GenerationSettings {
        GenerationSettings {
            max_tokens,
            temperature,
            seed,
            sampling: SamplingOptions::default(),
        }
    }

    /// Whether only the original three settings are set (such requests keep their cache key).
    pub fn is_basic(&self) -> bool {
        self.sampling == SamplingOptions::default()
    }
}

/// What a researcher defines before launching: the eval without a checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalSpec {
    pub name: String,
    /// The prompt template and its optional parts (system prompt, message list, API, field
    /// mapping), written inline: an eval of the original shape serializes as it always did.
    #[serde(flatten)]
    pub prompt: PromptSpec,
    /// The deterministic grader that runs first on every answer. Exact match is written as its
    /// id, `exact_match@1`, as manifests were before graders were data: an unchanged eval keeps
    /// its manifest hash, so relaunching it still finds its run.
    #[serde(
        serialize_with = "exact_match_as_legacy_id",
        deserialize_with = "grader_or_legacy_id"
    )]
    pub grader: GraderSpec,
    pub generation: GenerationSettings,
    pub repetitions: u32,
}

pub const MAX_REPETITIONS: u32 = 100;
pub const MAX_TOKENS_LIMIT: u32 = 32_768;

impl EvalSpec {
    /// Checks a researcher's definition, returning the first problem in plain words.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() || self.name.len() > 200 {
            return Err("an eval needs a name of 1 to 200 characters".into());
        }
        self.prompt.validate()?;
        self.grader
            .validate()
            .map_err(|problem| format!("the grader is invalid: {problem}"))?;
        if self.generation.max_tokens == 0 || self.generation.max_tokens > MAX_TOKENS_LIMIT {
            return Err(format!(
                "max tokens must be between 1 and {MAX_TOKENS_LIMIT}"
            ));
        }
        if !(0.0..=2.0).contains(&self.generation.temperature) {
            return Err("temperature must be between 0 and 2".into());
        }
        self.generation.sampling.validate()?;
        if let Some(min_tokens) = self.generation.sampling.extra.get("min_tokens") {
            if min_tokens.as_u64().unwrap_or(0) > u64::from(self.generation.max_tokens) {
                return Err(format!(
                    "min_tokens ({min_tokens}) is more than max tokens ({}); every request would be refused",
                    self.generation.max_tokens
                ));
            }
        }
        if self.repetitions == 0 || self.repetitions > MAX_REPETITIONS {
            return Err(format!(
                "repetitions must be between 1 and {MAX_REPETITIONS}"
            ));
        }
        if self.prompt.rolling.is_some() && self.repetitions > 1 {
            return Err("rolling likelihood scores the same every time; use one repetition".into());
        }
        Ok(())
    }
}

fn exact_match_as_legacy_id<S: serde::Serializer>(
    grader: &GraderSpec,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match grader {
        GraderSpec::ExactMatch {} => serializer.serialize_str(EXACT_MATCH_GRADER),
        other => other.serialize(serializer),
    }
}

/// Reads a grader spec, or the foundation's grader id (`exact_match@1`) that manifests frozen
/// before graders were described as data still hold.
fn grader_or_legacy_id<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<GraderSpec, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum SpecOrId {
        Spec(GraderSpec),
        Id(String),
    }
    match SpecOrId::deserialize(deserializer)? {
        SpecOrId::Spec(spec) => Ok(spec),
        SpecOrId::Id(id) if id == EXACT_MATCH_GRADER => Ok(GraderSpec::ExactMatch {}),
        SpecOrId::Id(id) => Err(serde::de::Error::custom(format!("unknown grader `{id}`"))),
    }
}

/// Reads a grader as stored in an eval row: a JSON spec, or the foundation's grader id.
pub fn parse_stored_grader(text: &str) -> Result<GraderSpec, String> {
    if text == EXACT_MATCH_GRADER {
        return Ok(GraderSpec::ExactMatch {});
    }
    serde_json::from_str(text).map_err(|err| format!("unreadable grader spec: {err}"))
}

/// What identifies the model behind an endpoint, as far as results are concerned: the served
/// model (from `/v1/models`) plus what the user declares about the engine. Part of every
/// generation cache key, so a changed engine or layout never reuses old answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointFingerprint {
    /// The id `/v1/models` reported for the requested model; `None` if the probe failed.
    pub served_model: Option<String>,
    pub engine_build: String,
    pub parallel_layout: String,
    /// Why the probe failed, when it did (such runs still launch and report their errors).
    pub probe_error: Option<String>,
}

/// A checkpoint tried once when every retry on the primary has failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackTarget {
    pub checkpoint_name: String,
    pub endpoint_url: String,
    pub served_model: String,
}

/// Everything that determines a run's results, frozen at launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub eval_id: EvalId,
    pub eval: EvalSpec,
    pub dataset_id: DatasetId,
    pub dataset_revision_id: RevisionId,
    pub dataset_revision: String,
    pub case_count: u64,
    pub checkpoint_id: CheckpointId,
    pub checkpoint_name: String,
    /// The primary endpoint first, then replicas serving the same checkpoint.
    pub endpoint_urls: Vec<String>,
    pub served_model: String,
    pub fingerprint: EndpointFingerprint,
    pub fallback: Option<FallbackTarget>,
    /// The eval's triage policy and judges at launch; `None` when it has none (undecided items
    /// then go straight to humans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triage: Option<FrozenTriage>,
    /// The eval's few-shot exemplars as drawn at launch (the items themselves, so the run's
    /// identity says exactly which shots were used); `None` without few-shot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exemplars: Option<crate::prompt::few_shot::Exemplars>,
    /// When the items are conversations: their turns in all, each its own result identity at
    /// every repetition; `None` when every item is one request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_turns: Option<u64>,
    /// The sandbox a `code_tests` grader runs the answers in (isolation and interpreter
    /// versions); `None` for every other grader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::grading::code_tests::SandboxRuntime>,
    /// The training corpus's index the items are checked against, by content hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contamination: Option<crate::contamination::FrozenContamination>,
    /// A rolling-likelihood eval's prefix token: the eval's own, or the one the launch read
    /// from the endpoint's tokenizer (lm-eval's rule); `None` for every other eval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_prefix_token: Option<u32>,
    /// How Arbiter serves the checkpoint (engine, weights, layout and expected throughput);
    /// `None` for a checkpoint found at its URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<crate::serving::Serving>,
}

impl Manifest {
    /// Number of result identities: every case (every turn of a conversation) at every
    /// repetition.
    pub fn expected_results(&self) -> u64 {
        self.conversation_turns.unwrap_or(self.case_count) * u64::from(self.eval.repetitions)
    }

    /// `sha256:` + hex over the manifest's JSON (struct field order is fixed, so it is canonical).
    pub fn content_hash(&self) -> String {
        let json = serde_json::to_vec(self).expect("manifests always serialize");
        format!("sha256:{}", hex::encode(Sha256::digest(json)))
    }

    /// The key under which a finished run's answers and deterministic grades may be copied
    /// whole into this run instead of planning every identity again: `sha256:` + hex over the
    /// parts that decide each identity, its request (and so its generation key) and its
    /// deterministic grade. Runs with equal keys plan the same identities with the same keys
    /// and grade the same answer alike; checkpoint, endpoints, triage and priority do not
    /// enter, as they do not enter the generation cache either.
    ///
    /// `None` where a copy could store what expanding would not: a grader that cannot compile
    /// or that reads item fields (such answers are graded by a worker, with the item at hand),
    /// a contamination check (its flags are kept per run), and conversations (their later
    /// turns are keyed only when a worker sends them).
    pub fn reuse_key(&self) -> Option<String> {
        // Every field is named, so a new one has to be placed on one side or the other.
        let Manifest {
            eval_id: _,
            eval:
                EvalSpec {
                    name: _,
                    prompt,
                    grader,
                    generation,
                    repetitions,
                },
            dataset_id: _,
            dataset_revision_id,
            dataset_revision,
            case_count: _,
            checkpoint_id: _,
            checkpoint_name: _,
            endpoint_urls: _,
            served_model,
            fingerprint,
            fallback: _,
            triage: _,
            exemplars,
            conversation_turns,
            sandbox: _,
            contamination,
            rolling_prefix_token,
            serving: _,
        } = self;
        let compiled = grader.compile().ok()?;
        if compiled.reads_item_fields() || contamination.is_some() || conversation_turns.is_some() {
            return None;
        }
        #[derive(Serialize)]
        struct Plan<'a> {
            dataset_revision_id: RevisionId,
            dataset_revision: &'a str,
            prompt: &'a PromptSpec,
            grader: &'a GraderSpec,
            generation: &'a GenerationSettings,
            repetitions: u32,
            served_model: &'a str,
            fingerprint: &'a EndpointFingerprint,
            exemplars: &'a Option<crate::prompt::few_shot::Exemplars>,
            rolling_prefix_token: Option<u32>,
        }
        let plan = Plan {
            dataset_revision_id: *dataset_revision_id,
            dataset_revision,
            prompt,
            grader,
            generation,
            repetitions: *repetitions,
            served_model,
            fingerprint,
            exemplars,
            rolling_prefix_token: *rolling_prefix_token,
        };
        let json = serde_json::to_vec(&plan).expect("manifests always serialize");
        Some(format!("sha256:{}", hex::encode(Sha256::digest(json))))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EvalSummary {
    pub id: EvalId,
    pub name: String,
    pub dataset_id: DatasetId,
    pub dataset_name: String,
    /// The prompt template and its optional parts, as in the eval's manifest.
    #[serde(flatten)]
    pub prompt: PromptSpec,
    /// The grader spec (`{"kind": …}`), as stored.
    #[schema(value_type = Object)]
    pub grader: GraderSpec,
    pub max_tokens: i64,
    pub temperature: f64,
    pub repetitions: i64,
    pub seed: i64,
    /// `top_p`, `stop` and engine sampling parameters, when set.
    #[serde(flatten)]
    pub sampling: SamplingOptions,
    pub created_at: i64,
}

impl EvalSummary {
    /// The eval's generation settings as a manifest freezes them.
    pub fn generation(&self) -> GenerationSettings {
        GenerationSettings {
            max_tokens: u32::try_from(self.max_tokens).unwrap_or(u32::MAX),
            temperature: self.temperature,
            seed: self.seed as u64,
            sampling: self.sampling.clone(),
        }
    }
}

#[cfg(test)]
impl Manifest {
    /// A manifest for the crate's unit tests.
    pub(crate) fn example() -> Manifest {
        tests::manifest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EvalSpec {
        EvalSpec {
            name: "qa".into(),
            prompt: PromptSpec::placeholder("Q: {input}\nA:"),
            grader: GraderSpec::ExactMatch {},
            generation: GenerationSettings::basic(64, 0.0, 7),
            repetitions: 2,
        }
    }

    pub(super) fn manifest() -> Manifest {
        Manifest {
            eval_id: EvalId(1),
            eval: spec(),
            dataset_id: DatasetId(1),
            dataset_revision_id: RevisionId(3),
            dataset_revision: "sha256:ab".into(),
            case_count: 60,
            checkpoint_id: CheckpointId(2),
            checkpoint_name: "ckpt".into(),
            endpoint_urls: vec!["http://127.0.0.1:8001/v1".into()],
            served_model: "m".into(),
            fingerprint: EndpointFingerprint {
                served_model: Some("m".into()),
                engine_build: String::new(),
                parallel_layout: String::new(),
                probe_error: None,
            },
            fallback: None,
            triage: None,
            exemplars: None,
            conversation_turns: None,
            sandbox: None,
            contamination: None,
            rolling_prefix_token: None,
            serving: None,
        }
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(spec().validate().is_ok());
        let mut bad = spec();
        bad.prompt.template = "no placeholder".into();
        assert!(bad.validate().unwrap_err().contains("{input}"));
        let mut bad = spec();
        bad.repetitions = 0;
        assert!(bad.validate().unwrap_err().contains("repetitions"));
        let mut bad = spec();
        bad.generation.temperature = 3.0;
        assert!(bad.validate().unwrap_err().contains("temperature"));
    }

    #[test]
    fn hash_changes_with_any_frozen_field() {
        let base = manifest();
        assert_eq!(base.content_hash(), manifest().content_hash());
        assert_eq!(base.expected_results(), 120);
        let mut other = manifest();
        other.eval.generation.seed = 8;
        assert_ne!(base.content_hash(), other.content_hash());
        let mut other = manifest();
        other.checkpoint_id = CheckpointId(9);
        assert_ne!(base.content_hash(), other.content_hash());
        let mut other = manifest();
        other.eval.grader = GraderSpec::NormalisedMatch {};
        assert_ne!(base.content_hash(), other.content_hash());
    }

    #[test]
    fn reuse_key_follows_what_decides_requests_and_grades() {
        let base = manifest();
        let key = base.reuse_key().expect("exact match can be reused");
        // Another eval, checkpoint, endpoint or triage plans the same requests.
        let mut same = manifest();
        same.eval_id = EvalId(5);
        same.eval.name = "qa again".into();
        same.checkpoint_id = CheckpointId(9);
        same.endpoint_urls = vec!["http://10.0.0.1:8000/v1".into()];
        assert_eq!(same.reuse_key().as_deref(), Some(key.as_str()));
        assert_ne!(same.content_hash(), base.content_hash());
        // What changes a request or a grade changes the key.
        let changes: [fn(&mut Manifest); 6] = [
            |m| m.eval.generation.seed = 8,
            |m| m.eval.grader = GraderSpec::NormalisedMatch {},
            |m| m.eval.prompt.template = "Question: {input}\nA:".into(),
            |m| m.eval.repetitions = 3,
            |m| m.dataset_revision_id = RevisionId(4),
            |m| m.fingerprint.engine_build = "vllm 0.9".into(),
        ];
        for change in changes {
            let mut other = manifest();
            change(&mut other);
            assert_ne!(other.reuse_key().as_deref(), Some(key.as_str()));
        }
        // A contamination check keeps its flags per run: never copied.
        let mut checked = manifest();
        checked.contamination = Some(crate::contamination::FrozenContamination {
            index: "corpus.idx".into(),
            content_hash: "sha256:cd".into(),
            n: 13,
            check_target: false,
        });
        assert_eq!(checked.reuse_key(), None);
        // Nor are conversations, whose later turns are keyed as they are sent.
        let mut conversation = manifest();
        conversation.conversation_turns = Some(180);
        assert_eq!(conversation.reuse_key(), None);
    }

    /// A manifest as the foundation froze it (grader as an id, no triage) reads back and
    /// writes out byte for byte, so its hash, the run's identity, is unchanged.
    #[test]
    fn manifests_frozen_before_graders_were_data_keep_their_hash() {
        let frozen = r#"{"eval_id":1,"eval":{"name":"qa","prompt_template":"Q: {input}\nA:","grader":"exact_match@1","generation":{"max_tokens":64,"temperature":0.0,"seed":7},"repetitions":2},"dataset_id":1,"dataset_revision_id":3,"dataset_revision":"sha256:ab","case_count":60,"checkpoint_id":2,"checkpoint_name":"ckpt","endpoint_urls":["http://127.0.0.1:8001/v1"],"served_model":"m","fingerprint":{"served_model":"m","engine_build":"","parallel_layout":"","probe_error":null},"fallback":null}"#;
        let read: Manifest = serde_json::from_str(frozen).expect("an old manifest reads");
        assert_eq!(read, manifest());
        assert_eq!(serde_json::to_string(&read).unwrap(), frozen);
        let unknown = frozen.replace("exact_match@1", "exact_match@9");
        assert!(serde_json::from_str::<Manifest>(&unknown).is_err());
        // Other graders are written as their spec and read back.
        let mut numeric = manifest();
        numeric.eval.grader = GraderSpec::Numeric {
            absolute_tolerance: Some(0.5),
            relative_tolerance: None,
        };
        let json = serde_json::to_string(&numeric).unwrap();
        assert!(
            json.contains(r#""grader":{"kind":"numeric","absolute_tolerance":0.5}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), numeric);
    }
}
