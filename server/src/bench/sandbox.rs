//! `arbiter bench sandbox`: code tests through the sandbox pool at its concurrency (the
//! machine's cores unless ARBITER_SANDBOX_CONCURRENCY says otherwise). The programs are the
//! demo's code problems, half with their canonical solution (passing) and half with a wrong
//! body (failing), as a grader sees them. Printed: tests per second and each run's latency,
//! then the same programs run by the bare interpreter with no sandbox, for the sandbox's cost
//! as a ratio measured back to back.

use super::support::percentile;
use anyhow::Context;
use arbiter_domain::grading::code_tests::{CodeOutcome, CodeTests, SandboxLimits};
use arbiter_engine::sandbox::Sandbox;
use std::time::Instant;

/// The programs: problem `i % 8` of the demo's code set, passing on even `i`.
fn programs(count: usize) -> anyhow::Result<Vec<(String, bool)>> {
    let grader = CodeTests::human_eval();
    let problems: Vec<serde_json::Map<String, serde_json::Value>> =
        std::str::from_utf8(crate::demo::CODE_DATASET)?
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
    (0..count)
        .map(|index| {
            let problem = &problems[index % problems.len()];
            let passing = index % 2 == 0;
            let body = if passing {
                problem["canonical_solution"].as_str().unwrap_or_default()
            } else {
                "    return None\n"
            };
            let program = grader
                .program(body, problem)
                .map_err(|problem| anyhow::anyhow!(problem))?;
            Ok((program, passing))
        })
        .collect()
}

pub async fn run(count: usize) -> anyhow::Result<()> {
    let sandbox = Sandbox::shared()
        .await
        .map_err(|why| anyhow::anyhow!(why))
        .context("the sandbox cannot run here")?;
    let concurrency = arbiter_engine::sandbox::SandboxConfig::from_env().concurrency;
    println!(
        "sandbox: {} · {} runs at once · {count} test runs",
        sandbox.runtime(),
        concurrency
    );
    let programs = programs(count)?;
    let limits = SandboxLimits::default();
    let started = Instant::now();
    let runs = programs.iter().map(|(program, passing)| {
        let sandbox = &sandbox;
        let limits = &limits;
        async move {
            let report = sandbox.run(program, limits).await;
            let right = (report.outcome == CodeOutcome::Passed) == *passing;
            (report.duration.as_secs_f64() * 1000.0, right)
        }
    });
    let results = futures::future::join_all(runs).await;
    let sandboxed = started.elapsed().as_secs_f64();
    let wrong = results.iter().filter(|(_, right)| !right).count();
    anyhow::ensure!(wrong == 0, "{wrong} runs had the wrong outcome");
    let mut latencies: Vec<f64> = results.iter().map(|(ms, _)| *ms).collect();
    println!(
        "sandboxed: {:.1} tests/s ({count} in {sandboxed:.2} s); per run p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        count as f64 / sandboxed,
        percentile(&mut latencies, 0.50),
        percentile(&mut latencies, 0.95),
        percentile(&mut latencies, 1.0),
    );

    // The same programs, the same runner, no sandbox: what isolation costs.
    let python = arbiter_engine::sandbox::SandboxConfig::from_env().python;
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
    let started = Instant::now();
    let bare = programs.iter().map(|(program, _)| {
        let permits = permits.clone();
        let python = python.clone();
        async move {
            let _permit = permits.acquire().await.expect("never closed");
            let mut child = tokio::process::Command::new(&python)
                .args(["-I", "-c", arbiter_engine::sandbox::RUNNER])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()?;
            let mut stdin = child.stdin.take().expect("piped");
            tokio::io::AsyncWriteExt::write_all(&mut stdin, program.as_bytes()).await?;
            drop(stdin);
            child.wait().await
        }
    });
    for status in futures::future::join_all(bare).await {
        status?;
    }
    let unsandboxed = started.elapsed().as_secs_f64();
    println!(
        "bare interpreter, no sandbox: {:.1} tests/s; the sandbox costs {:.2}x its time",
        count as f64 / unsandboxed,
        sandboxed / unsandboxed
    );
    Ok(())
}
