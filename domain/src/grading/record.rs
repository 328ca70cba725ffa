//! Everything grading decided about one answer, as it is recorded: the grades with their
//! evidence and cost, the verdict and the stage that decided it, and the human task when a
//! person has to decide.

use super::instructions::InstructionResult;
use super::judge::JudgeCall;
use super::scale::ScoreRecord;
use super::triage::{after_deterministic, FrozenTriage, HumanKind, HumanRouting, Stage, Step};
use super::{Grade, Verdict};

/// Everything grading decided about one answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grading {
    /// Grades in the order given (deterministic first, then judges).
    pub grades: Vec<GradeRecord>,
    /// The identity's verdict: `Uncertain` while a human has to decide; `None` for an
    /// endpoint error or timeout, which is never graded.
    pub verdict: Option<Verdict>,
    pub decided_by: Option<Stage>,
    /// Why a human sees the item (escalation, or the audit of an accepted verdict).
    pub human: Option<HumanTask>,
    /// Judge calls made now, for the grade cache.
    pub judge_calls: Vec<JudgeCall>,
    /// Scored without a verdict (rolling likelihood: the answer is a number, not right or
    /// wrong). Done and decided, never an error, never in a pass rate.
    pub scored: bool,
}

impl Grading {
    /// An answer graded by its deterministic grader alone (no triage policy): undecided
    /// answers go to a human with the grader's reason. `None`: an error, never graded.
    pub fn deterministic_only(grade: Option<Grade>) -> Grading {
        let Some(grade) = grade else {
            return Grading::default();
        };
        let mut grading = Grading::default();
        let settled = grading.settle(after_deterministic(None, &grade));
        debug_assert!(settled, "without a policy no judge is asked");
        grading.grades.push(GradeRecord::deterministic(grade));
        grading
    }

    /// An answer that is a score, not a verdict (rolling likelihood).
    pub fn scored() -> Grading {
        Grading {
            scored: true,
            ..Grading::default()
        }
    }

    /// What `work_items.verdict` holds: the verdict, `scored` for a verdict-free score,
    /// `error` for an endpoint error (never graded).
    pub fn verdict_label(&self) -> &'static str {
        match (self.scored, self.verdict) {
            (true, _) => "scored",
            (false, Some(verdict)) => verdict.as_str(),
            (false, None) => "error",
        }
    }

    /// Records a final triage step: an accepted verdict, or a human escalation (no verdict
    /// until the human gives one). `false`, recording nothing, for `Step::Judge`.
    pub fn settle(&mut self, step: Step) -> bool {
        match step {
            Step::Accept { verdict, stage } => {
                self.verdict = Some(verdict);
                self.decided_by = Some(stage);
            }
            Step::Human { reason } => {
                self.verdict = Some(Verdict::Uncertain);
                self.decided_by = None;
                self.human = Some(HumanTask {
                    kind: HumanKind::Escalation,
                    reason,
                    sampling_rate: 1.0,
                    routing: HumanRouting::default(),
                });
            }
            Step::Judge(_) => return false,
        }
        true
    }

    /// Sends a human task where the run's policy says (overlap, skill, review rate, rubric);
    /// without a policy the defaults stand.
    pub fn route(mut self, triage: Option<&FrozenTriage>) -> Grading {
        if let (Some(task), Some(triage)) = (self.human.as_mut(), triage) {
            task.routing = triage.policy.routing();
            task.routing.rubric_id = triage.rubric.as_ref().map(|rubric| rubric.id);
        }
        self
    }

    /// What `work_items.decided_by` holds: the deciding stage, `pending` while a human has to
    /// decide, `error` for an endpoint error (never graded).
    pub fn decided_by_label(&self) -> &'static str {
        if self.scored {
            return "scored";
        }
        match (self.decided_by, self.verdict) {
            (Some(stage), _) => stage.as_str(),
            (None, None) => "error",
            (None, Some(_)) => "pending",
        }
    }
}

/// One grade with the evidence and cost behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct GradeRecord {
    pub stage: Stage,
    pub grade: Grade,
    /// Judges: the probability of the verdict (mean over an ensemble's samples).
    pub confidence: Option<f64>,
    /// Judge ensembles: the share of samples voting the verdict.
    pub agreement: Option<f64>,
    pub cost_usd: Option<f64>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub latency_ms: Option<i64>,
    pub model_used: Option<String>,
    pub fallback_used: bool,
    /// Every sample came from the grade cache (nothing was paid now).
    pub from_cache: bool,
    /// An instruction-following grade: each instruction, followed strictly and loosely (the
    /// verdict is prompt-level strict; reports read the rest from here). Empty otherwise.
    pub instructions: Vec<InstructionResult>,
    /// A scale judge's point, expected score and distribution.
    pub score: Option<ScoreRecord>,
}

impl GradeRecord {
    pub fn deterministic(grade: Grade) -> GradeRecord {
        GradeRecord::without_a_call(Stage::Deterministic, grade)
    }

    /// A grade reached without calling any model: nothing paid, timed or cached.
    pub fn without_a_call(stage: Stage, grade: Grade) -> GradeRecord {
        GradeRecord {
            stage,
            grade,
            confidence: None,
            agreement: None,
            cost_usd: None,
            prompt_tokens: None,
            completion_tokens: None,
            latency_ms: None,
            model_used: None,
            fallback_used: false,
            from_cache: false,
            instructions: Vec::new(),
            score: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct HumanTask {
    pub kind: HumanKind,
    pub reason: String,
    /// The probability that triage sends an item like this to a human: 1 for an escalation,
    /// the audit rate for an audit.
    pub sampling_rate: f64,
    /// How many distinct raters label it, which skill they need, and the share of their labels
    /// a senior reviewer checks.
    pub routing: HumanRouting,
}
