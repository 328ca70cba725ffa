//! A launcher's command template (`vllm serve {path} --tensor-parallel-size {tp} --port
//! {port}`), made into one replica's program and arguments. The template is split into
//! words like a shell would (quotes kept together) before anything is filled in, and no
//! shell ever runs it, so a model path with spaces or quotes stays one argument and cannot
//! add any.

use std::collections::BTreeMap;

/// The placeholders a template may use.
pub const PLACEHOLDERS: [&str; 6] = ["path", "model", "host", "port", "tp", "replica"];

/// What one replica's command is filled with.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaVars<'a> {
    pub path: &'a str,
    pub model: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub tensor_parallel: u32,
    pub replica: u32,
}

impl ReplicaVars<'_> {
    fn values(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("path", self.path.to_string()),
            ("model", self.model.to_string()),
            ("host", self.host.to_string()),
            ("port", self.port.to_string()),
            ("tp", self.tensor_parallel.to_string()),
            ("replica", self.replica.to_string()),
        ])
    }
}

/// Checks a template when the launcher's configuration is read: words, known placeholders,
/// and a program to run.
pub fn check_template(template: &str) -> Result<(), String> {
    let example = ReplicaVars {
        path: "/m",
        model: "m",
        host: "127.0.0.1",
        port: 1,
        tensor_parallel: 1,
        replica: 0,
    };
    render(template, &example).map(|_| ())
}

/// The program and its arguments for one replica.
pub fn render(template: &str, vars: &ReplicaVars<'_>) -> Result<Vec<String>, String> {
    let words = shell_words::split(template)
        .map_err(|err| format!("the command `{template}` cannot be split into words: {err}"))?;
    if words.is_empty() {
        return Err("the command is empty".into());
    }
    let values = vars.values();
    words
        .iter()
        .map(|word| fill(word, &values))
        .collect::<Result<Vec<_>, _>>()
}

fn fill(word: &str, values: &BTreeMap<&'static str, String>) -> Result<String, String> {
    let mut filled = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(open) = rest.find(['{', '}']) {
        filled.push_str(&rest[..open]);
        let tail = &rest[open..];
        if let Some(after) = tail.strip_prefix("{{") {
            filled.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            filled.push('}');
            rest = after;
        } else if tail.starts_with('}') {
            return Err(format!("a lone `}}` in `{word}`: write `}}}}` for a brace"));
        } else {
            let close = tail
                .find('}')
                .ok_or_else(|| format!("an unclosed `{{` in `{word}`"))?;
            let name = &tail[1..close];
            let value = values.get(name).ok_or_else(|| {
                format!(
                    "unknown placeholder `{{{name}}}`: use {}",
                    PLACEHOLDERS.map(|name| format!("{{{name}}}")).join(", ")
                )
            })?;
            filled.push_str(value);
            rest = &tail[close + 1..];
        }
    }
    filled.push_str(rest);
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(path: &str) -> ReplicaVars<'_> {
        ReplicaVars {
            path,
            model: "sft-7b",
            host: "127.0.0.1",
            port: 18101,
            tensor_parallel: 2,
            replica: 1,
        }
    }

    #[test]
    fn a_template_becomes_arguments_without_a_shell() {
        let command = render(
            "vllm serve {path} --tensor-parallel-size {tp} --port {port} --served-model-name '{model}'",
            &vars("/models/with space; rm -rf ~"),
        )
        .unwrap();
        assert_eq!(
            command,
            [
                "vllm",
                "serve",
                "/models/with space; rm -rf ~",
                "--tensor-parallel-size",
                "2",
                "--port",
                "18101",
                "--served-model-name",
                "sft-7b"
            ]
        );
        assert_eq!(
            render(
                "sim --addr {host}:{port} --json '{{\"r\":{replica}}}'",
                &vars("/m")
            )
            .unwrap()[4],
            "{\"r\":1}"
        );
    }

    #[test]
    fn bad_templates_are_refused_by_what_is_wrong() {
        assert!(check_template("vllm serve {paht}")
            .unwrap_err()
            .contains("unknown placeholder `{paht}`"));
        assert!(check_template("vllm serve {path")
            .unwrap_err()
            .contains("unclosed"));
        assert!(check_template("vllm serve 'x")
            .unwrap_err()
            .contains("cannot be split"));
        assert!(check_template("  ").unwrap_err().contains("empty"));
        assert!(check_template("x }").unwrap_err().contains("lone"));
        assert!(check_template("arbiter model serve --gguf {path} --addr {host}:{port}").is_ok());
    }
}
