//! An item as people read it: each text both as it is (raw) and as HTML the server rendered
//! from it (markdown, highlighted code), and a conversation as its turns with their roles.
//!
//! The HTML is made and sanitised on the server (the engine's `display` module); the browser
//! only places it. Which form a text is read in is decided here, so the rules are tested alone.

use serde::{Deserialize, Serialize};

/// One text: what the model or dataset gave, and its rendered, sanitised HTML.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShownText {
    pub raw: String,
    pub html: String,
}

impl ShownText {
    /// Folded behind "show all" at first: a long text would push the rating controls off the
    /// screen.
    pub fn is_long(&self) -> bool {
        self.raw.chars().count() > FOLD_CHARS || self.raw.lines().count() > FOLD_LINES
    }

    pub fn line_count(&self) -> usize {
        self.raw.lines().count()
    }
}

/// A text longer than either of these starts folded.
pub const FOLD_CHARS: usize = 2_500;
pub const FOLD_LINES: usize = 40;

/// One message of a conversation the model was sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShownTurn {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub text: ShownText,
    /// Images sent with the message (data URLs).
    #[serde(default)]
    pub images: Vec<String>,
}

/// An item under judgement, rendered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShownItem {
    /// The request as one text (for a conversation, its turns labelled by role).
    pub input: ShownText,
    /// The conversation's messages when the model was sent more than one; empty otherwise.
    #[serde(default)]
    pub conversation: Vec<ShownTurn>,
    pub target: ShownText,
    pub output: ShownText,
}

/// How a text is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// CommonMark with tables, strikethrough and task lists; fenced code highlighted.
    Markdown,
    /// Source code as a whole, highlighted in `language`.
    Code { language: &'static str },
}

/// The form a text of an item is read in. Code evals (their answers run against tests) hold
/// code in their prompts and answers: read as markdown, Python's `__init__` turns bold and a
/// `# comment` becomes a heading, so such a text is code unless it fences its code itself
/// (a chat model's answer usually does).
pub fn text_format(text: &str, code_eval: bool) -> TextFormat {
    if code_eval && !has_fence(text) {
        TextFormat::Code { language: "python" }
    } else {
        TextFormat::Markdown
    }
}

/// A line opening a fenced code block (CommonMark: up to three spaces, then ``` or ~~~).
fn has_fence(text: &str) -> bool {
    text.lines().any(|line| {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let rest = line.trim_start_matches(' ');
        indent <= 3 && (rest.starts_with("```") || rest.starts_with("~~~"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_evals_read_unfenced_text_as_code() {
        let prompt = "def add(a, b):\n    \"\"\"Adds.\"\"\"\n";
        assert_eq!(
            text_format(prompt, true),
            TextFormat::Code { language: "python" }
        );
        assert_eq!(text_format(prompt, false), TextFormat::Markdown);
        let fenced = "Here it is:\n\n```python\nreturn a + b\n```\n";
        assert_eq!(text_format(fenced, true), TextFormat::Markdown);
        // Four spaces make an indented code line, not a fence.
        assert_eq!(
            text_format("    ```\nx\n", true),
            TextFormat::Code { language: "python" }
        );
        assert_eq!(text_format("~~~\nx\n~~~", true), TextFormat::Markdown);
    }

    #[test]
    fn long_texts_fold() {
        let short = ShownText {
            raw: "a\nb".into(),
            html: String::new(),
        };
        assert!(!short.is_long());
        let many_lines = ShownText {
            raw: "x\n".repeat(FOLD_LINES + 1),
            html: String::new(),
        };
        assert!(many_lines.is_long());
        let wide = ShownText {
            raw: "é".repeat(FOLD_CHARS + 1),
            html: String::new(),
        };
        assert!(wide.is_long());
        let at_the_limit = ShownText {
            raw: "é".repeat(FOLD_CHARS),
            html: String::new(),
        };
        assert!(!at_the_limit.is_long());
    }
}
