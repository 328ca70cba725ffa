//! The serving canary: before a new checkpoint's suites spend anything, its first server
//! scores a fixed text (perplexity) and answers a few fixed prompts greedily, once through
//! the completions API and once through chat. A conversion bug gives "a model that runs fine
//! and scores badly"; compared with the checkpoint before it in the same training run, the
//! canary catches it in seconds, and the checkpoint is held with the reason.

use serde::{Deserialize, Serialize};

/// The text whose perplexity is read: plain, varied English prose, so any working language
/// model finds it ordinary and a broken one does not.
pub const CANARY_TEXT: &str = "The library opens at nine in the morning and closes at six in \
the evening. On weekdays the reading room is quiet, and students sit at the long wooden tables \
near the windows. Each visitor may borrow up to five books for three weeks. Newspapers and \
magazines stay in the building, but they can be read in the café on the ground floor. If a \
book is returned late, a small fee is charged for every day it is overdue.";

/// Prompts answered greedily (temperature 0, a few tokens): what an empty or garbled answer
/// to these means is not subtle.
pub const CANARY_PROMPTS: [&str; 3] = [
    "The capital of France is",
    "Question: What is two plus three?\nAnswer:",
    "Complete the sentence: The sun rises in the",
];
/// Tokens each canary answer may have.
pub const CANARY_MAX_TOKENS: u32 = 16;
/// A perplexity this many times its predecessor's holds the checkpoint.
pub const PERPLEXITY_RATIO: f64 = 3.0;

/// What one server answered to the canary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CanaryReading {
    /// Perplexity of [`CANARY_TEXT`] (per token); `None` when it could not be read.
    pub perplexity: Option<f64>,
    /// Why the perplexity could not be read (the server lacks prompt logprobs or `/tokenize`).
    pub perplexity_error: Option<String>,
    /// The greedy answers to [`CANARY_PROMPTS`], in order (an error reads as empty).
    pub answers: Vec<String>,
    /// Why chat completions failed (a missing chat template, most often); `None` when one
    /// was answered.
    pub chat_error: Option<String>,
}

/// The canary's verdict on a checkpoint: `Err` holds it, with the reason.
pub fn judge(
    reading: &CanaryReading,
    predecessor: Option<(&str, &CanaryReading)>,
) -> Result<(), String> {
    if let Some(perplexity) = reading.perplexity {
        if !perplexity.is_finite() {
            return Err(format!("the canary text's perplexity is {perplexity}"));
        }
    }
    if reading
        .answers
        .iter()
        .all(|answer| answer.trim().is_empty())
    {
        return Err("every canary prompt was answered with nothing".into());
    }
    let Some((name, before)) = predecessor else {
        return Ok(());
    };
    match (reading.perplexity, before.perplexity) {
        (Some(now), Some(then)) if now > then * PERPLEXITY_RATIO => {
            return Err(format!(
                "the canary text's perplexity is {now:.2}, {:.1}× that of {name} ({then:.2})",
                now / then
            ))
        }
        (None, Some(_)) => {
            return Err(format!(
                "the canary text's perplexity could not be read ({}), though it was for {name}",
                reading
                    .perplexity_error
                    .as_deref()
                    .unwrap_or("no reason given")
            ))
        }
        _ => {}
    }
    if let (Some(error), None) = (&reading.chat_error, &before.chat_error) {
        return Err(format!(
            "chat completions fail ({error}), though they worked for {name}: is the chat template missing?"
        ));
    }
    Ok(())
}

/// Perplexity from a summed natural-log likelihood over `tokens` tokens.
pub fn perplexity(logprob: f64, tokens: u64) -> Option<f64> {
    (tokens > 0).then(|| (-logprob / tokens as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(perplexity: f64) -> CanaryReading {
        CanaryReading {
            perplexity: Some(perplexity),
            answers: vec![" Paris".into(), " 5".into(), " east".into()],
            ..CanaryReading::default()
        }
    }

    #[test]
    fn a_checkpoint_far_from_its_predecessor_is_held_with_the_figures() {
        let before = reading(8.0);
        assert_eq!(judge(&reading(20.0), Some(("step-900", &before))), Ok(()));
        let held = judge(&reading(41.0), Some(("step-900", &before))).unwrap_err();
        assert!(
            held.contains("41.00") && held.contains("5.1×") && held.contains("step-900"),
            "{held}"
        );
        // Without a predecessor there is nothing to compare a perplexity with.
        assert_eq!(judge(&reading(41.0), None), Ok(()));
    }

    #[test]
    fn empty_answers_a_lost_score_or_a_lost_chat_template_hold_it() {
        let silent = CanaryReading {
            answers: vec!["".into(), "  ".into(), "".into()],
            ..reading(8.0)
        };
        assert!(judge(&silent, None)
            .unwrap_err()
            .contains("answered with nothing"));
        let unscored = CanaryReading {
            perplexity: None,
            perplexity_error: Some("no prompt logprobs".into()),
            ..reading(8.0)
        };
        let before = reading(8.0);
        assert!(judge(&unscored, Some(("s", &before)))
            .unwrap_err()
            .contains("no prompt logprobs"));
        assert_eq!(judge(&unscored, None), Ok(()));
        let no_chat = CanaryReading {
            chat_error: Some("400: no chat template".into()),
            ..reading(8.0)
        };
        assert!(judge(&no_chat, Some(("s", &before)))
            .unwrap_err()
            .contains("chat template"));
        let never_had_chat = CanaryReading {
            chat_error: Some("400".into()),
            ..reading(8.0)
        };
        assert_eq!(judge(&no_chat, Some(("s", &never_had_chat))), Ok(()));
        assert!(judge(&reading(f64::INFINITY), None).is_err());
        assert_eq!(
            perplexity(-2.0 * 10.0, 10).map(|p| (p * 1000.0).round()),
            Some(7389.0)
        );
        assert_eq!(perplexity(0.0, 0), None);
    }
}
