//! `arbiter submit`, `wait` and `report`: CI's view of a run through the REST API, ending in
//! an exit status (0 no significant regression, 1 a significant regression, 2 an error, 3
//! timed out or not complete).

use crate::{ReportArgs, ReportCommandArgs, SubmitArgs, WaitArgs};
use anyhow::{bail, Context};
use arbiter_domain::ids::RunId;
use arbiter_domain::run::RunStatus;
use server::ci::{
    report, submit, wait, ApiClient, Baseline, SubmitManifest, EXIT_INCOMPLETE, EXIT_OK,
};
use std::time::Duration;

/// Ends a CI command with its exit status; its errors exit 2 (never 1, which means a regression).
pub(crate) fn exit_with(result: anyhow::Result<u8>) -> ! {
    let code = result.unwrap_or_else(|err| {
        eprintln!("error: {err:#}");
        server::ci::EXIT_ERROR
    });
    std::process::exit(i32::from(code))
}

/// `arbiter submit`: launch, then (with `--wait`) follow and judge. Returns the exit status.
pub async fn run_submit(args: &SubmitArgs) -> anyhow::Result<u8> {
    let mut manifest = match &args.manifest {
        Some(path) => SubmitManifest::parse(
            &std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the manifest {}", path.display()))?,
        )?,
        None => SubmitManifest::default(),
    };
    if let Some(eval) = &args.eval {
        manifest.launch.eval = Some(eval.clone());
        manifest.launch.eval_id = None;
    }
    if let Some(checkpoint) = &args.checkpoint {
        manifest.launch.checkpoint = Some(checkpoint.clone());
        manifest.launch.checkpoint_id = None;
    }
    if args.priority.is_some() {
        manifest.launch.priority = args.priority.clone();
    }
    if let Some(baseline) = args.baseline.baseline() {
        manifest.baseline = Some(baseline);
    }
    let client = ApiClient::new(&args.api.server, &args.api.token)?;
    let run_id = submit(&client, &manifest).await?;
    if !args.wait {
        println!("{run_id}");
        return Ok(EXIT_OK);
    }
    follow(
        &client,
        run_id,
        args.timeout_minutes,
        manifest.baseline.as_ref(),
        &args.report,
    )
    .await
}

/// `arbiter wait`: follow a run, then judge it.
pub async fn run_wait(args: &WaitArgs) -> anyhow::Result<u8> {
    let client = ApiClient::new(&args.api.server, &args.api.token)?;
    follow(
        &client,
        args.run,
        args.timeout_minutes,
        args.baseline.baseline().as_ref(),
        &args.report,
    )
    .await
}

/// `arbiter report`: judge a run as it stands.
pub async fn run_report(args: &ReportCommandArgs) -> anyhow::Result<u8> {
    let client = ApiClient::new(&args.api.server, &args.api.token)?;
    let verdict = report(
        &client,
        args.run,
        args.baseline.baseline().as_ref(),
        args.report.json,
    )
    .await?;
    Ok(verdict.exit_code(args.report.require_complete))
}

async fn follow(
    client: &ApiClient,
    run_id: RunId,
    timeout_minutes: u64,
    baseline: Option<&Baseline>,
    report_args: &ReportArgs,
) -> anyhow::Result<u8> {
    let timeout = Duration::from_secs(timeout_minutes.saturating_mul(60));
    let Some(progress) = wait(client, run_id, timeout).await? else {
        eprintln!("run {run_id} did not finish within {timeout_minutes} minutes");
        return Ok(EXIT_INCOMPLETE);
    };
    if progress.status != RunStatus::Completed {
        bail!("run {run_id} ended {}", progress.status);
    }
    let verdict = report(client, run_id, baseline, report_args.json).await?;
    Ok(verdict.exit_code(report_args.require_complete))
}
