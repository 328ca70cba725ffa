//! The `code_tests` grader's pure part: which program an answer stands for (the code taken from
//! the answer, between the item's prefix and its tests), the sandbox limits it runs under, and
//! what the sandbox's report means as a grade.
//!
//! Running the program is the engine's job (`arbiter_engine::sandbox`); nothing here executes
//! anything. The program is assembled as HumanEval's harness assembles it: prefix (the item's
//! prompt, for completions that continue it) + code + "\n" + tests + "\n" + `check(entry)`.
//! The outcomes are kept apart: passed, failed (with the failing assertion and the last lines
//! of stderr as evidence), timed out, and a sandbox error, which is an infrastructure fault and
//! never a verdict on the model.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Grade, Verdict};
use crate::fields::lookup;

/// How much of the answer is the program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeExtraction {
    /// The first fenced code block (```` ```python ````, ```` ```py ```` or unlabelled), else the
    /// whole answer: what chat models write.
    #[default]
    Fenced,
    /// The whole answer as it is: a completion that continues the prompt's code.
    Whole,
}

/// Limits of one sandboxed test run. Part of the grader spec, so they are frozen in the
/// manifest and in the grade cache key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxLimits {
    /// CPU time of the program, in seconds (RLIMIT_CPU).
    #[serde(default = "default_cpu_seconds")]
    pub cpu_seconds: u32,
    /// Time from start to finish, in seconds; the run is killed when it is up.
    #[serde(default = "default_wall_seconds")]
    pub wall_seconds: u32,
    /// Address space of each process, in MiB (RLIMIT_AS).
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u32,
    /// Processes and threads the program may have at once (RLIMIT_NPROC in its own user
    /// namespace): a fork bomb stops here.
    #[serde(default = "default_processes")]
    pub processes: u32,
    /// Output on stdout and stderr together, in KiB; the run is stopped beyond it.
    #[serde(default = "default_output_kib")]
    pub output_kib: u32,
    /// Size of the private temporary directory, in MiB (also the largest file it may write).
    #[serde(default = "default_temp_mib")]
    pub temp_mib: u32,
}

fn default_cpu_seconds() -> u32 {
    10
}
fn default_wall_seconds() -> u32 {
    15
}
fn default_memory_mib() -> u32 {
    1024
}
fn default_processes() -> u32 {
    64
}
fn default_output_kib() -> u32 {
    256
}
fn default_temp_mib() -> u32 {
    64
}

impl Default for SandboxLimits {
    fn default() -> SandboxLimits {
        SandboxLimits {
            cpu_seconds: default_cpu_seconds(),
            wall_seconds: default_wall_seconds(),
            memory_mib: default_memory_mib(),
            processes: default_processes(),
            output_kib: default_output_kib(),
            temp_mib: default_temp_mib(),
        }
    }
}

impl SandboxLimits {
    /// The first limit outside its range, in words.
    pub fn validate(&self) -> Result<(), String> {
        let ranges: [(&str, u32, u32, u32); 6] = [
            ("cpu_seconds", self.cpu_seconds, 1, 600),
            ("wall_seconds", self.wall_seconds, 1, 900),
            ("memory_mib", self.memory_mib, 64, 65_536),
            ("processes", self.processes, 1, 4_096),
            ("output_kib", self.output_kib, 1, 65_536),
            ("temp_mib", self.temp_mib, 1, 16_384),
        ];
        for (name, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(format!(
                    "the sandbox limit `{name}` must be between {min} and {max}, not {value}"
                ));
            }
        }
        Ok(())
    }
}

/// A checked `code_tests` grader: where the program comes from and how it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeTests {
    pub extract: CodeExtraction,
    pub prefix_field: Option<String>,
    pub tests_field: String,
    pub entry_point_field: Option<String>,
    pub limits: SandboxLimits,
}

/// The sandbox a run's code tests ran in, frozen in its manifest: a worker whose sandbox
/// differs does not grade the run's answers (its verdicts could differ).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRuntime {
    /// The isolation, with its version (`bubblewrap 0.8.0`).
    pub isolation: String,
    /// The interpreter, with its version (`Python 3.11.2`).
    pub interpreter: String,
}

impl std::fmt::Display for SandboxRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} in {}", self.interpreter, self.isolation)
    }
}

impl CodeTests {
    /// HumanEval's fields, as its harness reads them: the answer completes `prompt`, then
    /// `test` and `check(entry_point)` run; default limits.
    pub fn human_eval() -> CodeTests {
        CodeTests {
            extract: CodeExtraction::Whole,
            prefix_field: Some("prompt".into()),
            tests_field: "test".into(),
            entry_point_field: Some("entry_point".into()),
            limits: SandboxLimits::default(),
        }
    }

    /// Checks the field names and limits, before any item is read.
    pub fn validate(&self) -> Result<(), String> {
        let named = [
            Some(("tests_field", &self.tests_field)),
            self.prefix_field
                .as_ref()
                .map(|field| ("prefix_field", field)),
            self.entry_point_field
                .as_ref()
                .map(|field| ("entry_point_field", field)),
        ];
        for (setting, field) in named.into_iter().flatten() {
            if field.trim().is_empty() {
                return Err(format!("`{setting}` must name a field of the items"));
            }
        }
        self.limits.validate()
    }

    /// Checks that an item has what the grader reads: its tests (and prefix) as text, and an
    /// entry point that is a Python name. The problem names the field; callers name the item.
    pub fn check_item(&self, fields: &Map<String, Value>) -> Result<(), String> {
        self.item_parts(fields).map(|_| ())
    }

    /// The program that tests `answer` on the item: prefix + code + tests + `check(entry)`.
    pub fn program(&self, answer: &str, fields: &Map<String, Value>) -> Result<String, String> {
        let parts = self.item_parts(fields)?;
        let code = match self.extract {
            CodeExtraction::Fenced => fenced_code(answer).unwrap_or(answer),
            CodeExtraction::Whole => answer,
        };
        let mut program =
            String::with_capacity(parts.prefix.len() + code.len() + parts.tests.len() + 64);
        program.push_str(parts.prefix);
        program.push_str(code);
        program.push('\n');
        program.push_str(parts.tests);
        program.push('\n');
        if let Some(entry_point) = parts.entry_point {
            program.push_str(&format!("check({entry_point})\n"));
        }
        Ok(program)
    }

    fn item_parts<'a>(&self, fields: &'a Map<String, Value>) -> Result<ItemParts<'a>, String> {
        let text = |name: &str| -> Result<&'a str, String> {
            match lookup(fields, name) {
                Some(Value::String(text)) => Ok(text),
                Some(_) => Err(format!("field `{name}` must be text (code)")),
                None => Err(format!("has no field `{name}`")),
            }
        };
        let entry_point = match &self.entry_point_field {
            Some(name) => {
                let entry = text(name)?.trim();
                if !is_python_name(entry) {
                    return Err(format!(
                        "field `{name}` must be a Python function name, not `{entry}`"
                    ));
                }
                Some(entry)
            }
            None => None,
        };
        Ok(ItemParts {
            prefix: match &self.prefix_field {
                Some(name) => text(name)?,
                None => "",
            },
            tests: text(&self.tests_field)?,
            entry_point,
        })
    }

    /// The grade cache key of one program under this grader in `runtime`: the same program,
    /// limits and sandbox always give the same outcome, so it is run once.
    pub fn cache_key(&self, runtime: &SandboxRuntime, program: &str) -> String {
        let mut hasher = Sha256::new();
        let limits = serde_json::to_string(&self.limits).expect("limits always serialize");
        for part in [
            // v3: the runner's start and pass lines (an early exit no longer passes), and
            // output flushed on failure.
            "arbiter-code-tests-v3",
            &runtime.isolation,
            &runtime.interpreter,
            &limits,
            program,
        ] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        format!("sha256:{}", hex::encode(hasher.finalize()))
    }
}

struct ItemParts<'a> {
    prefix: &'a str,
    tests: &'a str,
    entry_point: Option<&'a str>,
}

fn is_python_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|first| first == '_' || first.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// The first fenced block labelled as Python (or unlabelled), without its fences.
fn fenced_code(answer: &str) -> Option<&str> {
    let mut rest = answer;
    while let Some(open) = rest.find("```") {
        let after_fence = &rest[open + 3..];
        let line_end = after_fence.find('\n')?;
        let label = after_fence[..line_end].trim().to_ascii_lowercase();
        let body = &after_fence[line_end + 1..];
        let close = body.find("```").unwrap_or(body.len());
        if matches!(label.as_str(), "" | "python" | "py" | "python3") {
            return Some(&body[..close]);
        }
        rest = body.get(close + 3..).unwrap_or("");
    }
    None
}

/// What the sandbox reported about one run of a program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CodeOutcome {
    Passed,
    /// The program ran and did not finish cleanly: an exception (a failed assertion), an exit
    /// code, a signal, a resource limit, or too much output.
    Failed {
        /// The failing `assert` line, when the traceback shows one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        assertion: Option<String>,
        /// The exception (`AssertionError`, `NameError: name 'x' is not defined`) or the way
        /// the process ended.
        problem: String,
        /// The last lines of stderr.
        stderr_tail: String,
    },
    /// Killed at a time limit (`wall` or `cpu`).
    TimedOut {
        limit: String,
    },
    /// The sandbox could not run the program at all: never the model's fault.
    SandboxError {
        reason: String,
    },
}

/// How a sandboxed process ended, as the engine saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessEnd {
    /// The program's exit code (a signal `n` shows as `128 + n`, as the sandbox reports it).
    Exited(i32),
    /// Killed after the wall-clock limit.
    WallTimeout,
    /// Killed for printing more than the output limit.
    OutputLimit,
    /// The sandbox failed before the program started.
    NotStarted(String),
}

/// Stderr lines kept as evidence.
const STDERR_TAIL_LINES: usize = 12;
/// Characters of stderr kept as evidence.
const STDERR_TAIL_CHARS: usize = 2_000;
const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;

/// What the engine saw of one sandboxed run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFacts {
    pub end: ProcessEnd,
    /// The runner said the program was starting: the sandbox and the interpreter came up.
    pub started: bool,
    /// The runner said the program returned (its tests ran to the end).
    pub finished_tests: bool,
}

/// What a sandboxed run means, from how it ended and its stderr. A run whose program never
/// started (the sandbox could not be set up, a limit could not be set, the interpreter did not
/// start) is a sandbox error, never the model's failure; one that exited 0 before its tests
/// finished failed.
pub fn classify(facts: &RunFacts, stderr: &str, limits: &SandboxLimits) -> CodeOutcome {
    let failed = |problem: String| CodeOutcome::Failed {
        assertion: failing_assertion(stderr),
        problem,
        stderr_tail: tail(stderr),
    };
    let end = &facts.end;
    if !facts.started {
        return CodeOutcome::SandboxError {
            reason: match end {
                ProcessEnd::NotStarted(reason) => reason.clone(),
                ProcessEnd::WallTimeout => {
                    format!("nothing started within {} s", limits.wall_seconds)
                }
                _ => format!(
                    "the program did not start: {}",
                    stderr.trim().chars().take(500).collect::<String>()
                ),
            },
        };
    }
    match end {
        ProcessEnd::Exited(0) if facts.finished_tests => CodeOutcome::Passed,
        ProcessEnd::Exited(0) => {
            failed("the program exited (code 0) before its tests finished".into())
        }
        ProcessEnd::Exited(code) if *code == 128 + SIGXCPU => CodeOutcome::TimedOut {
            limit: format!("{} s of CPU time", limits.cpu_seconds),
        },
        ProcessEnd::Exited(code) if *code == 128 + SIGKILL => {
            failed("the program was killed (SIGKILL), past a resource limit".into())
        }
        ProcessEnd::Exited(code) if *code > 128 => {
            failed(format!("the program was killed by signal {}", code - 128))
        }
        ProcessEnd::Exited(code) => failed(
            last_exception(stderr).unwrap_or_else(|| format!("the program exited with {code}")),
        ),
        ProcessEnd::WallTimeout => CodeOutcome::TimedOut {
            limit: format!("{} s of wall-clock time", limits.wall_seconds),
        },
        ProcessEnd::OutputLimit => failed(format!(
            "the program printed more than {} KiB and was stopped",
            limits.output_kib
        )),
        ProcessEnd::NotStarted(reason) => CodeOutcome::SandboxError {
            reason: reason.clone(),
        },
    }
}

impl CodeOutcome {
    /// Whether the outcome could differ on a less loaded host (a wall-clock timeout, a kill the
    /// out-of-memory killer may have sent): such outcomes are graded but not cached.
    pub fn depends_on_the_host(&self) -> bool {
        match self {
            CodeOutcome::TimedOut { limit } => limit.contains("wall-clock"),
            CodeOutcome::Failed { problem, .. } => problem.contains("SIGKILL"),
            _ => false,
        }
    }

    /// The grade of an outcome; `None` for a sandbox error, which grades nothing.
    pub fn grade(&self, grader: &str) -> Option<Grade> {
        let (verdict, reason) = match self {
            CodeOutcome::Passed => (Verdict::Pass, "the item's tests passed".to_string()),
            CodeOutcome::Failed {
                assertion,
                problem,
                stderr_tail,
            } => {
                let mut reason = match assertion {
                    Some(assertion) => format!("the tests failed at `{assertion}`: {problem}"),
                    None => format!("the tests failed: {problem}"),
                };
                if !stderr_tail.is_empty() {
                    reason.push_str("\n--- last lines of stderr ---\n");
                    reason.push_str(stderr_tail);
                }
                (Verdict::Fail, reason)
            }
            CodeOutcome::TimedOut { limit } => (
                Verdict::Fail,
                format!("the tests did not finish within {limit}"),
            ),
            CodeOutcome::SandboxError { .. } => return None,
        };
        Some(Grade {
            grader: grader.to_string(),
            verdict,
            extracted_answer: None,
            reason,
        })
    }
}

/// The last `assert …` source line of a Python traceback.
fn failing_assertion(stderr: &str) -> Option<String> {
    stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| line.starts_with("assert ") || line.starts_with("assert("))
        .map(|line| line.chars().take(300).collect())
}

/// The exception line that ends a Python traceback (`AssertionError`, `ValueError: …`).
fn last_exception(stderr: &str) -> Option<String> {
    let line = stderr.lines().rev().find(|line| !line.trim().is_empty())?;
    let looks_like_exception = !line.starts_with(' ')
        && line.split(':').next().is_some_and(|name| {
            name.ends_with("Error") || name.ends_with("Exception") || !name.contains(' ')
        });
    looks_like_exception.then(|| line.chars().take(300).collect())
}

fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let kept = lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..].join("\n");
    let skip = kept.chars().count().saturating_sub(STDERR_TAIL_CHARS);
    kept.chars().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item() -> Map<String, Value> {
        json!({
            "prompt": "def add(a, b):\n    \"\"\"Adds.\"\"\"\n",
            "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
            "entry_point": "add",
        })
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn programs_are_assembled_as_human_eval_does() {
        let program = CodeTests::human_eval()
            .program("    return a + b\n", &item())
            .unwrap();
        assert_eq!(
            program,
            "def add(a, b):\n    \"\"\"Adds.\"\"\"\n    return a + b\n\n\
             def check(candidate):\n    assert candidate(1, 2) == 3\n\ncheck(add)\n"
        );
    }

    #[test]
    fn fenced_answers_give_their_python_block() {
        let grader = CodeTests {
            extract: CodeExtraction::Fenced,
            prefix_field: None,
            ..CodeTests::human_eval()
        };
        let answer = "Here:\n```text\nnot code\n```\n```python\ndef add(a, b):\n    return a + b\n```\nDone.";
        let program = grader.program(answer, &item()).unwrap();
        assert!(program.starts_with("def add(a, b):\n    return a + b\n\ndef check"));
        // No fence: the whole answer.
        let program = grader
            .program("def add(a, b): return a+b", &item())
            .unwrap();
        assert!(program.starts_with("def add(a, b): return a+b\n"));
        // An unclosed fence runs to the end.
        assert_eq!(fenced_code("```py\nx = 1\n"), Some("x = 1\n"));
    }

    #[test]
    fn items_missing_what_the_grader_reads_are_named() {
        let grader = CodeTests::human_eval();
        let mut fields = item();
        fields.remove("test");
        assert_eq!(
            grader.check_item(&fields).unwrap_err(),
            "has no field `test`"
        );
        let mut fields = item();
        fields.insert(
            "entry_point".into(),
            json!("add); import os; os.system('x'"),
        );
        assert!(grader
            .check_item(&fields)
            .unwrap_err()
            .contains("must be a Python function name"));
        let mut fields = item();
        fields.insert("prompt".into(), json!(7));
        assert_eq!(
            grader.check_item(&fields).unwrap_err(),
            "field `prompt` must be text (code)"
        );
    }

    #[test]
    fn limits_out_of_range_are_refused_by_name() {
        let mut grader = CodeTests::human_eval();
        grader.limits.wall_seconds = 0;
        assert!(grader.validate().unwrap_err().contains("`wall_seconds`"));
        grader.limits = SandboxLimits::default();
        grader.tests_field = " ".into();
        assert!(grader.validate().unwrap_err().contains("`tests_field`"));
    }

    /// A run whose program started and returned.
    fn ran(end: ProcessEnd) -> RunFacts {
        RunFacts {
            end,
            started: true,
            finished_tests: true,
        }
    }

    const TRACEBACK: &str = "Traceback (most recent call last):\n  File \"program.py\", line 9, in <module>\n  File \"program.py\", line 6, in check\n    assert candidate(1, 2) == 3\nAssertionError\n";

    #[test]
    fn outcomes_are_kept_apart() {
        let limits = SandboxLimits::default();
        assert_eq!(
            classify(&ran(ProcessEnd::Exited(0)), "", &limits),
            CodeOutcome::Passed
        );
        let early = classify(
            &RunFacts {
                finished_tests: false,
                ..ran(ProcessEnd::Exited(0))
            },
            "",
            &limits,
        );
        assert!(
            matches!(early, CodeOutcome::Failed { ref problem, .. } if problem.contains("before its tests finished"))
        );
        let never = RunFacts {
            end: ProcessEnd::Exited(1),
            started: false,
            finished_tests: false,
        };
        assert!(matches!(
            classify(&never, "bwrap: Can't mount proc", &limits),
            CodeOutcome::SandboxError { ref reason } if reason.contains("bwrap: Can't mount proc")
        ));
        let failed = classify(&ran(ProcessEnd::Exited(1)), TRACEBACK, &limits);
        assert_eq!(
            failed,
            CodeOutcome::Failed {
                assertion: Some("assert candidate(1, 2) == 3".into()),
                problem: "AssertionError".into(),
                stderr_tail: TRACEBACK.trim_end().into(),
            }
        );
        let grade = failed.grade("code_tests@1").unwrap();
        assert_eq!(grade.verdict, Verdict::Fail);
        assert!(grade
            .reason
            .starts_with("the tests failed at `assert candidate(1, 2) == 3`: AssertionError"));
        assert!(grade.reason.contains("last lines of stderr"));
        assert_eq!(
            classify(&ran(ProcessEnd::Exited(128 + 24)), "", &limits),
            CodeOutcome::TimedOut {
                limit: "10 s of CPU time".into()
            }
        );
        assert!(matches!(
            classify(&ran(ProcessEnd::WallTimeout), "", &limits),
            CodeOutcome::TimedOut { .. }
        ));
        let error = classify(
            &ran(ProcessEnd::NotStarted("bwrap: no".into())),
            "",
            &limits,
        );
        assert_eq!(error.grade("code_tests@1"), None);
        let noisy = classify(&ran(ProcessEnd::OutputLimit), "", &limits);
        assert!(
            matches!(noisy, CodeOutcome::Failed { ref problem, .. } if problem.contains("256 KiB"))
        );
        let exited = classify(&ran(ProcessEnd::Exited(3)), "", &limits);
        assert!(
            matches!(exited, CodeOutcome::Failed { ref problem, .. } if problem == "the program exited with 3")
        );
    }

    #[test]
    fn outcomes_round_trip_through_the_grade_cache() {
        let outcome = classify(
            &ran(ProcessEnd::Exited(1)),
            TRACEBACK,
            &SandboxLimits::default(),
        );
        let stored = serde_json::to_string(&outcome).unwrap();
        assert_eq!(
            serde_json::from_str::<CodeOutcome>(&stored).unwrap(),
            outcome
        );
    }

    #[test]
    fn the_cache_key_covers_the_runtime_the_limits_and_the_program() {
        let grader = CodeTests::human_eval();
        let runtime = SandboxRuntime {
            isolation: "bubblewrap 0.8.0".into(),
            interpreter: "Python 3.11.2".into(),
        };
        let key = grader.cache_key(&runtime, "print(1)");
        assert_ne!(key, grader.cache_key(&runtime, "print(2)"));
        let newer = SandboxRuntime {
            interpreter: "Python 3.12.1".into(),
            ..runtime.clone()
        };
        assert_ne!(key, grader.cache_key(&newer, "print(1)"));
        let mut tighter = CodeTests::human_eval();
        tighter.limits.cpu_seconds = 1;
        assert_ne!(key, tighter.cache_key(&runtime, "print(1)"));
    }
}
