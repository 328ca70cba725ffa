//! Grading one answer inside a worker: the deterministic grader, then the triage policy's
//! judges through the endpoint pool (their calls load-controlled and retried like any other,
//! and answered from the grade cache when asked before), ending in a verdict or a human task.
//!
//! The decisions are [`arbiter_domain::grading::triage`]'s; this module only carries them out.

use std::sync::Arc;

use super::judge_batches::{ItemOutcome, JudgeBatches, JudgedItem};
use super::{EndpointPool, RunSpec, Target};
use crate::clients::model::GenerationRequest;
use crate::sandbox::Sandbox;
use arbiter_domain::answer::Generation;
use arbiter_domain::fields::MappedInput;
use arbiter_domain::grading::batch::batched_cache_key;
use arbiter_domain::grading::code_tests::{CodeOutcome, CodeTests};
use arbiter_domain::grading::judge::JudgeCall;
use arbiter_domain::grading::judge::{
    combine_samples, expected_reply, grade_cache_key, read_reply, render_judge_prompt,
    EnsembleVerdict, JudgeReading, JudgeSpec, ENSEMBLE_TEMPERATURE,
};
use arbiter_domain::grading::pairwise::{read_pairwise, OrderReading, PAIRWISE_TOP_LOGPROBS};
use arbiter_domain::grading::record::{GradeRecord, Grading, HumanTask};
use arbiter_domain::grading::scale::{combine_scores, SCALE_TOP_LOGPROBS};
use arbiter_domain::grading::triage::HumanRouting;
use arbiter_domain::grading::triage::{
    after_deterministic, after_judge, drawn_for_audit, HumanKind, Stage, Step,
};
use arbiter_domain::grading::{Grade, Verdict};
use arbiter_domain::prompt::request::RenderedPrompt;
use arbiter_store::{ClaimedIdentity, Store};

/// Longest judge rationale kept on a grade; the full reply stays in the grade cache.
const MAX_RATIONALE_CHARS: usize = 2_000;

/// What grading concluded, and whether a judge could not be reached at all.
pub(super) struct Graded {
    pub grading: Grading,
    /// Why a judge gave no answer (its endpoint failed on every sample, after retries), or
    /// the code sandbox could not run the tests. The grading then escalates to a human; a
    /// worker may instead return the identity to the queue, so an outage does not turn into
    /// human work.
    pub grader_unavailable: Option<String>,
}

/// The store and endpoints a judge is asked through, and what it is shown of the item: the
/// prompt the model was sent, and the acceptable answers.
struct Judging<'a> {
    store: &'a Arc<dyn Store>,
    pool: &'a Arc<EndpointPool>,
    /// Where a judge grading several answers per call gathers them; `None` asks one at a time.
    batches: Option<&'a Arc<JudgeBatches>>,
    /// The run whose answer is judged (answers batch only with their own run's).
    run: i64,
    question: String,
    target: String,
}

/// Grades an answer as the run's policy says, routing any human task as the policy says.
/// Errors are never graded.
pub(super) async fn grade_answer(
    job: &ClaimedIdentity,
    rendered: Option<RenderedPrompt>,
    generation: &Generation,
    spec: &RunSpec,
    store: &Arc<dyn Store>,
    (pool, batches): (&Arc<EndpointPool>, &Arc<JudgeBatches>),
) -> Graded {
    let graded = triage_answer(
        job,
        rendered.as_ref(),
        generation,
        spec,
        store,
        (pool, batches),
    )
    .await;
    Graded {
        grading: graded.grading.route(spec.manifest.triage.as_ref()),
        ..graded
    }
}

async fn triage_answer(
    job: &ClaimedIdentity,
    rendered: Option<&RenderedPrompt>,
    generation: &Generation,
    spec: &RunSpec,
    store: &Arc<dyn Store>,
    (pool, batches): (&Arc<EndpointPool>, &Arc<JudgeBatches>),
) -> Graded {
    let mut graded = Graded {
        grading: Grading::default(),
        grader_unavailable: None,
    };
    // A prompt that could not be rendered was never sent: its error is not graded either.
    let Some(rendered) = rendered.filter(|_| !generation.outcome.is_error()) else {
        return graded;
    };
    // A rolling score is the answer itself, not something to grade.
    if spec.manifest.eval.prompt.rolling.is_some() {
        graded.grading = Grading::scored();
        return graded;
    }
    let judging = Judging {
        store,
        pool,
        batches: Some(batches),
        run: job.run_id.get(),
        // An eval of the original shape shows the judge the item's input, as it always has (so
        // its grade cache still holds); any other shows what the model was asked (choices,
        // system prompt, shots and all), a conversation as its turns.
        question: match (&rendered.item.input, spec.original_shape) {
            (MappedInput::Text(text), true) => text.clone(),
            _ => rendered.body.as_text(),
        },
        target: rendered.item.target_text(),
    };
    let triage = spec.manifest.triage.as_ref();
    let mut instructions = Vec::new();
    let grade = match &spec.grader {
        Ok(grader) => {
            if let Some(code) = grader.code_tests() {
                let tested =
                    run_code_tests(code, grader.id_version(), job, generation, spec, store).await;
                graded.grading.judge_calls.extend(tested.call);
                // A sandbox fault grades nothing: the identity goes back to the queue, and
                // after a few claims to a human with the reason, like a judge outage.
                graded.grader_unavailable = tested.unavailable;
                tested.grade
            } else if let Some(checker) = grader.instructions() {
                let checked = checker.grade(&generation.output, &job.item.fields());
                instructions = checked.results;
                checked.grade
            } else {
                grader.grade_any(&generation.output, &rendered.item.targets)
            }
        }
        Err(problem) => Grade {
            grader: "misconfigured".into(),
            verdict: Verdict::Uncertain,
            extracted_answer: None,
            reason: format!("the grader is misconfigured: {problem}"),
        },
    };
    // Decided before the grade moves into its record (an outage decides nothing).
    let step = after_deterministic(triage, &grade);
    graded.grading.grades.push(GradeRecord {
        instructions,
        ..GradeRecord::deterministic(grade)
    });
    if let Some(outage) = graded.grader_unavailable.clone() {
        graded.grading.settle(Step::Human { reason: outage });
        return graded;
    }
    let grading = &mut graded.grading;
    let mut step = step;
    let mut cheap: Option<EnsembleVerdict> = None;
    loop {
        match step {
            Step::Accept { stage, .. } => {
                grading.settle(step);
                if let (Some(triage), true) = (triage, stage != Stage::Deterministic) {
                    let audit_key = job
                        .generation_key
                        .clone()
                        .unwrap_or_else(|| job.identity_id.to_string());
                    if drawn_for_audit(triage.policy.audit_rate, &audit_key) {
                        grading.human = Some(HumanTask {
                            kind: HumanKind::Audit,
                            sampling_rate: triage.policy.audit_rate,
                            routing: HumanRouting::default(),
                            reason: format!(
                                "audit: {:.1}% of verdicts accepted without a human are checked; \
                                 this one was accepted by the {}",
                                triage.policy.audit_rate * 100.0,
                                stage.label()
                            ),
                        });
                    }
                }
                return graded;
            }
            Step::Human { .. } => {
                grading.settle(step);
                return graded;
            }
            Step::Judge(stage) => {
                let Some(triage) = triage else {
                    unreachable!("triage asks for a judge only under a policy")
                };
                let (judge, target) = match stage {
                    Stage::CheapJudge => {
                        (triage.cheap_judge.as_ref(), spec.judge_targets.0.as_ref())
                    }
                    _ => (triage.strong_judge.as_ref(), spec.judge_targets.1.as_ref()),
                };
                let (Some(judge), Some(target)) = (judge, target) else {
                    unreachable!("triage asks only for the judges its policy names")
                };
                let asked = judging
                    .ask(
                        judge,
                        target,
                        stage,
                        triage.policy.judge_samples,
                        generation,
                    )
                    .await;
                grading.grades.push(asked.record);
                grading.judge_calls.extend(asked.new_calls);
                if let Some(outage) = asked.unavailable {
                    grading.settle(Step::Human {
                        reason: outage.clone(),
                    });
                    graded.grader_unavailable = Some(outage);
                    return graded;
                }
                step = after_judge(triage, stage, &asked.verdict, cheap.as_ref());
                if stage == Stage::CheapJudge {
                    cheap = Some(asked.verdict);
                }
            }
        }
    }
}

/// What running an answer's code tests concluded.
struct CodeTested {
    grade: Grade,
    /// The outcome for the grade cache, when the sandbox ran the program now.
    call: Option<JudgeCall>,
    /// Why the sandbox could not run the tests (the grade is then uncertain).
    unavailable: Option<String>,
}

/// Runs the answer's program against the item's tests in this worker's sandbox, or reads its
/// outcome from the grade cache (the same program, limits and sandbox give the same outcome).
async fn run_code_tests(
    code: &CodeTests,
    grader_id: &str,
    job: &ClaimedIdentity,
    generation: &Generation,
    spec: &RunSpec,
    store: &Arc<dyn Store>,
) -> CodeTested {
    let uncertain = |reason: String| Grade {
        grader: grader_id.to_string(),
        verdict: Verdict::Uncertain,
        extracted_answer: None,
        reason,
    };
    let unavailable = |reason: String| CodeTested {
        grade: uncertain(format!("the sandbox could not run the tests: {reason}")),
        call: None,
        unavailable: Some(format!("the code sandbox is unavailable: {reason}")),
    };
    let sandbox = match Sandbox::shared().await {
        Ok(sandbox) => sandbox,
        Err(why) => return unavailable(format!("none runs on this worker ({why})")),
    };
    let runtime = sandbox.runtime();
    match &spec.manifest.sandbox {
        Some(frozen) if frozen == runtime => {}
        Some(frozen) => {
            return unavailable(format!(
                "this worker's sandbox ({runtime}) differs from the run's ({frozen})"
            ))
        }
        None => return unavailable("the run's manifest names no sandbox".into()),
    }
    // The launch checked every item, so this fails only on a revision changed under the run.
    let program = match code.program(&generation.output, &job.item.fields()) {
        Ok(program) => program,
        Err(problem) => {
            return CodeTested {
                grade: uncertain(format!("item `{}` {problem}", job.case_id)),
                call: None,
                unavailable: None,
            }
        }
    };
    let key = code.cache_key(runtime, &program);
    let cached = store.cached_judge_call(&key).await.ok().flatten();
    let from_cache = cached
        .and_then(|call| serde_json::from_str::<CodeOutcome>(&call.output).ok())
        .and_then(|outcome| outcome.grade(grader_id));
    if let Some(grade) = from_cache {
        return CodeTested {
            grade,
            call: None,
            unavailable: None,
        };
    }
    let report = sandbox.run(&program, &code.limits).await;
    let cacheable = !report.outcome.depends_on_the_host();
    match report.outcome.grade(grader_id) {
        Some(grade) => CodeTested {
            call: cacheable.then(|| JudgeCall {
                cache_key: key,
                output: serde_json::to_string(&report.outcome).expect("outcomes always serialize"),
                pass: Some(grade.verdict == Verdict::Pass),
                confidence: None,
                prompt_tokens: None,
                completion_tokens: None,
                model_used: Some(runtime.to_string()),
                score: None,
            }),
            grade,
            unavailable: None,
        },
        None => match report.outcome {
            CodeOutcome::SandboxError { reason } => unavailable(reason),
            other => unavailable(format!("{other:?}")),
        },
    }
}

struct Asked {
    record: GradeRecord,
    verdict: EnsembleVerdict,
    /// Calls made now (not from the cache), to be cached with the result.
    new_calls: Vec<JudgeCall>,
    /// Set when every sample failed at the judge's endpoint: nothing was judged.
    unavailable: Option<String>,
}

impl Asked {
    /// A judge failure without a call: the judge could not be asked about this answer.
    fn unasked(judge: &JudgeSpec, stage: Stage, why: String) -> Asked {
        Asked {
            record: GradeRecord::without_a_call(
                stage,
                Grade {
                    grader: judge.grader_id(),
                    verdict: Verdict::Uncertain,
                    extracted_answer: None,
                    reason: format!("judge failure: {why}"),
                },
            ),
            verdict: combine_samples(&[]),
            new_calls: Vec::new(),
            unavailable: None,
        }
    }
}

impl Judging<'_> {
    /// Asks one judge for `samples` verdicts on an answer, each from the grade cache when it was
    /// asked before.
    async fn ask(
        &self,
        judge: &JudgeSpec,
        target: &Target,
        stage: Stage,
        samples: u32,
        generation: &Generation,
    ) -> Asked {
        let Judging {
            store,
            pool,
            question,
            target: answer_key,
            ..
        } = self;
        let prompt =
            match render_judge_prompt(&judge.rubric, question, &generation.output, answer_key) {
                Ok(prompt) => prompt,
                // Too long to send: nothing is asked, and the failure routes to a human.
                Err(too_long) => return Asked::unasked(judge, stage, too_long),
            };
        // One sample is the judge's greedy answer; an ensemble needs samples that can differ.
        let temperature = if samples > 1 {
            ENSEMBLE_TEMPERATURE
        } else {
            0.0
        };
        let mut readings = Vec::new();
        let mut new_calls = Vec::new();
        let mut replies: Vec<(Option<bool>, String)> = Vec::new();
        let mut scores = Vec::new();
        let mut failure: Option<String> = None;
        let mut failed_samples = 0;
        let mut usage = Usage::default();
        for sample in 0..samples {
            let seed = u64::from(sample);
            let cache_key = grade_cache_key(judge, &prompt, temperature, seed, sample);
            // A batch judge's verdicts are kept apart from one-item verdicts; an answer its
            // batch skipped was asked alone and is found under the one-item key.
            let batched_key = (self.batches.is_some()
                && judge.batch_items > 1
                && judge.scale.is_none()
                && !judge.pairwise)
                .then(|| batched_cache_key(&cache_key, judge));
            let mut cached = None;
            for key in batched_key.iter().chain([&cache_key]) {
                match store.cached_judge_call(key).await {
                    Ok(found) => cached = found,
                    Err(err) => {
                        tracing::warn!(error = %err, "could not read the grade cache; asking the judge");
                    }
                }
                if cached.is_some() {
                    break;
                }
            }
            let call = match cached {
                Some(call) => call,
                None => {
                    let batched = match (self.batches, batched_key) {
                        (Some(batches), Some(batched_key)) => {
                            let item = JudgedItem {
                                run: self.run,
                                input: question.clone(),
                                output: generation.output.clone(),
                                target: answer_key.clone(),
                            };
                            let outcome = batches
                                .ask(pool, judge, target, item, (temperature, seed))
                                .await;
                            Some((batched_key, outcome))
                        }
                        _ => None,
                    };
                    let asked = match batched {
                        Some((batched_key, ItemOutcome::Answered { reading, share })) => {
                            usage.add(&share);
                            Ok(JudgeCall {
                                cache_key: batched_key,
                                output: share.output,
                                pass: reading.pass,
                                confidence: reading.confidence,
                                prompt_tokens: share.prompt_tokens,
                                completion_tokens: share.completion_tokens,
                                model_used: share.model_used,
                                score: None,
                            })
                        }
                        // Not batched, or the batch left this answer to be asked alone (after
                        // paying its share of a reply that skipped it).
                        batched => {
                            if let Some((_, ItemOutcome::AskAlone { spent: Some(spent) })) =
                                &batched
                            {
                                usage.add(spent);
                            }
                            self.ask_alone(
                                judge,
                                target,
                                &prompt,
                                cache_key,
                                (temperature, seed),
                                &mut usage,
                            )
                            .await
                        }
                    };
                    match asked {
                        Ok(call) => {
                            new_calls.push(call.clone());
                            call
                        }
                        Err(error) => {
                            failed_samples += 1;
                            failure = Some(format!(
                                "judge failure: the {}'s endpoint failed ({error})",
                                stage.label(),
                            ));
                            readings.push(JudgeReading {
                                pass: None,
                                confidence: None,
                            });
                            continue;
                        }
                    }
                }
            };
            usage.model_used = usage.model_used.take().or(call.model_used.clone());
            scores.extend(call.score.clone());
            readings.push(JudgeReading {
                pass: call.pass,
                confidence: call.confidence,
            });
            replies.push((call.pass, call.output));
        }
        let verdict = combine_samples(&readings);
        // The rationale shown is that of a sample that voted the verdict (else the first reply).
        let rationale = replies
            .iter()
            .find(|(pass, _)| verdict.pass.is_some() && *pass == verdict.pass)
            .or(replies.first())
            .map(|(_, output)| {
                output
                    .trim()
                    .chars()
                    .take(MAX_RATIONALE_CHARS)
                    .collect::<String>()
            });
        let reason = match (&verdict.pass, rationale, failure.clone()) {
            (Some(_), Some(rationale), _) => rationale,
            (None, _, Some(failure)) => failure,
            (None, Some(rationale), None) => {
                format!(
                    "judge failure: no {} could be read from the reply: {rationale}",
                    expected_reply(judge.scale.as_ref())
                )
            }
            (_, None, _) => "judge failure: the judge gave no answer".to_string(),
        };
        let from_cache = new_calls.is_empty() && usage.calls == 0;
        let unavailable = (failed_samples == samples)
            .then(|| failure.clone())
            .flatten();
        Asked {
            record: GradeRecord {
                stage,
                grade: Grade {
                    grader: judge.grader_id(),
                    verdict: match verdict.pass {
                        Some(true) => Verdict::Pass,
                        Some(false) => Verdict::Fail,
                        None => Verdict::Uncertain,
                    },
                    extracted_answer: None,
                    reason,
                },
                confidence: verdict.confidence,
                agreement: (samples > 1).then_some(verdict.agreement),
                cost_usd: (usage.calls > 0).then_some(usage.cost_usd),
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                latency_ms: Some(usage.latency_ms),
                model_used: usage.model_used,
                fallback_used: false,
                from_cache,
                instructions: Vec::new(),
                score: combine_scores(&scores),
            },
            verdict,
            new_calls,
            unavailable,
        }
    }

    /// One judge call about one answer: its reply read (a scale judge's point with its
    /// distribution) under `cache_key`, or `Err` with why the endpoint gave no answer.
    async fn ask_alone(
        &self,
        judge: &JudgeSpec,
        target: &Target,
        prompt: &str,
        cache_key: String,
        (temperature, seed): (f64, u64),
        usage: &mut Usage,
    ) -> Result<JudgeCall, String> {
        let token_estimate = (prompt.len() / 4) as u64 + u64::from(judge.max_tokens);
        let request = GenerationRequest {
            // A scale judge's distribution needs every point listed.
            top_logprobs: judge.scale.as_ref().map(|_| SCALE_TOP_LOGPROBS),
            ..GenerationRequest::user_message(
                &judge.served_model,
                prompt.to_string(),
                judge.max_tokens,
                temperature,
                seed,
            )
        };
        let answer = self
            .pool
            .generate(
                target,
                &request,
                token_estimate,
                Some(judge_affinity(judge)),
            )
            .await;
        usage.add(&answer);
        if answer.outcome.is_error() {
            return Err(answer.error.unwrap_or_else(|| "no answer".to_string()));
        }
        let tokens = answer
            .logprobs
            .as_deref()
            .and_then(|data| arbiter_domain::logprobs::decode(data).ok());
        let (reading, score) = read_reply(judge.scale.as_ref(), &answer.output, tokens.as_deref());
        Ok(JudgeCall {
            cache_key,
            output: answer.output,
            pass: reading.pass,
            confidence: reading.confidence,
            prompt_tokens: answer.prompt_tokens,
            completion_tokens: answer.completion_tokens,
            model_used: answer.model_used,
            score,
        })
    }
}

/// One greedy verdict of `judge` on an answer outside any run (the drift canary re-grading its
/// reference set), asked through `pool` like any judge call and answered from the grade cache
/// when it was asked before: `Ok(None)` when the reply held no verdict, `Err` with the reason
/// when the judge's endpoint failed (nothing was judged).
pub(crate) async fn judge_verdict(
    store: &Arc<dyn Store>,
    pool: &Arc<EndpointPool>,
    judge: &JudgeSpec,
    target: &Target,
    (question, output, answer_key): (&str, &str, &str),
) -> Result<Option<bool>, String> {
    // The canary measures the judge's one-answer verdicts, one call each.
    let judging = Judging {
        store,
        pool,
        batches: None,
        run: 0,
        question: question.to_string(),
        target: answer_key.to_string(),
    };
    let answer = Generation {
        output: output.to_string(),
        ..Generation::default()
    };
    let asked = judging
        .ask(judge, target, Stage::CheapJudge, 1, &answer)
        .await;
    match asked.unavailable {
        Some(outage) => Err(outage),
        None => Ok(asked.verdict.pass),
    }
}

/// One order of a pair asked of a pairwise judge (greedy, with the alternatives its choice's
/// probabilities are read from): the reply and its reading, or `Err` with the reason when the
/// endpoint failed.
pub(crate) async fn judge_pair_order(
    pool: &Arc<EndpointPool>,
    judge: &JudgeSpec,
    target: &Target,
    prompt: String,
) -> Result<(String, OrderReading), String> {
    let token_estimate = (prompt.len() / 4) as u64 + u64::from(judge.max_tokens);
    let request = GenerationRequest {
        top_logprobs: Some(PAIRWISE_TOP_LOGPROBS),
        ..GenerationRequest::user_message(&judge.served_model, prompt, judge.max_tokens, 0.0, 0)
    };
    let answer = pool.generate(target, &request, token_estimate, None).await;
    if answer.outcome.is_error() {
        return Err(format!(
            "judge failure: {}'s endpoint failed ({})",
            judge.grader_id(),
            answer.error.as_deref().unwrap_or("no answer")
        ));
    }
    let tokens = answer
        .logprobs
        .as_deref()
        .and_then(|data| arbiter_domain::logprobs::decode(data).ok());
    let reading = read_pairwise(&answer.output, tokens.as_deref());
    Ok((answer.output, reading))
}

/// The replica a judge's calls prefer: they all start with its rubric, which that replica's
/// prefix cache then holds (the least loaded takes over while it is saturated).
pub(super) fn judge_affinity(judge: &JudgeSpec) -> u64 {
    xxhash_rust::xxh3::xxh3_64(format!("judge\u{0}{}", judge.grader_id()).as_bytes())
}

/// What the judge calls of one grade used, summed over samples.
#[derive(Default)]
struct Usage {
    calls: u32,
    cost_usd: f64,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    latency_ms: i64,
    model_used: Option<String>,
}

impl Usage {
    fn add(&mut self, answer: &Generation) {
        let sum = |total: Option<i64>, more: Option<i64>| match (total, more) {
            (None, None) => None,
            (total, more) => Some(total.unwrap_or(0) + more.unwrap_or(0)),
        };
        self.calls += 1;
        self.cost_usd += answer.cost_usd.unwrap_or(0.0);
        self.prompt_tokens = sum(self.prompt_tokens, answer.prompt_tokens);
        self.completion_tokens = sum(self.completion_tokens, answer.completion_tokens);
        self.latency_ms += answer.latency_ms;
    }
}
