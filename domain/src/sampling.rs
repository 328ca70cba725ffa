//! Sampling parameters beyond the OpenAI core: stop sequences, `top_p`, and the extra
//! parameters vLLM and SGLang accept (`top_k`, `min_p`, `repetition_penalty`, …), each checked
//! against the range the engines accept, so a typo or an out-of-range value is refused when
//! the eval is saved instead of failing every request of a run. Pure: no I/O.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The sampling settings beyond `max_tokens`, `temperature` and `seed`. Each is absent from
/// JSON when unset; an eval row stores them as one JSON column (`None` when none is set).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SamplingOptions {
    /// Nucleus sampling; `None` leaves the endpoint's default (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Generation stops before any of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Engine sampling parameters passed as they are (`top_k`, `min_p`, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub extra: BTreeMap<String, Value>,
}

impl SamplingOptions {
    /// Checks every setting against the ranges the engines accept.
    pub fn validate(&self) -> Result<(), String> {
        validate_core(&self.stop, self.top_p)?;
        validate_extra(&self.extra)
    }

    /// The stored column: `None` when nothing is set.
    pub fn to_column(&self) -> Option<String> {
        (*self != SamplingOptions::default())
            .then(|| serde_json::to_string(self).expect("sampling options always serialize"))
    }

    pub fn from_column(column: Option<&str>) -> Result<SamplingOptions, String> {
        column.map_or(Ok(SamplingOptions::default()), |text| {
            serde_json::from_str(text).map_err(|err| format!("unreadable sampling options: {err}"))
        })
    }
}

/// Most stop sequences, and the longest (the bundled model server's limits; vLLM has none,
/// OpenAI allows four).
pub const MAX_STOP_SEQUENCES: usize = 16;
pub const MAX_STOP_BYTES: usize = 256;

/// What an extra parameter may be.
enum Kind {
    /// A whole number in the inclusive range.
    Integer(i64, i64),
    /// A number in the range; `open_low` excludes the lower end.
    Number {
        low: f64,
        high: f64,
        open_low: bool,
    },
    Boolean,
}

/// The extra parameters Arbiter passes through, with the ranges vLLM's `SamplingParams`
/// checks (SGLang accepts the same names).
fn kind_of(name: &str) -> Option<Kind> {
    Some(match name {
        // -1 (or 0) turns top-k off.
        "top_k" => Kind::Integer(-1, 1_000_000),
        "min_p" => Kind::Number {
            low: 0.0,
            high: 1.0,
            open_low: false,
        },
        "repetition_penalty" => Kind::Number {
            low: 0.0,
            high: 10.0,
            open_low: true,
        },
        "presence_penalty" | "frequency_penalty" => Kind::Number {
            low: -2.0,
            high: 2.0,
            open_low: false,
        },
        "min_tokens" => Kind::Integer(0, 32_768),
        "ignore_eos" | "skip_special_tokens" => Kind::Boolean,
        _ => return None,
    })
}

/// Names of the accepted extra parameters, for messages and the form.
pub const EXTRA_PARAMETERS: [&str; 8] = [
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "min_tokens",
    "ignore_eos",
    "skip_special_tokens",
];

/// Checks the extra parameters, naming the first unknown or out-of-range one.
pub fn validate_extra(extra: &BTreeMap<String, Value>) -> Result<(), String> {
    for (name, value) in extra {
        let kind = kind_of(name).ok_or_else(|| {
            format!(
                "`{name}` is not a sampling parameter Arbiter passes on; accepted: {}",
                EXTRA_PARAMETERS.join(", ")
            )
        })?;
        let fits = match kind {
            Kind::Integer(low, high) => value.as_i64().is_some_and(|v| (low..=high).contains(&v)),
            Kind::Number {
                low,
                high,
                open_low,
            } => value.as_f64().is_some_and(|v| {
                v.is_finite() && v <= high && if open_low { v > low } else { v >= low }
            }),
            Kind::Boolean => value.is_boolean(),
        };
        if !fits {
            let expected = match kind {
                Kind::Integer(low, high) => format!("a whole number from {low} to {high}"),
                Kind::Number {
                    low,
                    high,
                    open_low: true,
                } => format!("a number above {low} and at most {high}"),
                Kind::Number { low, high, .. } => format!("a number from {low} to {high}"),
                Kind::Boolean => "true or false".into(),
            };
            return Err(format!("`{name}` is {value}; it must be {expected}"));
        }
    }
    Ok(())
}

/// Checks stop sequences and `top_p`.
pub fn validate_core(stop: &[String], top_p: Option<f64>) -> Result<(), String> {
    if stop.len() > MAX_STOP_SEQUENCES {
        return Err(format!(
            "at most {MAX_STOP_SEQUENCES} stop sequences are accepted"
        ));
    }
    if stop.iter().any(|sequence| sequence.is_empty()) {
        return Err("stop sequences must not be empty".into());
    }
    if stop.iter().any(|sequence| sequence.len() > MAX_STOP_BYTES) {
        return Err(format!(
            "stop sequences are at most {MAX_STOP_BYTES} bytes each"
        ));
    }
    if let Some(top_p) = top_p {
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(format!(
                "top_p is {top_p}; it must be above 0 and at most 1"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extra(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn known_parameters_in_range_pass() {
        assert!(validate_extra(&extra(json!({
            "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
            "presence_penalty": -0.5, "min_tokens": 2, "ignore_eos": false
        })))
        .is_ok());
    }

    #[test]
    fn unknown_or_out_of_range_parameters_are_named() {
        let unknown = validate_extra(&extra(json!({"temprature": 0.5}))).unwrap_err();
        assert!(
            unknown.starts_with("`temprature` is not a sampling parameter"),
            "{unknown}"
        );
        assert_eq!(
            validate_extra(&extra(json!({"repetition_penalty": 0}))).unwrap_err(),
            "`repetition_penalty` is 0; it must be a number above 0 and at most 10"
        );
        assert_eq!(
            validate_extra(&extra(json!({"top_k": 1.5}))).unwrap_err(),
            "`top_k` is 1.5; it must be a whole number from -1 to 1000000"
        );
        assert!(validate_extra(&extra(json!({"ignore_eos": "yes"}))).is_err());
    }

    #[test]
    fn stop_sequences_and_top_p_are_bounded() {
        assert!(validate_core(&["\n\n".into(), "Question:".into()], Some(0.9)).is_ok());
        assert!(validate_core(&[String::new()], None).is_err());
        assert!(validate_core(&vec!["x".into(); 17], None).is_err());
        assert!(validate_core(&[], Some(0.0)).is_err());
        assert!(validate_core(&[], Some(1.5)).is_err());
    }
}
