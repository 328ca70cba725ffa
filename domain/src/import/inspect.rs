//! Reading Inspect AI samples (the JSONL its `json_dataset` loads: `input` as a string or a
//! list of chat messages, `target` as a string or a list, `choices`, `id`, `metadata`) into an
//! eval over them: the field mapping, the prompt and the grader. The samples are watched as
//! they stream in ([`SampleShape::observe`]); fields that need what Arbiter cannot give a
//! sample (`files` copied into a sandbox, `setup` scripts, a `sandbox`) are refused by name.

use crate::fields::FieldMapping;
use crate::grading::GraderSpec;
use serde_json::{Map, Value};

/// Metadata fields shown beside each item, at most.
const MAX_METADATA_FIELDS: usize = 12;

/// What the samples of a file look like, gathered one sample at a time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleShape {
    pub samples: u64,
    /// Inputs that are chat message lists; the others are strings.
    pub conversations: u64,
    /// Samples with choices.
    pub with_choices: u64,
    /// Metadata keys in first-seen order (at most [`MAX_METADATA_FIELDS`]).
    pub metadata: Vec<String>,
}

impl SampleShape {
    /// Takes in the next sample; `Err` names the field that cannot be imported.
    pub fn observe(&mut self, sample: &Map<String, Value>) -> Result<(), String> {
        for field in ["files", "setup", "sandbox"] {
            if sample.get(field).is_some_and(|value| !value.is_null()) {
                return Err(format!(
                    "`{field}` needs a sandbox to prepare, which Arbiter does not run for imported samples; remove it"
                ));
            }
        }
        match sample.get("input") {
            Some(Value::String(_)) => {}
            Some(Value::Array(_)) => self.conversations += 1,
            Some(_) => return Err("`input` must be a string or a list of chat messages".into()),
            None => return Err("`input` is missing".into()),
        }
        if let Some(choices) = sample.get("choices").filter(|value| !value.is_null()) {
            if !choices.is_array() {
                return Err("`choices` must be a list".into());
            }
            self.with_choices += 1;
        }
        match sample.get("metadata") {
            None | Some(Value::Null) => {}
            Some(Value::Object(metadata)) => {
                for key in metadata.keys() {
                    if self.metadata.len() < MAX_METADATA_FIELDS
                        && !self.metadata.contains(key)
                        && !key.contains('.')
                    {
                        self.metadata.push(key.clone());
                    }
                }
            }
            Some(_) => return Err("`metadata` must be an object".into()),
        }
        self.samples += 1;
        let mixed = |count: u64| count != 0 && count != self.samples;
        if mixed(self.conversations) {
            return Err(
                "some inputs are strings and some are message lists; import them as two files"
                    .into(),
            );
        }
        if mixed(self.with_choices) {
            return Err(
                "some samples have choices and some do not; import them as two files".into(),
            );
        }
        Ok(())
    }
}

/// The eval Arbiter makes of the samples.
#[derive(Clone, Debug, PartialEq)]
pub struct InspectEval {
    pub mapping: FieldMapping,
    /// A Jinja template; empty when the inputs are conversations, sent as they are.
    pub prompt_template: String,
    pub grader: GraderSpec,
}

/// The prompt for samples with choices: the question, the lettered options, and the reply
/// format the multiple-choice grader reads.
const CHOICE_TEMPLATE: &str = "Answer the multiple choice question below. Reply with one line \
`ANSWER: $LETTER`, where LETTER is one of {% for choice in choices %}{{ letter(loop.index0) }}\
{% if not loop.last %}, {% endif %}{% endfor %}.\n\n{{ input }}\n\n{{ choices | lettered }}";

/// The eval for samples of `shape`. Without choices, the final answer is matched exactly
/// (`grader` overrides it); with choices, the letter chosen is (the target is a letter, as
/// Inspect writes it).
pub fn inspect_eval(
    shape: &SampleShape,
    grader: Option<GraderSpec>,
) -> Result<InspectEval, String> {
    if shape.samples == 0 {
        return Err("the file has no samples".into());
    }
    let has_choices = shape.with_choices > 0;
    if has_choices && shape.conversations > 0 {
        return Err("samples with choices need a string input to list them under".into());
    }
    let mapping = FieldMapping {
        input: "input".into(),
        target: Some("target".into()),
        choices: has_choices.then(|| "choices".into()),
        category: None,
        metadata: shape
            .metadata
            .iter()
            .map(|key| format!("metadata.{key}"))
            .collect(),
        shuffle_choices: None,
        images: None,
    };
    let prompt_template = if shape.conversations > 0 {
        String::new()
    } else if has_choices {
        CHOICE_TEMPLATE.to_string()
    } else {
        "{{ input }}".to_string()
    };
    let grader = grader.unwrap_or(if has_choices {
        GraderSpec::MultipleChoice {}
    } else {
        GraderSpec::ExactMatch {}
    });
    Ok(InspectEval {
        mapping,
        prompt_template,
        grader,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn observe(samples: &[Value]) -> Result<SampleShape, String> {
        let mut shape = SampleShape::default();
        for (index, sample) in samples.iter().enumerate() {
            shape
                .observe(sample.as_object().unwrap())
                .map_err(|message| format!("sample {}: {message}", index + 1))?;
        }
        Ok(shape)
    }

    #[test]
    fn multiple_choice_samples_map_to_lettered_choices() {
        let shape = observe(&[
            json!({"id": 1, "input": "Capital of France?", "choices": ["Berlin", "Paris"], "target": "B", "metadata": {"subject": "geo"}}),
            json!({"id": 2, "input": "2 + 2?", "choices": ["4", "5"], "target": "A", "metadata": {"subject": "math", "source": "x"}}),
        ])
        .unwrap();
        let eval = inspect_eval(&shape, None).unwrap();
        assert_eq!(eval.mapping.choices.as_deref(), Some("choices"));
        assert_eq!(
            eval.mapping.metadata,
            ["metadata.subject", "metadata.source"]
        );
        assert_eq!(eval.grader, GraderSpec::MultipleChoice {});
        assert!(eval.prompt_template.contains("{{ choices | lettered }}"));
    }

    #[test]
    fn conversations_are_sent_as_they_are() {
        let shape =
            observe(&[json!({"input": [{"role": "user", "content": "Hi"}], "target": "Hello"})])
                .unwrap();
        let eval = inspect_eval(&shape, None).unwrap();
        assert_eq!(eval.prompt_template, "");
        assert_eq!(eval.grader, GraderSpec::ExactMatch {});
    }

    #[test]
    fn what_needs_a_sandbox_or_mixes_shapes_is_refused_by_name() {
        let refused = observe(&[json!({"input": "x", "files": {"a.txt": "data"}})]).unwrap_err();
        assert!(refused.starts_with("sample 1: `files`"), "{refused}");
        let mixed = observe(&[
            json!({"input": "x", "target": "y"}),
            json!({"input": [{"role": "user", "content": "x"}], "target": "y"}),
        ])
        .unwrap_err();
        assert!(mixed.starts_with("sample 2:"), "{mixed}");
        assert!(observe(&[json!({"target": "y"})])
            .unwrap_err()
            .contains("`input` is missing"));
        assert!(inspect_eval(&SampleShape::default(), None).is_err());
    }
}
