//! `arbiter submit`, `arbiter wait` and `arbiter report`: the REST API's client for CI jobs and
//! training scripts. Submit a run, follow it, print its report, and turn a comparison against a
//! baseline into an exit status a pipeline can gate on.

use crate::http::rest::{ComparisonResponse, LaunchRequest, LaunchResponse, RunReport};
use anyhow::{anyhow, bail, Context};
use arbiter_domain::ids::RunId;
use arbiter_domain::reports::{CategoryReport, Completeness};
use arbiter_domain::run::{RunProgress, RunStatus, RunSummary};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Exit statuses, stable for scripts.
pub const EXIT_OK: u8 = 0;
/// A comparison found a significant regression (after correction).
pub const EXIT_REGRESSION: u8 = 1;
/// The command could not do its job: bad input, an unreachable server, a refused request, a
/// cancelled run.
pub const EXIT_ERROR: u8 = 2;
/// The run did not finish in time, or a report was not COMPLETE where `--require-complete`
/// asked for it.
pub const EXIT_INCOMPLETE: u8 = 3;

/// How often `wait` asks for the run's progress when it cannot follow its events: every
/// `FIRST_POLL` at first, doubling up to `POLL_EVERY`.
const FIRST_POLL: Duration = Duration::from_millis(100);
const POLL_EVERY: Duration = Duration::from_secs(2);
/// How often `wait` prints a progress line when its output is not a terminal (CI logs).
const LOG_EVERY: Duration = Duration::from_secs(15);

/// The REST API at `server`, as the token's owner.
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
}

impl ApiClient {
    pub fn new(server: &str, token: &str) -> anyhow::Result<ApiClient> {
        let server = server.trim().trim_end_matches('/');
        if !(server.starts_with("http://") || server.starts_with("https://")) {
            bail!("the server must be an http:// or https:// URL, not `{server}`");
        }
        if token.trim().is_empty() {
            bail!("no API token: pass --token or set ARBITER_TOKEN (make one on the Account page or with `arbiter token create`)");
        }
        Ok(ApiClient {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()?,
            base: format!("{server}/api/v1"),
            token: token.trim().to_string(),
        })
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<T> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("{what}: the server could not be reached"))?;
        let status = response.status();
        let body = response.bytes().await.context("reading the answer")?;
        if !status.is_success() {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .map(|body| body.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
            bail!("{what}: HTTP {}: {message}", status.as_u16());
        }
        serde_json::from_slice(&body).with_context(|| format!("{what}: unreadable answer"))
    }

    pub async fn get<T: DeserializeOwned>(&self, what: &str, path: &str) -> anyhow::Result<T> {
        self.answer(what, self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        body: &B,
    ) -> anyhow::Result<T> {
        self.answer(
            what,
            self.http.post(format!("{}{path}", self.base)).json(body),
        )
        .await
    }
}

/// The run to compare against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Baseline {
    /// A run by id.
    Run(RunId),
    /// The latest completed run of the same eval on this checkpoint.
    Checkpoint(String),
}

/// A manifest file for `arbiter submit --manifest`: what `POST /api/v1/runs` takes, plus the
/// baseline to compare against.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitManifest {
    #[serde(flatten)]
    pub launch: LaunchRequest,
    #[serde(default)]
    pub baseline: Option<Baseline>,
}

impl SubmitManifest {
    pub fn parse(text: &str) -> anyhow::Result<SubmitManifest> {
        serde_json::from_str(text).map_err(|err| anyhow!("the manifest is not valid: {err}"))
    }
}

/// What a report run decides, for the exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub regressed: bool,
    pub complete: bool,
}

impl Verdict {
    pub fn exit_code(&self, require_complete: bool) -> u8 {
        if self.regressed {
            EXIT_REGRESSION
        } else if require_complete && !self.complete {
            EXIT_INCOMPLETE
        } else {
            EXIT_OK
        }
    }
}

/// Launches the manifest's run; prints which run it is.
pub async fn submit(client: &ApiClient, manifest: &SubmitManifest) -> anyhow::Result<RunId> {
    let launched: LaunchResponse = client
        .post("launching the run", "/runs", &manifest.launch)
        .await?;
    eprintln!(
        "{} run {} ({})",
        if launched.created {
            "launched"
        } else {
            "already launched with this manifest:"
        },
        launched.run_id,
        launched.status
    );
    Ok(launched.run_id)
}

fn is_finished(status: RunStatus) -> bool {
    status.is_settled()
}

/// Shows a followed run's progress: a bar on a terminal, a line every few seconds otherwise.
struct ProgressDisplay {
    run_id: RunId,
    bar: Option<indicatif::ProgressBar>,
    last_line: Option<Instant>,
}

impl ProgressDisplay {
    fn new(run_id: RunId) -> ProgressDisplay {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} run {msg} [{bar:40}] {pos}/{len} ({per_sec}, eta {eta})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar
        });
        ProgressDisplay {
            run_id,
            bar,
            last_line: None,
        }
    }

    fn show(&mut self, progress: &RunProgress) {
        let done = progress.done.max(0) as u64;
        let expected = progress.expected.max(0) as u64;
        match &self.bar {
            Some(bar) => {
                bar.set_length(expected);
                bar.set_position(done);
                bar.set_message(format!("{} {}", self.run_id, progress.status));
            }
            None if self.last_line.is_none_or(|at| at.elapsed() >= LOG_EVERY)
                || is_finished(progress.status) =>
            {
                eprintln!(
                    "run {}: {} {done}/{expected} ({:.1}/s, {} errors)",
                    self.run_id, progress.status, progress.throughput_per_s, progress.errors
                );
                self.last_line = Some(Instant::now());
            }
            None => {}
        }
    }

    fn end(&self, finished: bool) {
        if let Some(bar) = &self.bar {
            if finished {
                bar.finish();
            } else {
                bar.abandon();
            }
        }
    }
}

impl ApiClient {
    /// Follows the run's server-sent events until it finishes (its last progress) or
    /// `deadline` passes (`None`); an error when the stream cannot be read (an older server,
    /// a proxy that buffers it).
    async fn follow_events(
        &self,
        run_id: RunId,
        deadline: Instant,
        display: &mut ProgressDisplay,
    ) -> anyhow::Result<Option<RunProgress>> {
        use eventsource_stream::Eventsource;
        use futures::StreamExt;
        let response = self
            .http
            .get(format!("{}/runs/{run_id}/events", self.base))
            .bearer_auth(&self.token)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .timeout(deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1))
            .send()
            .await
            .context("the server could not be reached")?;
        let status = response.status();
        if !status.is_success() {
            bail!("HTTP {}", status.as_u16());
        }
        let mut events = response.bytes_stream().eventsource();
        loop {
            let event = match tokio::time::timeout_at(deadline.into(), events.next()).await {
                Err(_) => return Ok(None),
                Ok(None) => bail!("the event stream ended before the run did"),
                Ok(Some(Err(err))) => bail!("the event stream broke: {err}"),
                Ok(Some(Ok(event))) => event,
            };
            match event.event.as_str() {
                "progress" => {
                    let progress: RunProgress = serde_json::from_str(&event.data)
                        .context("an unreadable progress event")?;
                    display.show(&progress);
                    if is_finished(progress.status) {
                        return Ok(Some(progress));
                    }
                }
                "error" => bail!("the server could not read the run: {}", event.data),
                _ => {}
            }
        }
    }
}

/// Follows a run until it finishes or `timeout` passes (`Ok(None)`): from its server-sent
/// events, so a short run is reported as soon as it ends, or by polling (every 100 ms at
/// first, backing off to every 2 s) when the events cannot be read.
pub async fn wait(
    client: &ApiClient,
    run_id: RunId,
    timeout: Duration,
) -> anyhow::Result<Option<RunProgress>> {
    // A timeout beyond what the clock can add waits as good as forever.
    let deadline = Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600));
    let mut display = ProgressDisplay::new(run_id);
    match client.follow_events(run_id, deadline, &mut display).await {
        Ok(followed) => {
            display.end(followed.is_some());
            return Ok(followed);
        }
        Err(problem) => {
            eprintln!("could not follow run {run_id}'s events ({problem:#}); polling it instead")
        }
    }
    let mut pause = FIRST_POLL;
    loop {
        let progress: RunProgress = client
            .get("reading the run", &format!("/runs/{run_id}"))
            .await?;
        display.show(&progress);
        if is_finished(progress.status) {
            display.end(true);
            return Ok(Some(progress));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            display.end(false);
            return Ok(None);
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(POLL_EVERY);
    }
}

/// The baseline run for `candidate`: the named run, or the latest completed run of the same
/// eval on the named checkpoint.
pub async fn resolve_baseline(
    client: &ApiClient,
    candidate: &RunProgress,
    baseline: &Baseline,
) -> anyhow::Result<RunId> {
    match baseline {
        Baseline::Run(id) => Ok(*id),
        Baseline::Checkpoint(name) => {
            let runs: Vec<RunSummary> = client.get("listing runs", "/runs").await?;
            runs.iter()
                .filter(|run| {
                    run.eval_id == candidate.eval_id
                        && run.checkpoint_name == *name
                        && run.status == RunStatus::Completed
                        && run.id != candidate.id
                        && !run.checkpoint_retracted
                })
                .map(|run| run.id)
                .max()
                .ok_or_else(|| {
                    anyhow!(
                        "no completed run of eval `{}` on checkpoint `{name}` to compare against \
                         (a retracted checkpoint's runs are never baselines)",
                        candidate.eval_name
                    )
                })
        }
    }
}

fn percent(rate: Option<f64>) -> String {
    rate.map_or("–".into(), |rate| format!("{:.1}%", rate * 100.0))
}

fn category_line(out: &mut String, category: &CategoryReport) {
    let interval = category.interval.map_or("–".into(), |interval| {
        format!(
            "[{:.1}%, {:.1}%]",
            interval.lower * 100.0,
            interval.upper * 100.0
        )
    });
    let _ = writeln!(
        out,
        "  {:<24} {:>7} {:>8} {:>18} {:>9} {:>7}",
        category.category,
        category.passed + category.failed,
        percent(category.pass_rate),
        interval,
        category.uncertain,
        category.errors
    );
}

/// A run's report as text.
pub fn format_report(report: &RunReport) -> String {
    let run = &report.run;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} · eval {} · checkpoint {} · {} ({}/{} final)",
        run.id,
        run.eval_name,
        run.checkpoint_name,
        report.report.completeness.label(),
        report.report.completed,
        report.report.expected
    );
    for explanation in report.report.explanations() {
        let _ = writeln!(out, "  ! {explanation}");
    }
    let _ = writeln!(
        out,
        "  {:<24} {:>7} {:>8} {:>18} {:>9} {:>7}",
        "category", "graded", "pass", "95% interval", "uncertain", "errors"
    );
    category_line(&mut out, &report.report.overall);
    for category in &report.report.categories {
        category_line(&mut out, category);
    }
    if let Some(rolling) = &report.report.rolling {
        let number = |value: Option<f64>| value.map_or("–".into(), |value| format!("{value:.4}"));
        let _ = writeln!(
            out,
            "  rolling likelihood over {} documents ({} tokens, {} bytes): bits per byte {}, \
             word perplexity {}, byte perplexity {}, token perplexity {}",
            rolling.documents,
            rolling.tokens,
            rolling.bytes,
            number(rolling.bits_per_byte),
            number(rolling.word_perplexity),
            number(rolling.byte_perplexity),
            number(rolling.token_perplexity)
        );
    }
    out
}

/// A comparison as text, regressions and improvements flagged.
pub fn format_comparison(response: &ComparisonResponse) -> String {
    let comparison = &response.comparison;
    let mut out = String::new();
    for candidate in &comparison.candidates {
        let _ = writeln!(
            out,
            "run {} ({}) against baseline run {} ({}), {} correction:",
            candidate.run.id,
            candidate.run.checkpoint_name,
            comparison.baseline.id,
            comparison.baseline.checkpoint_name,
            comparison.correction.as_str()
        );
        let _ = writeln!(
            out,
            "  {:<24} {:>8} {:>8} {:>9} {:>20} {:>9}",
            "category", "baseline", "candidate", "change", "95% interval", "adj. p"
        );
        let paired = &candidate.comparison;
        for category in std::iter::once(&paired.overall).chain(&paired.categories) {
            let points = |value: f64| format!("{:+.1} pt", value * 100.0);
            let flag = if category.is_regression() {
                "  REGRESSION"
            } else if category.is_improvement() {
                "  improvement"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:<24} {:>8} {:>8} {:>9} {:>20} {:>9.4}{flag}",
                category.category,
                percent(category.baseline_rate),
                percent(category.candidate_rate),
                category.delta.map_or("–".into(), points),
                category.interval.map_or("–".into(), |interval| format!(
                    "[{}, {}]",
                    points(interval.lower),
                    points(interval.upper)
                )),
                category.adjusted_p,
            );
        }
        if let Some(rolling) = &paired.rolling {
            let flag = if rolling.is_regression() {
                "  REGRESSION"
            } else if rolling.is_improvement() {
                "  improvement"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:<24} {:>8.4} {:>8.4} {:>+9.4} {:>20} over {} documents{flag}",
                "bits per byte",
                rolling.baseline,
                rolling.candidate,
                rolling.difference,
                rolling.interval.map_or("–".into(), |interval| format!(
                    "[{:+.4}, {:+.4}]",
                    interval.lower, interval.upper
                )),
                rolling.documents,
            );
        }
    }
    if !response.all_complete {
        let _ = writeln!(
            out,
            "  note: not every report is COMPLETE; the comparison covers the identities both runs have finished"
        );
    }
    out
}

/// Prints the run's report and, with a baseline, the comparison; returns the verdict.
pub async fn report(
    client: &ApiClient,
    run_id: RunId,
    baseline: Option<&Baseline>,
    json: bool,
) -> anyhow::Result<Verdict> {
    let report: RunReport = client
        .get("reading the report", &format!("/runs/{run_id}/report"))
        .await?;
    let mut verdict = Verdict {
        regressed: false,
        complete: report.report.completeness == Completeness::Complete,
    };
    let Some(baseline) = baseline else {
        if json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", format_report(&report));
        }
        return Ok(verdict);
    };
    let baseline_run = resolve_baseline(client, &report.run, baseline).await?;
    let comparison: ComparisonResponse = client
        .get(
            "comparing",
            &format!("/compare?baseline={baseline_run}&candidates={run_id}"),
        )
        .await?;
    // A perplexity eval has no verdicts: its regression is more bits per byte.
    let more_bits = comparison.comparison.candidates.iter().any(|candidate| {
        candidate
            .comparison
            .rolling
            .as_ref()
            .is_some_and(|rolling| rolling.is_regression())
    });
    verdict.regressed = !comparison.regressions.is_empty() || more_bits;
    verdict.complete &= comparison.all_complete;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "report": report,
                "comparison": comparison,
            }))?
        );
    } else {
        print!("{}", format_report(&report));
        print!("{}", format_comparison(&comparison));
        if verdict.regressed {
            let mut categories: Vec<&str> = comparison
                .regressions
                .iter()
                .map(|finding| finding.category.as_str())
                .collect();
            if more_bits {
                categories.push("bits per byte");
            }
            println!(
                "significant regression in: {} (exit {EXIT_REGRESSION})",
                categories.join(", ")
            );
        } else {
            println!("no significant regression");
        }
    }
    Ok(verdict)
}
