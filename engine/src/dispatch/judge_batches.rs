//! Gathering one worker's judge calls into batches: answers waiting for the same judge (same
//! version, temperature and sample) go out in one call once the judge's batch is full or the
//! first of them has waited [`LINGER`], and each waiter gets its own item's verdict back, or
//! is told to ask the judge alone (the reply skipped its item, or nobody joined it). A judge
//! whose replies leave most answers out is no longer batched.
//!
//! The prompt and the reading are [`arbiter_domain::grading::batch`]'s; this module only
//! groups, sends and hands out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use super::{EndpointPool, Target};
use crate::clients::model::GenerationRequest;
use arbiter_domain::answer::Generation;
use arbiter_domain::grading::batch::{read_batch_reply, render_batch_prompt, BatchItem};
use arbiter_domain::grading::judge::{JudgeReading, JudgeSpec};

/// Longest the first answer of a batch waits for others to join it. Answers reach the judge
/// stage hundreds a second on a busy worker, so batches fill long before; on a slow one a
/// lone answer goes out as an ordinary one-item call after this.
const LINGER: Duration = Duration::from_millis(500);
/// Tokens an `Item <n>: ` label and line break add to each answer's line.
const LINE_TOKENS: u32 = 8;

/// What a judge is shown of one answer.
pub(super) struct JudgedItem {
    /// The run it belongs to: answers of different runs never share a prompt, so no run's
    /// answers (or a judge's words about them) reach another run's grades.
    pub run: i64,
    pub input: String,
    pub output: String,
    pub target: String,
}

/// What became of one answer sent in a batch.
pub(super) enum ItemOutcome {
    /// The reply's line for it: the verdict and the answer's share of the call (its output is
    /// the line, its tokens and cost the call's divided over the batch).
    Answered {
        reading: JudgeReading,
        share: Generation,
    },
    /// Ask the judge about this answer alone: the batch's reply skipped it (`spent` is its
    /// share of that call), the batch call failed, or nobody joined it.
    AskAlone { spent: Option<Generation> },
}

/// A judge whose batch replies covered fewer than this share of their answers, over at least
/// [`COVERAGE_SAMPLE`] answers, is asked one answer per call from then on by this worker: each
/// skipped answer costs its share of the batch and a call of its own, so a judge that does not
/// follow the batch format (a small model) costs more batched than alone.
const MIN_COVERAGE: f64 = 0.5;
const COVERAGE_SAMPLE: u64 = 16;

/// Longest an answer waits for a judge's first batch replies to show whether it follows the
/// batch format, before it is asked alone.
const PROBATION_WAIT: Duration = Duration::from_secs(60);

/// Batches this worker is filling, by judge version, fingerprint, temperature and seed, and
/// how well each judge's batch replies have covered their answers.
#[derive(Default)]
pub(super) struct JudgeBatches {
    open: Mutex<HashMap<BatchKey, OpenBatch>>,
    next_id: AtomicU64,
    /// By grader id.
    coverage: Mutex<HashMap<String, Coverage>>,
    /// Rung when a judge's first replies have been counted.
    learned: tokio::sync::Notify,
}

/// How a judge's batch replies have covered their answers.
#[derive(Debug, Default)]
struct Coverage {
    /// Answers in batches answered (or failed), and those their replies gave a verdict.
    sent: u64,
    covered: u64,
    /// Answers admitted to batches not answered yet.
    pending: u64,
}

impl Coverage {
    fn proven(&self) -> bool {
        self.sent >= COVERAGE_SAMPLE
    }

    fn gave_up(&self) -> bool {
        self.proven() && (self.covered as f64) < MIN_COVERAGE * self.sent as f64
    }

    /// Whether another answer may join a batch now: once the judge has shown it follows the
    /// format, always; before, only the first [`COVERAGE_SAMPLE`] answers, so a judge that
    /// ignores it wastes no more than those (the rest wait for its replies).
    fn admits(&self) -> Admission {
        if self.proven() {
            if self.gave_up() {
                Admission::Alone
            } else {
                Admission::Batch
            }
        } else if self.sent + self.pending < COVERAGE_SAMPLE {
            Admission::Batch
        } else {
            Admission::Wait
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    Batch,
    Alone,
    /// Until the judge's first batch replies are counted.
    Wait,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct BatchKey {
    run: i64,
    grader: String,
    fingerprint: String,
    temperature_bits: u64,
    seed: u64,
}

struct OpenBatch {
    /// Tells the lingering timer whether the batch it started is still the one open.
    id: u64,
    waiting: Vec<(JudgedItem, oneshot::Sender<ItemOutcome>)>,
}

/// Everything a batch call needs, owned, so it can be sent from a task of its own.
#[derive(Clone)]
struct Call {
    batches: Arc<JudgeBatches>,
    pool: Arc<EndpointPool>,
    judge: JudgeSpec,
    target: Target,
    temperature: f64,
    seed: u64,
}

impl JudgeBatches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<BatchKey, OpenBatch>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn coverage(&self) -> std::sync::MutexGuard<'_, HashMap<String, Coverage>> {
        self.coverage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether an answer for `grader` goes into a batch (counted as pending if so), is asked
    /// alone, or waits for the judge's first replies (at most [`PROBATION_WAIT`]).
    async fn admit(&self, grader: &str) -> bool {
        let give_up_waiting = tokio::time::Instant::now() + PROBATION_WAIT;
        loop {
            let learned = self.learned.notified();
            tokio::pin!(learned);
            learned.as_mut().enable();
            {
                let mut coverage = self.coverage();
                let entry = coverage.entry(grader.to_string()).or_default();
                match entry.admits() {
                    Admission::Batch => {
                        entry.pending += 1;
                        return true;
                    }
                    Admission::Alone => return false,
                    Admission::Wait => {}
                }
            }
            if tokio::time::timeout_at(give_up_waiting, learned)
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// Settles `answers` admitted to a batch: with `covered`, how many of them its reply gave
    /// a verdict (0 for a failed call); without, the batch was never sent. Warns once when
    /// the judge falls below the coverage batching needs, and wakes answers waiting to learn.
    fn settle(&self, grader: &str, answers: u64, covered: Option<u64>) {
        let (proven_now, gave_up_now) = {
            let mut coverage = self.coverage();
            let entry = coverage.entry(grader.to_string()).or_default();
            let (was_proven, had_given_up) = (entry.proven(), entry.gave_up());
            entry.pending = entry.pending.saturating_sub(answers);
            if let Some(covered) = covered {
                entry.sent += answers;
                entry.covered += covered;
            }
            (
                entry.proven() && !was_proven,
                entry.gave_up() && !had_given_up,
            )
        };
        if gave_up_now {
            tracing::warn!(
                judge = grader,
                "the judge's batch replies left over half of their answers without a verdict; this worker asks it one answer per call from now on"
            );
        }
        if proven_now || covered.is_none() {
            self.learned.notify_waiters();
        }
    }

    /// Adds `item` to the judge's open batch and waits for its outcome.
    pub(super) async fn ask(
        self: &Arc<Self>,
        pool: &Arc<EndpointPool>,
        judge: &JudgeSpec,
        target: &Target,
        item: JudgedItem,
        (temperature, seed): (f64, u64),
    ) -> ItemOutcome {
        let grader = judge.grader_id();
        if !self.admit(&grader).await {
            return ItemOutcome::AskAlone { spent: None };
        }
        let key = BatchKey {
            run: item.run,
            grader,
            fingerprint: judge.fingerprint.clone(),
            temperature_bits: temperature.to_bits(),
            seed,
        };
        // Built only by the answer that starts the batch's timer or fills it, not by every
        // answer that joins (a judge's spec holds its whole rubric).
        let call = || Call {
            batches: self.clone(),
            pool: pool.clone(),
            judge: judge.clone(),
            target: target.clone(),
            temperature,
            seed,
        };
        let (sender, outcome) = oneshot::channel();
        let full = {
            let mut open = self.lock();
            let batch = open.entry(key.clone()).or_insert_with(|| OpenBatch {
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                waiting: Vec::new(),
            });
            batch.waiting.push((item, sender));
            if batch.waiting.len() >= judge.batch_items.max(1) as usize {
                open.remove(&key).map(|batch| batch.waiting)
            } else {
                if batch.waiting.len() == 1 {
                    let (key, id, call) = (key.clone(), batch.id, call());
                    tokio::spawn(async move {
                        tokio::time::sleep(LINGER).await;
                        let waiting = {
                            let mut open = call.batches.lock();
                            match open.get(&key) {
                                Some(batch) if batch.id == id => {
                                    open.remove(&key).map(|batch| batch.waiting)
                                }
                                _ => None,
                            }
                        };
                        if let Some(waiting) = waiting {
                            send(call, waiting).await;
                        }
                    });
                }
                None
            }
        };
        if let Some(waiting) = full {
            tokio::spawn(send(call(), waiting));
        }
        // A dropped sender (a panic in the call) leaves the answer to be asked alone.
        outcome
            .await
            .unwrap_or(ItemOutcome::AskAlone { spent: None })
    }
}

/// Sends one batch and hands each waiter its outcome. A batch of one is not sent: its answer
/// is asked alone, as an ordinary judge call.
async fn send(call: Call, waiting: Vec<(JudgedItem, oneshot::Sender<ItemOutcome>)>) {
    let grader = call.judge.grader_id();
    let count = waiting.len();
    // Settles the batch however `send` ends, a panic included, so no answer waits on it.
    let mut settled = Settled {
        batches: &call.batches,
        grader: &grader,
        answers: count as u64,
        covered: None,
    };
    let ask_alone = |waiting: Vec<(JudgedItem, oneshot::Sender<ItemOutcome>)>| {
        for (_, reply) in waiting {
            let _ = reply.send(ItemOutcome::AskAlone { spent: None });
        }
    };
    if count < 2 {
        return ask_alone(waiting);
    }
    let items: Vec<BatchItem<'_>> = waiting
        .iter()
        .map(|(item, _)| BatchItem {
            input: &item.input,
            output: &item.output,
            target: &item.target,
        })
        .collect();
    let Ok(prompt) = render_batch_prompt(&call.judge.rubric, &items) else {
        // Too long together: each is asked alone (where a long one is refused on its own).
        return ask_alone(waiting);
    };
    // Each line's `Item <n>:` comes on top of what one answer's reply may take.
    let max_tokens =
        (call.judge.max_tokens.saturating_add(LINE_TOKENS)).saturating_mul(count as u32);
    let token_estimate = (prompt.len() / 4) as u64 + u64::from(max_tokens);
    let request = GenerationRequest::user_message(
        &call.judge.served_model,
        prompt,
        max_tokens,
        call.temperature,
        call.seed,
    );
    let answer = call
        .pool
        .generate(
            &call.target,
            &request,
            token_estimate,
            Some(super::judging::judge_affinity(&call.judge)),
        )
        .await;
    if answer.outcome.is_error() {
        // Whatever failed the batch is for each answer's own call to meet (an outage then
        // fails those calls too). A refusal (a prompt or reply too long for the judge's
        // context) counts against batching this judge; an outage says nothing about it.
        let outage = answer
            .error_category
            .is_none_or(|category| category.is_transient());
        settled.covered = (!outage).then_some(0);
        tracing::debug!(judge = %call.judge.grader_id(), error = ?answer.error, "a batch judge call failed; its answers are asked alone");
        return ask_alone(waiting);
    }
    let tokens = answer
        .logprobs
        .as_deref()
        .and_then(|data| arbiter_domain::logprobs::decode(data).ok());
    let verdicts = read_batch_reply(&answer.output, tokens.as_deref(), count);
    let covered = verdicts.iter().filter(|verdict| verdict.is_some()).count();
    settled.covered = Some(covered as u64);
    for (index, ((_, reply), verdict)) in waiting.into_iter().zip(verdicts).enumerate() {
        let share = share_of(&answer, index, count);
        let outcome = match verdict {
            Some(verdict) => ItemOutcome::Answered {
                reading: verdict.reading,
                share: Generation {
                    output: verdict.line,
                    ..share
                },
            },
            None => ItemOutcome::AskAlone { spent: Some(share) },
        };
        let _ = reply.send(outcome);
    }
}

/// A batch's answers, settled with their coverage (or as never sent) when dropped.
struct Settled<'a> {
    batches: &'a JudgeBatches,
    grader: &'a str,
    answers: u64,
    covered: Option<u64>,
}

impl Drop for Settled<'_> {
    fn drop(&mut self) {
        self.batches.settle(self.grader, self.answers, self.covered);
    }
}

/// Item `index`'s share of a call answering `count` items: its tokens (the remainder spread
/// over the first items, so the shares sum to the call's), its cost and the call's latency.
fn share_of(answer: &Generation, index: usize, count: usize) -> Generation {
    let part = |total: Option<i64>| {
        total.map(|total| {
            let (each, left) = (total / count as i64, total % count as i64);
            each + i64::from((index as i64) < left)
        })
    };
    Generation {
        prompt_tokens: part(answer.prompt_tokens),
        completion_tokens: part(answer.completion_tokens),
        cost_usd: answer.cost_usd.map(|cost| cost / count as f64),
        latency_ms: answer.latency_ms,
        waited_ms: answer.waited_ms,
        attempts: answer.attempts,
        model_used: answer.model_used.clone(),
        ..Generation::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_judge_proves_it_follows_the_batch_format_before_its_answers_are_all_batched() {
        let batches = Arc::new(JudgeBatches::default());
        for _ in 0..COVERAGE_SAMPLE {
            assert!(
                batches.admit("judge:weak@1").await,
                "the first answers try batches"
            );
        }
        // The next waits for the first replies; they cover 3 of 16, so it is asked alone.
        let waiting = {
            let batches = batches.clone();
            tokio::spawn(async move { batches.admit("judge:weak@1").await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "it waits to learn");
        batches.settle("judge:weak@1", 8, Some(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "8 answers are too few to judge by");
        batches.settle("judge:weak@1", 8, Some(2));
        assert!(!waiting.await.unwrap());
        assert!(!batches.admit("judge:weak@1").await);

        // A judge that covers its answers is batched from then on.
        for _ in 0..COVERAGE_SAMPLE {
            assert!(batches.admit("judge:able@1").await);
        }
        batches.settle("judge:able@1", 8, Some(8));
        batches.settle("judge:able@1", 8, Some(1));
        assert!(batches.admit("judge:able@1").await, "9 of 16 covered");
        // A batch never sent gives its place back.
        for _ in 0..COVERAGE_SAMPLE {
            assert!(batches.admit("judge:lonely@1").await);
        }
        batches.settle("judge:lonely@1", 1, None);
        assert!(batches.admit("judge:lonely@1").await);
    }

    #[test]
    fn shares_of_a_call_sum_to_the_call() {
        let answer = Generation {
            prompt_tokens: Some(1_001),
            completion_tokens: Some(50),
            cost_usd: Some(0.3),
            latency_ms: 700,
            ..Generation::default()
        };
        let shares: Vec<Generation> = (0..3).map(|index| share_of(&answer, index, 3)).collect();
        let prompt: Vec<i64> = shares.iter().map(|s| s.prompt_tokens.unwrap()).collect();
        assert_eq!(prompt, [334, 334, 333]);
        assert_eq!(
            shares
                .iter()
                .map(|s| s.completion_tokens.unwrap())
                .sum::<i64>(),
            50
        );
        assert!((shares.iter().map(|s| s.cost_usd.unwrap()).sum::<f64>() - 0.3).abs() < 1e-12);
        assert!(shares.iter().all(|s| s.latency_ms == 700));
    }
}
