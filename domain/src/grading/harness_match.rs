//! Exact match as lm-evaluation-harness scores a generated answer, so a task imported from it
//! gives the verdicts it gives: the task's regex filter reads the answer (Python's
//! `re.findall`, the selected match, stripped, or a fallback when nothing matches), then the
//! metric's `exact_match` options fold both the answer and the reference (patterns removed,
//! then case, punctuation and digits, each when asked) and the two must be equal. Nothing else
//! is normalised: no `Answer:` line is looked for and no surrounding whitespace is trimmed
//! beyond the filter's own strip.
//!
//! Patterns run on the `regex` crate, whose `$` matches only at the very end; Python's also
//! matches before a final newline. A pattern with `$` therefore runs on the text without its
//! one final newline (put back after a substitution), which is where Python's `$` lands.

use regex::Regex;
use serde::{Deserialize, Serialize};

/// lm-evaluation-harness's `regex` filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegexFilter {
    /// A `regex` crate pattern (Python's syntax without look-around or backreferences).
    pub pattern: String,
    /// Which match to read, Python-style: 0 the first, -1 the last.
    #[serde(default)]
    pub group_select: i64,
    /// The answer when the pattern does not match (the harness's `[invalid]`).
    #[serde(default = "default_fallback")]
    pub fallback: String,
}

fn default_fallback() -> String {
    "[invalid]".into()
}

/// How answer and reference are folded before they are compared (the harness's
/// `exact_match` options, applied in its order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchFolding {
    /// Patterns removed from both sides, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regexes_to_ignore: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_case: bool,
    /// ASCII punctuation (Python's `string.punctuation`) removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_punctuation: bool,
    /// ASCII digits removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_numbers: bool,
}

/// A compiled pattern, and whether it uses `$` (see the module's notes).
#[derive(Debug)]
struct PythonRegex {
    regex: Regex,
    ends_at_final_newline: bool,
}

impl PythonRegex {
    fn new(
        pattern: &str,
        compile: &impl Fn(&str) -> Result<Regex, String>,
    ) -> Result<PythonRegex, (String, String)> {
        Ok(PythonRegex {
            regex: compile(pattern).map_err(|message| (pattern.to_string(), message))?,
            ends_at_final_newline: has_end_anchor(pattern),
        })
    }

    /// The text the pattern runs on, and the newline cut from its end.
    fn split<'t>(&self, text: &'t str) -> (&'t str, &'static str) {
        match text.strip_suffix('\n') {
            Some(body) if self.ends_at_final_newline => (body, "\n"),
            _ => (text, ""),
        }
    }
}

/// Whether a pattern has a `$` outside a character class that is not escaped.
fn has_end_anchor(pattern: &str) -> bool {
    let (mut escaped, mut in_class) = (false, false);
    for c in pattern.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' => in_class = true,
            ']' => in_class = false,
            '$' if !in_class => return true,
            _ => {}
        }
    }
    false
}

/// Python's `str.strip()`: its whitespace includes the separators U+001C to U+001F.
fn python_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// The compiled check.
#[derive(Debug)]
pub struct HarnessMatch {
    filter: Option<(PythonRegex, i64, String)>,
    ignore: Vec<PythonRegex>,
    folding: MatchFolding,
}

impl HarnessMatch {
    /// Compiles the filter and the ignored patterns; `Err` names the pattern that does not
    /// compile.
    pub fn compile(
        filter: Option<&RegexFilter>,
        folding: &MatchFolding,
        compile: impl Fn(&str) -> Result<Regex, String>,
    ) -> Result<HarnessMatch, (String, String)> {
        let regex = |pattern: &str| PythonRegex::new(pattern, &compile);
        Ok(HarnessMatch {
            filter: match filter {
                Some(filter) => Some((
                    regex(&filter.pattern)?,
                    filter.group_select,
                    filter.fallback.clone(),
                )),
                None => None,
            },
            ignore: folding
                .regexes_to_ignore
                .iter()
                .map(|pattern| regex(pattern))
                .collect::<Result<_, _>>()?,
            folding: folding.clone(),
        })
    }

    /// The answer the filter reads from an output (the whole output without a filter).
    pub fn filtered(&self, output: &str) -> String {
        let Some((regex, select, fallback)) = &self.filter else {
            return output.to_string();
        };
        let (text, _) = regex.split(output);
        find_all_select(&regex.regex, *select, text).unwrap_or_else(|| fallback.clone())
    }

    /// The text as the comparison sees it.
    pub fn fold(&self, text: &str) -> String {
        let mut text = text.to_string();
        for regex in &self.ignore {
            let (body, newline) = regex.split(&text);
            text = format!("{}{newline}", regex.regex.replace_all(body, ""));
        }
        if self.folding.ignore_case {
            text = text.to_lowercase();
        }
        if self.folding.ignore_punctuation {
            text.retain(|c| !c.is_ascii_punctuation());
        }
        if self.folding.ignore_numbers {
            text.retain(|c| !c.is_ascii_digit());
        }
        text
    }
}

/// Python's `re.findall(pattern, text)[select]` as the harness's filter reads it: whole
/// matches without groups, the group's text with one, the first non-empty group with
/// several; then stripped. `None` when nothing matches, the index is out of range, or every
/// group of the selected match is empty.
fn find_all_select(regex: &Regex, select: i64, text: &str) -> Option<String> {
    let groups = regex.captures_len() - 1;
    // `None`: a match whose groups are all empty (the harness then reads no answer).
    let found: Vec<Option<&str>> = regex
        .captures_iter(text)
        .map(|captures| match groups {
            0 => captures.get(0).map(|m| m.as_str()),
            1 => Some(captures.get(1).map_or("", |m| m.as_str())),
            _ => (1..=groups)
                .filter_map(|group| captures.get(group))
                .map(|m| m.as_str())
                .find(|text| !text.is_empty()),
        })
        .collect();
    let index = if select < 0 {
        found
            .len()
            .checked_sub(usize::try_from(select.unsigned_abs()).ok()?)?
    } else {
        usize::try_from(select).ok()?
    };
    found
        .get(index)
        .copied()
        .flatten()
        .map(|chosen| python_strip(chosen).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(filter: Option<(&str, i64)>, folding: MatchFolding) -> HarnessMatch {
        let filter = filter.map(|(pattern, group_select)| RegexFilter {
            pattern: pattern.into(),
            group_select,
            fallback: default_fallback(),
        });
        HarnessMatch::compile(filter.as_ref(), &folding, |pattern| {
            Regex::new(pattern).map_err(|err| err.to_string())
        })
        .unwrap()
    }

    /// Values worked out with Python 3.11's `re.findall` on the same strings.
    #[test]
    fn the_filter_reads_like_python_findall() {
        let gsm8k_strict = check(
            Some(("#### (\\-?[0-9\\.\\,]+)", 0)),
            MatchFolding::default(),
        );
        assert_eq!(gsm8k_strict.filtered("so 3 + 4 = 7\n#### 7"), "7");
        assert_eq!(gsm8k_strict.filtered("7"), "[invalid]");
        let flexible = check(
            Some(("(-?[$0-9.,]{2,})|(-?[0-9]+)", -1)),
            MatchFolding::default(),
        );
        // findall gives ('', '3'), ('', '4'), ('12', ''): the last, first non-empty group.
        assert_eq!(flexible.filtered("3 and 4 make 12"), "12");
        assert_eq!(flexible.filtered("no digits"), "[invalid]");
        let whole = check(Some(("[A-D]", 1)), MatchFolding::default());
        assert_eq!(whole.filtered("B or C"), "C", "the second whole match");
        assert_eq!(whole.filtered("only B"), "[invalid]", "index out of range");
        let stripped = check(Some(("Answer:(.*)", 0)), MatchFolding::default());
        assert_eq!(stripped.filtered("Answer:  42 \n"), "42");
        assert_eq!(
            check(None, MatchFolding::default()).filtered(" 42 "),
            " 42 "
        );
    }

    #[test]
    fn folding_follows_the_harness_order() {
        let folding = MatchFolding {
            regexes_to_ignore: vec![
                ",".into(),
                "\\$".into(),
                "(?s).*#### ".into(),
                "\\.$".into(),
            ],
            ignore_case: true,
            ignore_punctuation: false,
            ignore_numbers: false,
        };
        let gsm8k = check(None, folding);
        assert_eq!(
            gsm8k.fold("Natalia sold 48 + 24 = 72 clips.\n#### 72"),
            "72"
        );
        assert_eq!(gsm8k.fold("$1,200."), "1200");
        // Python's `$` matches before a final newline: re.sub(r"\.$", "", "72.\n") is "72\n".
        assert_eq!(gsm8k.fold("72.\n"), "72\n");
        assert_eq!(gsm8k.fold("7.2"), "7.2", "only a final full stop");
        let punctuation = check(
            None,
            MatchFolding {
                ignore_punctuation: true,
                ignore_numbers: true,
                ..MatchFolding::default()
            },
        );
        assert_eq!(punctuation.fold("It's 3 o'clock!"), "Its  oclock");
    }
}
