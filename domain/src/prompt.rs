//! Prompt rendering: an eval's template filled with one item's input, and the bounds that keep
//! a template (and what it renders to) from exhausting a server's memory.
//!
//! A template may repeat `{input}`, so the rendered size is checked from the lengths alone,
//! before anything is rendered: a thousand copies of a large input are refused, never built.

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

/// Refuses a template whose prompt for the item `case_id` (with an input of `input_bytes`)
/// would exceed [`MAX_PROMPT_BYTES`], naming the item and the limit.
pub fn check_rendered_len(template: &str, case_id: &str, input_bytes: usize) -> Result<(), String> {
    let rendered = rendered_len(template, input_bytes);
    if rendered > MAX_PROMPT_BYTES {
        let copies = template.matches(INPUT_PLACEHOLDER).count();
        return Err(format!(
            "the prompt for item `{case_id}` would be {} ({copies} × its {} input); the limit \
             is {} per prompt",
            describe_bytes(rendered),
            describe_bytes(input_bytes),
            describe_bytes(MAX_PROMPT_BYTES)
        ));
    }
    Ok(())
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
    fn a_template_repeating_a_large_input_is_refused_by_size_naming_the_item() {
        let template = "{input}".repeat(1000);
        assert!(validate_template(&template).is_ok());
        let refused = check_rendered_len(&template, "case-7", 2 * 1024).unwrap_err();
        assert!(refused.contains("`case-7`"), "{refused}");
        assert!(refused.contains("1000 ×"), "{refused}");
        assert!(refused.contains("limit is 1.0 MiB"), "{refused}");
        assert!(check_rendered_len(&template, "case-7", 1024).is_ok());
        assert!(check_rendered_len("Q: {input}", "big", MAX_PROMPT_BYTES).is_err());
    }

    #[test]
    fn templates_are_bounded_and_must_place_the_input() {
        let long = format!("{INPUT_PLACEHOLDER}{}", "x".repeat(MAX_TEMPLATE_BYTES));
        let refused = validate_template(&long).unwrap_err();
        assert!(refused.contains("the limit is 64.0 KiB"), "{refused}");
        assert!(validate_template("no placeholder").is_err());
        assert_eq!(describe_bytes(12), "12 bytes");
    }
}
