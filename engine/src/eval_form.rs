//! The eval form as a researcher fills it in (every field text) turned into an eval's
//! options and grader, each problem named by its field. The REST API takes the same settings
//! as typed JSON and skips this.

use crate::catalog::EvalOptions;
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::contamination::ContaminationSpec;
use arbiter_domain::eval_form::EvalFormText;
use arbiter_domain::fields::FieldMapping;
use arbiter_domain::grading::code_tests::CodeExtraction;
use arbiter_domain::grading::instructions::{DEFAULT_IDS_FIELD, DEFAULT_KWARGS_FIELD};
use arbiter_domain::grading::{GraderSpec, Require};
use arbiter_domain::ids::DatasetId;
use arbiter_domain::likelihood::{LikelihoodSpec, Selection};
use arbiter_domain::manifest::SamplingOptions;
use arbiter_domain::prompt::few_shot::{FewShotSpec, FewShotStyle};
use arbiter_domain::prompt::{Api, TemplateSyntax};
use arbiter_domain::rolling::{RollingSpec, DEFAULT_MAX_LENGTH};
use std::collections::BTreeMap;

fn invalid(message: impl Into<String>) -> ServiceError {
    ServiceError::Invalid(message.into())
}

fn optional_number<T: std::str::FromStr>(text: &str, what: &str) -> ServiceResult<Option<T>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| invalid(format!("{what} must be a number, not `{text}`")))
}

fn field_name(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The eval's options, or the first field that does not parse.
pub fn options(form: &EvalFormText) -> ServiceResult<EvalOptions> {
    let template_syntax = match form.template_syntax.trim() {
        "" => None,
        "jinja" => Some(TemplateSyntax::Jinja),
        "placeholder" => Some(TemplateSyntax::Placeholder),
        other => return Err(invalid(format!("unknown template syntax `{other}`"))),
    };
    let api = match form.api.trim() {
        "" | "chat" => Api::Chat,
        "completions" => Api::Completions,
        other => {
            return Err(invalid(format!(
                "unknown API `{other}`; use chat or completions"
            )))
        }
    };
    let defaults = FieldMapping::default();
    let mapping = FieldMapping {
        input: field_name(&form.input_field).unwrap_or_else(|| defaults.input.clone()),
        target: field_name(&form.target_field).or_else(|| defaults.target.clone()),
        choices: field_name(&form.choices_field),
        category: field_name(&form.category_field).or_else(|| defaults.category.clone()),
        metadata: form
            .metadata_fields
            .split(',')
            .filter_map(field_name)
            .collect(),
        shuffle_choices: optional_number(&form.shuffle_seed, "the choice shuffling seed")?,
        images: field_name(&form.images_field),
    };
    let stop = form
        .stop
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| line.replace("\\n", "\n").replace("\\t", "\t"))
        .collect();
    let extra: BTreeMap<String, serde_json::Value> = match form.extra.trim() {
        "" => BTreeMap::new(),
        text => serde_json::from_str(text).map_err(|err| {
            invalid(format!(
                "extra sampling parameters must be a JSON object: {err}"
            ))
        })?,
    };
    let few_shot = match optional_number::<i64>(&form.few_shot_dataset, "the few-shot dataset")? {
        None => None,
        Some(dataset) => Some(FewShotSpec {
            dataset_id: DatasetId(dataset),
            count: optional_number(&form.few_shot_count, "the number of shots")?.unwrap_or(5),
            seed: optional_number(&form.few_shot_seed, "the few-shot seed")?.unwrap_or(0),
            style: match form.few_shot_style.trim() {
                "" | "text" => FewShotStyle::Text,
                "turns" => FewShotStyle::Turns,
                other => return Err(invalid(format!("unknown few-shot style `{other}`"))),
            },
            delimiter: "\n\n".into(),
            target_delimiter: " ".into(),
            in_order: false,
        }),
    };
    Ok(EvalOptions {
        template_syntax,
        system_prompt: form.system_prompt.clone(),
        messages: match form.messages.trim() {
            "" => Vec::new(),
            text => serde_json::from_str(text).map_err(|err| {
                invalid(format!(
                    "the message list must be a JSON list of {{\"role\": \"system\", \"user\" or \"assistant\", \"content\": template}}: {err}"
                ))
            })?,
        },
        api,
        mapping: (mapping != defaults).then_some(mapping),
        few_shot,
        sampling: SamplingOptions {
            top_p: optional_number(&form.top_p, "top_p")?,
            stop,
            extra,
        },
        likelihood: match form.scoring.trim() {
            "" | "generate" => None,
            "likelihood" => Some(LikelihoodSpec {
                // The form shows a space as `\s`, which a text box would otherwise trim.
                target_delimiter: match form.target_delimiter.as_str() {
                    "" => " ".into(),
                    typed => typed.replace("\\s", " ").replace("\\n", "\n"),
                },
                select_by: match form.select_by.trim() {
                    "" | "acc" => Selection::Raw,
                    "acc_norm" => Selection::Chars,
                    "acc_bytes" => Selection::Bytes,
                    other => {
                        return Err(invalid(format!(
                            "unknown selection `{other}`; use acc, acc_norm or acc_bytes"
                        )))
                    }
                },
            }),
            "rolling" => None,
            other => {
                return Err(invalid(format!(
                    "unknown scoring `{other}`; use generate, likelihood or rolling"
                )))
            }
        },
        rolling: match form.scoring.trim() {
            "rolling" => Some(RollingSpec {
                max_length: optional_number(&form.rolling_max_length, "the rolling max_length")?
                    .unwrap_or(DEFAULT_MAX_LENGTH),
                stride: optional_number(&form.rolling_stride, "the rolling stride")?,
                prefix_token: optional_number(&form.rolling_prefix_token, "the rolling prefix token")?,
            }),
            _ => None,
        },
        contamination: match form.contamination_index.trim() {
            "" => None,
            index => Some(ContaminationSpec {
                index: index.to_string(),
                check_target: !form.contamination_targets.trim().is_empty(),
            }),
        },
    })
}

/// The grader picked from the list with its settings, as the JSON the eval stores; `raw`
/// (the advanced JSON box) when nothing or `json` is picked.
pub fn grader(form: &EvalFormText, raw: &str) -> ServiceResult<String> {
    let lines = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(str::to_string)
            .collect()
    };
    let spec = match form.grader_kind.trim() {
        "" => return Ok(raw.to_string()),
        "json" => return Ok(raw.to_string()),
        "exact_match" => GraderSpec::ExactMatch {},
        "normalised_match" => GraderSpec::NormalisedMatch {},
        "multiple_choice" => GraderSpec::MultipleChoice {},
        "json_valid" => GraderSpec::JsonValid {},
        "numeric" => GraderSpec::Numeric {
            absolute_tolerance: None,
            relative_tolerance: optional_number(&form.grader_tolerance, "the tolerance")?,
        },
        "regex_match" => GraderSpec::RegexMatch {
            pattern: form.grader_pattern.clone(),
            occurrence: Default::default(),
        },
        "contains" => GraderSpec::Contains {
            strings: lines(&form.grader_strings),
            case_sensitive: false,
            require: Require::All,
        },
        "not_contains" => GraderSpec::NotContains {
            strings: lines(&form.grader_strings),
            case_sensitive: false,
        },
        "length" => GraderSpec::Length {
            min_chars: None,
            max_chars: None,
            min_words: None,
            max_words: optional_number(&form.grader_max_words, "the most words")?,
        },
        "code_tests" => {
            let optional =
                |text: &str| Some(text.trim().to_string()).filter(|text| !text.is_empty());
            GraderSpec::CodeTests {
                extract: match form.grader_extract.trim() {
                    "" | "fenced" => CodeExtraction::Fenced,
                    "whole" => CodeExtraction::Whole,
                    other => {
                        return Err(invalid(format!(
                            "unknown code extraction `{other}`; use fenced or whole"
                        )))
                    }
                },
                prefix_field: optional(&form.grader_prefix_field),
                tests_field: optional(&form.grader_tests_field).unwrap_or_else(|| "test".into()),
                entry_point_field: optional(&form.grader_entry_point_field),
                limits: Default::default(),
            }
        }
        "instructions" => GraderSpec::Instructions {
            ids_field: DEFAULT_IDS_FIELD.into(),
            kwargs_field: DEFAULT_KWARGS_FIELD.into(),
        },
        other => return Err(invalid(format!("unknown grader `{other}`"))),
    };
    Ok(serde_json::to_string(&spec).expect("grader specs always serialize"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_form_is_an_eval_of_the_original_shape() {
        let parsed = options(&EvalFormText::default()).unwrap();
        assert_eq!(parsed.template_syntax, None);
        assert_eq!(parsed.mapping, None);
        assert!(parsed.few_shot.is_none() && parsed.sampling == SamplingOptions::default());
        assert_eq!(grader(&EvalFormText::default(), "").unwrap(), "");
    }

    #[test]
    fn the_code_tests_grader_reads_its_fields_from_the_form() {
        let form = EvalFormText {
            grader_kind: "code_tests".into(),
            grader_entry_point_field: "entry_point".into(),
            grader_prefix_field: "prompt".into(),
            grader_extract: "whole".into(),
            ..EvalFormText::default()
        };
        let spec: GraderSpec = serde_json::from_str(&grader(&form, "").unwrap()).unwrap();
        assert_eq!(
            spec,
            GraderSpec::CodeTests {
                extract: CodeExtraction::Whole,
                prefix_field: Some("prompt".into()),
                tests_field: "test".into(),
                entry_point_field: Some("entry_point".into()),
                limits: Default::default(),
            }
        );
        let unknown = EvalFormText {
            grader_extract: "all".into(),
            ..form
        };
        assert!(grader(&unknown, "")
            .unwrap_err()
            .to_string()
            .contains("unknown code extraction `all`"));
    }

    #[test]
    fn rolling_scoring_reads_its_window_from_the_form() {
        let form = EvalFormText {
            scoring: "rolling".into(),
            rolling_max_length: "1024".into(),
            ..EvalFormText::default()
        };
        let parsed = options(&form).unwrap();
        assert!(parsed.likelihood.is_none());
        assert_eq!(
            parsed.rolling,
            Some(RollingSpec {
                max_length: 1024,
                stride: None,
                prefix_token: None,
            })
        );
        let defaults = options(&EvalFormText {
            scoring: "rolling".into(),
            rolling_stride: "512".into(),
            rolling_prefix_token: "2".into(),
            ..EvalFormText::default()
        })
        .unwrap()
        .rolling
        .unwrap();
        assert_eq!(
            (defaults.max_length, defaults.stride, defaults.prefix_token),
            (DEFAULT_MAX_LENGTH, Some(512), Some(2))
        );
        let bad = EvalFormText {
            rolling_max_length: "long".into(),
            ..form
        };
        assert!(options(&bad)
            .unwrap_err()
            .to_string()
            .contains("the rolling max_length must be a number, not `long`"));
        assert!(options(&EvalFormText::default()).unwrap().rolling.is_none());
    }

    #[test]
    fn typed_fields_become_options_and_bad_ones_are_named() {
        let form = EvalFormText {
            input_field: "question".into(),
            choices_field: "choices".into(),
            target_field: "answer".into(),
            metadata_fields: "subject, source".into(),
            stop: "\\n\\nQuestion:\n###".into(),
            few_shot_dataset: "4".into(),
            few_shot_count: "3".into(),
            grader_kind: "numeric".into(),
            grader_tolerance: "0.01".into(),
            ..EvalFormText::default()
        };
        let parsed = options(&form).unwrap();
        let mapping = parsed.mapping.unwrap();
        assert_eq!(mapping.metadata, vec!["subject", "source"]);
        assert_eq!(parsed.sampling.stop, vec!["\n\nQuestion:", "###"]);
        assert_eq!(parsed.few_shot.unwrap().count, 3);
        assert_eq!(
            grader(&form, "").unwrap(),
            r#"{"kind":"numeric","relative_tolerance":0.01}"#
        );
        let bad = EvalFormText {
            top_p: "most".into(),
            ..EvalFormText::default()
        };
        assert_eq!(
            options(&bad).unwrap_err().to_string(),
            "top_p must be a number, not `most`"
        );
        let bad_extra = EvalFormText {
            extra: "top_k=5".into(),
            ..EvalFormText::default()
        };
        assert!(options(&bad_extra)
            .unwrap_err()
            .to_string()
            .starts_with("extra sampling parameters must be a JSON object"));
    }
}
