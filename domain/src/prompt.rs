//! Prompt rendering: an eval's template filled with one item's input.

/// The placeholder in a prompt template that receives a dataset item's `input`.
pub const INPUT_PLACEHOLDER: &str = "{input}";

/// Fills a prompt template with one item's input.
pub fn render_prompt(template: &str, input: &str) -> String {
    template.replace(INPUT_PLACEHOLDER, input)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_input_into_the_template() {
        assert_eq!(render_prompt("Q: {input}\nA:", "2+2?"), "Q: 2+2?\nA:");
    }
}
