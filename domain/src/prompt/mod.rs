//! Prompt rendering: an eval's template filled with one item's input, and the bounds that keep
//! a template (and what it renders to) from exhausting a server's memory.
//!
//! A template may repeat `{input}`, so the rendered size is checked from the lengths alone,
//! before anything is rendered: a thousand copies of a large input are refused, never built.
//!
//! [`request`] holds an eval's prompt parts and renders them for one item; [`template`] is the
//! Jinja engine under the `jinja` syntax.

pub mod few_shot;
pub mod request;
pub mod template;

pub use request::{Api, MessageTemplate, PromptBody, PromptRenderer, PromptSpec, TemplateSyntax};

/// The placeholder in a prompt template that receives a dataset item's `input`.
pub const INPUT_PLACEHOLDER: &str = "{input}";

/// Longest prompt template accepted, in bytes: room for long few-shot prompts, far short of a
/// document.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

/// Longest prompt Arbiter renders and sends, in bytes (1 MiB, about 250,000 tokens: beyond any
/// served context). Item fields longer than this could never be sent, so uploads refuse them.
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;

/// Fills a prompt template with one item's input. Callers check [`rendered_len`] against
/// [`MAX_PROMPT_BYTES`] first (the launch does, for the longest input of the revision).
pub fn render_prompt(template: &str, input: &str) -> String {
    template.replace(INPUT_PLACEHOLDER, input)
}

/// Checks a template as an eval is saved: it places the input, within [`MAX_TEMPLATE_BYTES`].
pub fn validate_template(template: &str) -> Result<(), String> {
    if template.len() > MAX_TEMPLATE_BYTES {
        return Err(format!(
            "the prompt template is {}; the limit is {}",
            describe_bytes(template.len()),
            describe_bytes(MAX_TEMPLATE_BYTES)
        ));
    }
    if !template.contains(INPUT_PLACEHOLDER) {
        return Err(format!(
            "the prompt template must contain {INPUT_PLACEHOLDER}, where each item's input goes"
        ));
    }
    Ok(())
}

/// The byte length [`render_prompt`] would produce for an input of `input_bytes`, computed
/// without rendering (saturating, so an absurd template cannot overflow the sum).
pub fn rendered_len(template: &str, input_bytes: usize) -> usize {
    let placeholders = template.matches(INPUT_PLACEHOLDER).count();
    let fixed = template.len() - placeholders * INPUT_PLACEHOLDER.len();
    fixed.saturating_add(placeholders.saturating_mul(input_bytes))
}

/// Why a template's prompt for an input of `input_bytes` would be too long, said of the item
/// ("its prompt would be …"), or `None` when it fits within [`MAX_PROMPT_BYTES`].
pub fn rendered_len_problem(template: &str, input_bytes: usize) -> Option<String> {
    let rendered = rendered_len(template, input_bytes);
    (rendered > MAX_PROMPT_BYTES).then(|| {
        let copies = template.matches(INPUT_PLACEHOLDER).count();
        format!(
            "its prompt would be {} ({copies} × its {} input); the limit is {} per prompt",
            describe_bytes(rendered),
            describe_bytes(input_bytes),
            describe_bytes(MAX_PROMPT_BYTES)
        )
    })
}

/// A size over a limit as people read them: rounded, or exact in bytes when rounding would
/// show the two as equal ("1.0 MiB; the limit is 1.0 MiB" says nothing).
pub fn describe_excess(size: usize, limit: usize) -> (String, String) {
    let (size_text, limit_text) = (describe_bytes(size), describe_bytes(limit));
    if size_text == limit_text && size != limit {
        (format!("{size} bytes"), format!("{limit} bytes"))
    } else {
        (size_text, limit_text)
    }
}

/// A size as people read it: bytes, KiB or MiB.
pub fn describe_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    if bytes < KIB {
        format!("{bytes} bytes")
    } else if bytes < KIB * KIB {
        format!("{:.1} KiB", bytes as f64 / KIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (KIB * KIB) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_input_into_the_template() {
        assert_eq!(render_prompt("Q: {input}\nA:", "2+2?"), "Q: 2+2?\nA:");
    }

    #[test]
    fn rendered_lengths_are_known_before_rendering() {
        for (template, input) in [
            ("Q: {input}\nA:", "2+2?"),
            ("{input}{input} and {input}", "héllo"),
            ("no placeholder", "ignored"),
        ] {
            assert_eq!(
                rendered_len(template, input.len()),
                render_prompt(template, input).len(),
                "{template}"
            );
        }
        assert_eq!(rendered_len("{input}", usize::MAX), usize::MAX);
    }

    #[test]
    fn a_template_repeating_a_large_input_is_refused_by_size() {
        let template = "{input}".repeat(1000);
        assert!(validate_template(&template).is_ok());
        let refused = rendered_len_problem(&template, 2 * 1024).unwrap();
        assert_eq!(
            refused,
            "its prompt would be 2.0 MiB (1000 × its 2.0 KiB input); the limit is 1.0 MiB per prompt"
        );
        assert!(rendered_len_problem(&template, 1024).is_none());
        assert!(rendered_len_problem("Q: {input}", MAX_PROMPT_BYTES).is_some());
    }

    #[test]
    fn templates_are_bounded_and_must_place_the_input() {
        let long = format!("{INPUT_PLACEHOLDER}{}", "x".repeat(MAX_TEMPLATE_BYTES));
        let refused = validate_template(&long).unwrap_err();
        assert!(refused.contains("the limit is 64.0 KiB"), "{refused}");
        assert!(validate_template("no placeholder").is_err());
        assert_eq!(describe_bytes(12), "12 bytes");
        assert_eq!(
            describe_excess(MAX_PROMPT_BYTES + 1, MAX_PROMPT_BYTES),
            ("1048577 bytes".to_string(), "1048576 bytes".to_string())
        );
        assert_eq!(
            describe_excess(2 * 1024 * 1024, MAX_PROMPT_BYTES).0,
            "2.0 MiB"
        );
    }
}
