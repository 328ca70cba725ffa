//! Jinja prompt templates (minijinja) over an item's fields, compiled once per eval.
//!
//! Three rules make a template safe to run on every item of a million-item run, on a shared
//! server, from a researcher's text:
//! - **Strict undefined variables**: a field the item lacks is an error naming the field,
//!   never an empty string. The eval form checks every item of the dataset when it is saved.
//! - **Fuel**: minijinja charges every instruction and every byte a template creates (its
//!   output, and the strings and lists its operators and filters build) against a budget, so
//!   no template can loop for long or grow a value past the budget (`{{ input * 10**9 }}` and
//!   doubling loops stop early instead of exhausting memory).
//! - **The prompt-size limit** on what comes out ([`super::MAX_PROMPT_BYTES`]).
//!
//! Templates cannot load other templates (there is no loader) and never escape HTML.

use super::{describe_bytes, MAX_PROMPT_BYTES, MAX_TEMPLATE_BYTES};
use crate::fields::choice_letter;
use minijinja::{Environment, UndefinedBehavior, Value};
use std::collections::{BTreeMap, HashSet};

/// Fuel for one render: about 64 bytes a unit, so roughly 16 MiB of values and output, or a
/// few hundred thousand instructions: sixteen times the largest prompt, far below what would
/// hurt a worker.
const RENDER_FUEL: u64 = 256 * 1024;
/// Nesting depth for loops, includes and macro calls.
const RECURSION_LIMIT: usize = 64;

/// Names every template may use besides the item's fields.
const HELPERS: [&str; 4] = ["letter", "range", "namespace", "loop"];

/// Templates of one eval, compiled: each is rendered against the same variables.
pub struct JinjaTemplates {
    env: Environment<'static>,
    /// Variables each template reads from outside itself, by template name.
    reads: BTreeMap<String, Vec<String>>,
}

impl std::fmt::Debug for JinjaTemplates {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("JinjaTemplates")
            .field("templates", &self.reads.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl JinjaTemplates {
    /// Compiles named templates (`what` names each in error messages, e.g. "the prompt
    /// template"); a syntax error names the template and its line.
    pub fn compile(sources: &[(&str, &str)]) -> Result<JinjaTemplates, String> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_fuel(Some(RENDER_FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.add_filter("lettered", lettered);
        env.add_function("letter", letter);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        let mut reads = BTreeMap::new();
        for (what, source) in sources {
            if source.len() > MAX_TEMPLATE_BYTES {
                return Err(format!(
                    "{what} is {}; the limit is {}",
                    describe_bytes(source.len()),
                    describe_bytes(MAX_TEMPLATE_BYTES)
                ));
            }
            env.add_template_owned(what.to_string(), source.to_string())
                .map_err(|err| format!("{what} is not a valid template: {}", describe(&err)))?;
            let template = env.get_template(what).expect("just added");
            let mut names: Vec<String> = template
                .undeclared_variables(false)
                .into_iter()
                .filter(|name| !HELPERS.contains(&name.as_str()))
                .collect();
            names.sort();
            reads.insert(what.to_string(), names);
        }
        Ok(JinjaTemplates { env, reads })
    }

    /// The names of the compiled templates.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.reads.keys().map(String::as_str)
    }

    /// The variables the named template reads from outside itself (sorted).
    pub fn reads(&self, what: &str) -> &[String] {
        self.reads.get(what).map_or(&[], Vec::as_slice)
    }

    /// Renders the named template against `variables`. A variable the template reads but
    /// `variables` lacks is refused by name before rendering.
    pub fn render(
        &self,
        what: &str,
        variables: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, String> {
        let template = self
            .env
            .get_template(what)
            .map_err(|err| format!("{what}: {}", describe(&err)))?;
        // Strict undefined refuses a missing field where it is used, while `is defined` and
        // `default` still serve optional ones; a failure then names the field when it can.
        let rendered = template
            .render(Value::from(minijinja::value::Serde(variables)))
            .map_err(|err| {
                let missing = self
                    .reads(what)
                    .iter()
                    .find(|name| !variables.contains_key(name.as_str()));
                match (err.kind(), missing) {
                    (minijinja::ErrorKind::UndefinedError, Some(missing)) => {
                        format!("{what} uses `{missing}`, which the item does not have")
                    }
                    _ => format!("{what} could not be rendered: {}", describe(&err)),
                }
            })?;
        if rendered.len() > MAX_PROMPT_BYTES {
            return Err(format!(
                "{what} renders to {}; the limit is {} per prompt",
                describe_bytes(rendered.len()),
                describe_bytes(MAX_PROMPT_BYTES)
            ));
        }
        Ok(rendered)
    }
}

/// An engine error in one line: its message and, when known, where in the template.
fn describe(err: &minijinja::Error) -> String {
    let kind = match err.kind() {
        minijinja::ErrorKind::OutOfFuel => {
            return "it does more work or builds larger values than a prompt template may (the \
                    render budget ran out)"
                .into()
        }
        minijinja::ErrorKind::UndefinedError => "a value it uses is undefined".to_string(),
        _ => err
            .detail()
            .map_or_else(|| err.kind().to_string(), str::to_string),
    };
    match err.line() {
        Some(line) => format!("{kind} (line {line})"),
        None => kind,
    }
}

/// `{{ letter(0) }}` → `A`.
fn letter(index: usize) -> Result<String, minijinja::Error> {
    choice_letter(index).map(String::from).ok_or_else(|| {
        minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("letter({index}) is past Z"),
        )
    })
}

/// `{{ choices | lettered }}` → `A. first\nB. second`.
fn lettered(choices: Vec<Value>) -> Result<String, minijinja::Error> {
    let mut lines = Vec::with_capacity(choices.len());
    for (index, choice) in choices.iter().enumerate() {
        lines.push(format!("{}. {choice}", letter(index)?));
    }
    Ok(lines.join("\n"))
}

/// The variable names a template source reads, for the eval form's field list (best effort:
/// an invalid template reads nothing).
pub fn variables_read(source: &str) -> HashSet<String> {
    let env = Environment::new();
    env.template_from_str(source)
        .map(|template| template.undeclared_variables(false))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        match value {
            serde_json::Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    fn one(source: &str) -> JinjaTemplates {
        JinjaTemplates::compile(&[("the prompt template", source)]).unwrap()
    }

    #[test]
    fn renders_fields_and_lettered_choices() {
        let templates = one(
            "{{ question }}\n{{ choices | lettered }}\nAnswer with {{ letter(0) }}-{{ letter(choices|length - 1) }}.",
        );
        let rendered = templates
            .render(
                "the prompt template",
                &vars(json!({"question": "Capital of France?", "choices": ["Berlin", "Paris"]})),
            )
            .unwrap();
        assert_eq!(
            rendered,
            "Capital of France?\nA. Berlin\nB. Paris\nAnswer with A-B."
        );
        assert_eq!(
            templates.reads("the prompt template"),
            ["choices", "question"]
        );
    }

    #[test]
    fn python_string_methods_work_as_in_jinja2_templates() {
        // lm-evaluation-harness's and promptfoo's templates call Python's methods.
        let templates = one("{{ question.strip() }}|{{ answer.split('####')[-1].strip() }}");
        let rendered = templates
            .render(
                "the prompt template",
                &vars(json!({"question": "  Q?\n", "answer": "3 + 4 = 7\n#### 7"})),
            )
            .unwrap();
        assert_eq!(rendered, "Q?|7");
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it_never_an_empty_string() {
        let templates = one("Q: {{ question }}");
        let refused = templates
            .render("the prompt template", &vars(json!({"input": "x"})))
            .unwrap_err();
        assert_eq!(
            refused,
            "the prompt template uses `question`, which the item does not have"
        );
        // Attributes of present fields are strict too.
        let nested = one("{{ meta.source }}");
        let refused = nested
            .render("the prompt template", &vars(json!({"meta": {}})))
            .unwrap_err();
        assert!(refused.contains("undefined"), "{refused}");
    }

    #[test]
    fn optional_fields_may_be_tested_or_defaulted() {
        let templates = one(
            "{{ question }}{% if hint is defined %} (hint: {{ hint }}){% endif %}{{ note | default('') }}",
        );
        assert_eq!(
            templates
                .render("the prompt template", &vars(json!({"question": "Q"})))
                .unwrap(),
            "Q"
        );
        assert_eq!(
            templates
                .render(
                    "the prompt template",
                    &vars(json!({"question": "Q", "hint": "h"}))
                )
                .unwrap(),
            "Q (hint: h)"
        );
    }

    #[test]
    fn syntax_errors_name_the_template_and_line() {
        let refused =
            JinjaTemplates::compile(&[("the system prompt", "ok\n{{ unclosed")]).unwrap_err();
        assert!(
            refused.starts_with("the system prompt is not a valid template"),
            "{refused}"
        );
        assert!(refused.contains("line 2"), "{refused}");
    }

    #[test]
    fn runaway_templates_stop_on_fuel_or_size_instead_of_exhausting_memory() {
        let input = "x".repeat(512 * 1024);
        let item = vars(json!({ "input": input }));
        for source in [
            "{{ input * 1000000000 }}",
            "{% set ns = namespace(s=input) %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
            "{% for i in range(100000) %}{% for j in range(100000) %}.{% endfor %}{% endfor %}",
            "{{ input|replace('x', input) }}",
        ] {
            let refused = one(source)
                .render("the prompt template", &item)
                .unwrap_err();
            assert!(
                refused.contains("render budget") || refused.contains("limit"),
                "{source}: {refused}"
            );
        }
        let too_long = one("{{ input }}{{ input }}{{ input }}")
            .render("the prompt template", &item)
            .unwrap_err();
        assert!(
            too_long.contains("renders to 1.5 MiB; the limit is 1.0 MiB"),
            "{too_long}"
        );
    }

    #[test]
    fn templates_cannot_load_files() {
        // There is no loader: an include names only the eval's own templates.
        let templates = JinjaTemplates::compile(&[
            ("the prompt template", "{% include '/etc/passwd' %}"),
            ("the system prompt", "[{% include 'the prompt template' %}]"),
        ])
        .unwrap();
        let loaded = templates.render("the prompt template", &vars(json!({})));
        assert!(
            loaded
                .as_ref()
                .is_err_and(|problem| problem.contains("could not be rendered")),
            "{loaded:?}"
        );
    }
}
