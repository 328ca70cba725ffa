//! `arbiter bench instructions`: `--items` (default 200,000) answers checked against their
//! items' IFEval instructions, strictly and loosely, as a worker grades them: answers and
//! instructions per second on one core. The answers are the demo suite's following, flawed
//! and chatty ones, in turn.

use crate::demo::INSTRUCTIONS_DATASET;
use arbiter_domain::grading::instructions::{
    InstructionFollowing, DEFAULT_IDS_FIELD, DEFAULT_KWARGS_FIELD,
};
use serde_json::{Map, Value};
use std::time::Instant;

pub(crate) fn run(answers: usize) -> anyhow::Result<()> {
    let grader = InstructionFollowing {
        ids_field: DEFAULT_IDS_FIELD.into(),
        kwargs_field: DEFAULT_KWARGS_FIELD.into(),
    };
    let mut cases: Vec<(Map<String, Value>, String)> = Vec::new();
    for line in std::str::from_utf8(INSTRUCTIONS_DATASET)?.lines() {
        let Value::Object(item) = serde_json::from_str(line)? else {
            anyhow::bail!("an item of the demo suite is not an object");
        };
        let text = |name: &str| item[name].as_str().unwrap_or_default().to_string();
        let (following, flawed) = (text("response"), text("flawed"));
        let chatty = format!("Sure! Here is my answer:\n{following}");
        for answer in [following, flawed, chatty] {
            cases.push((item.clone(), answer));
        }
    }
    let started = Instant::now();
    let (mut instructions, mut passed) = (0usize, 0usize);
    for index in 0..answers {
        let (item, answer) = &cases[index % cases.len()];
        let graded = grader.grade(answer, item);
        instructions += graded.results.len();
        passed += usize::from(graded.results.iter().all(|r| r.strict));
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("instructions: {answers} answers ({instructions} instructions) checked strictly and loosely in {seconds:.2} s");
    println!(
        "  {:.0} answers/s, {:.0} instructions/s on one core; {:.1}% followed every instruction",
        answers as f64 / seconds,
        instructions as f64 / seconds,
        passed as f64 * 100.0 / answers as f64
    );
    Ok(())
}
