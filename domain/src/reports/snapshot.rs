//! A run's results packed in identity order: one id, verdict, outcome and category code per
//! result identity (12 bytes each, so 12 MB for a million identities). Built by one scan of the
//! run in the store, checked for completeness on the way, stored, and read back whole when a
//! report or comparison needs per-item data. Two runs of one manifest list their identities in
//! the same order, so a comparison pairs them by position.

use super::{Problem, VERDICTS};
use crate::answer::Outcome;
use crate::ids::{IdentityId, RevisionId};
use crate::reports::latency::{latency_bucket, LATENCY_BUCKETS};
use crate::stats::proportion::{ClusterSums, ItemTally};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// Turns tallied per turn in a snapshot's header: items have at most this many.
const MAX_TALLIED_TURNS: usize = crate::fields::MAX_TURNS;

/// Verdict codes: 0 = not decided yet, then `VERDICTS` in order.
pub const VERDICT_NONE: u8 = 0;
pub const VERDICT_PASS: u8 = 1;
pub const VERDICT_FAIL: u8 = 2;

pub fn verdict_code(verdict: Option<&str>) -> u8 {
    verdict
        .and_then(|v| VERDICTS.iter().position(|known| *known == v))
        .map_or(VERDICT_NONE, |index| index as u8 + 1)
}

pub fn verdict_name(code: u8) -> &'static str {
    match code {
        0 => "pending",
        code => VERDICTS
            .get(usize::from(code) - 1)
            .copied()
            .unwrap_or("pending"),
    }
}

/// Outcome codes: 0 = no answer recorded yet, then `Outcome::ALL` in order.
pub fn outcome_code(outcome: Option<&str>) -> u8 {
    outcome
        .and_then(Outcome::parse)
        .and_then(|o| Outcome::ALL.iter().position(|known| *known == o))
        .map_or(0, |index| index as u8 + 1)
}

pub fn outcome_name(code: u8) -> &'static str {
    match code {
        0 => "none",
        code => Outcome::ALL
            .get(usize::from(code) - 1)
            .map_or("none", |o| o.as_str()),
    }
}

/// One identity as the store's scan returns it, in identity order.
#[derive(Clone, Debug, Default)]
pub struct ScanRow {
    pub identity_id: IdentityId,
    pub case_id: String,
    pub repetition: i64,
    /// The turn of a conversation (from 1; 1 for items that are not conversations).
    pub turn: i64,
    pub revision_id: RevisionId,
    pub category: String,
    pub verdict: Option<String>,
    pub outcome: Option<String>,
    /// The model the endpoint said answered; `None` before an answer or for errors.
    pub model_used: Option<String>,
    pub fallback_used: bool,
    /// Time to answer, retries included (`None` before an answer).
    pub latency_ms: Option<i64>,
}

/// What a run is expected to be, from its frozen manifest.
#[derive(Clone, Debug)]
pub struct Expectation {
    pub revision_id: RevisionId,
    pub grader: String,
    pub repetitions: i64,
}

/// The header stored before the packed columns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub categories: Vec<String>,
    pub problems: Vec<Problem>,
    /// Per category (same order as `categories`), for clustered intervals over repetitions.
    pub clusters: Vec<ClusterSums>,
    pub models: Vec<String>,
    /// Answers per latency bucket ([`crate::reports::latency::LATENCY_EDGES_MS`]).
    pub latency: Vec<u64>,
    /// With repetitions: the number of cases when identities are laid out repetition by
    /// repetition, each repetition listing the same cases in the same order (so the case of
    /// position p is p % cases). Checked while building; `None` when the layout differs or
    /// there is one repetition.
    pub cases: Option<u64>,
    /// For conversations: verdict counts per turn (turn 1 first); empty when every item is
    /// one request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnTally>,
}

/// One turn's results across a run's conversations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TurnTally {
    pub passed: u64,
    pub failed: u64,
    pub uncertain: u64,
    /// Errors, the stopped turns among them.
    pub errors: u64,
    /// Never sent: an earlier turn of the conversation got no answer.
    pub stopped: u64,
    /// Not decided yet.
    pub pending: u64,
}

impl TurnTally {
    fn add(&mut self, verdict: u8, outcome: Option<&str>) {
        match verdict_name(verdict) {
            "pass" => self.passed += 1,
            "fail" => self.failed += 1,
            "uncertain" => self.uncertain += 1,
            "error" => self.errors += 1,
            // Rolling likelihood scores whole texts, never conversations.
            "scored" => {}
            _ => self.pending += 1,
        }
        if outcome == Some(Outcome::Stopped.as_str()) {
            self.stopped += 1;
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub header: SnapshotHeader,
    /// Hash of the ordered (case id, repetition) list: equal for runs that can be paired.
    pub identity_hash: String,
    pub identity_ids: Vec<IdentityId>,
    pub verdicts: Vec<u8>,
    pub outcomes: Vec<u8>,
    pub categories: Vec<u16>,
}

impl Snapshot {
    pub fn len(&self) -> usize {
        self.identity_ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.identity_ids.is_empty()
    }

    pub fn category_name(&self, code: u16) -> &str {
        self.header
            .categories
            .get(usize::from(code))
            .map_or("", String::as_str)
    }

    pub fn category_code(&self, name: &str) -> Option<u16> {
        self.header
            .categories
            .iter()
            .position(|c| c == name)
            .map(|i| i as u16)
    }

    // Version 2 added the latency histogram: version-1 snapshots fail to decode and are rebuilt.
    const MAGIC: &'static [u8; 4] = b"ARS2";

    /// `MAGIC`, header length (u32 LE), header JSON, count (u64 LE), then the columns.
    pub fn encode(&self) -> Vec<u8> {
        let header = serde_json::to_vec(&self.header).unwrap_or_default();
        let n = self.len();
        let mut out = Vec::with_capacity(16 + header.len() + n * 12);
        out.extend_from_slice(Self::MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&(n as u64).to_le_bytes());
        for id in &self.identity_ids {
            out.extend_from_slice(&id.get().to_le_bytes());
        }
        out.extend_from_slice(&self.verdicts);
        out.extend_from_slice(&self.outcomes);
        for code in &self.categories {
            out.extend_from_slice(&code.to_le_bytes());
        }
        out
    }

    /// The inverse of [`Snapshot::encode`]; corrupt data is an error, never a panic.
    pub fn decode(bytes: &[u8], identity_hash: String) -> Result<Snapshot, String> {
        let corrupt = || "the stored run snapshot is corrupt; it will be rebuilt".to_string();
        let mut reader = Reader { bytes, at: 0 };
        if reader.take(4).ok_or_else(corrupt)? != Self::MAGIC {
            return Err(corrupt());
        }
        let header_len = u32::from_le_bytes(reader.array().ok_or_else(corrupt)?) as usize;
        let header: SnapshotHeader =
            serde_json::from_slice(reader.take(header_len).ok_or_else(corrupt)?)
                .map_err(|_| corrupt())?;
        let n = u64::from_le_bytes(reader.array().ok_or_else(corrupt)?) as usize;
        if bytes.len().saturating_sub(reader.at) != n.saturating_mul(12) {
            return Err(corrupt());
        }
        let ids = reader.take(n * 8).ok_or_else(corrupt)?;
        let identity_ids = ids
            .chunks_exact(8)
            .map(|c| IdentityId(i64::from_le_bytes(c.try_into().unwrap_or_default())))
            .collect();
        let verdicts = reader.take(n).ok_or_else(corrupt)?.to_vec();
        let outcomes = reader.take(n).ok_or_else(corrupt)?.to_vec();
        let categories = reader
            .take(n * 2)
            .ok_or_else(corrupt)?
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Ok(Snapshot {
            header,
            identity_hash,
            identity_ids,
            verdicts,
            outcomes,
            categories,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(slice)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

/// Builds a snapshot from rows in identity order, checking as it goes that every identity
/// appears once, with one dataset revision, one grader and one served model.
pub struct SnapshotBuilder {
    expectation: Expectation,
    snapshot: Snapshot,
    identity_hasher: Xxh3,
    category_index: HashMap<String, u16>,
    /// Identity hash → verdict code, to tell a duplicate from a conflicting duplicate.
    seen: HashMap<u64, u8>,
    duplicates: u64,
    conflicting: u64,
    first_duplicate: Option<String>,
    first_conflict: Option<String>,
    revisions: Vec<RevisionId>,
    graders: Vec<String>,
    /// Per case (hash) over repetitions: passes, graded answers and category.
    items: HashMap<u64, (u32, u32, u16)>,
    layout: LayoutCheck,
}

/// Checks that identities come repetition by repetition with the same case order in each:
/// repetition 0's case hashes are kept, later rows must match them position for position.
#[derive(Default)]
struct LayoutCheck {
    first_repetition: Vec<u64>,
    position: usize,
    broken: bool,
}

impl LayoutCheck {
    fn push(&mut self, case_hash: u64, repetition: i64) {
        let cases = self.first_repetition.len();
        if repetition == 0 && self.position == cases {
            self.first_repetition.push(case_hash);
        } else if cases == 0
            || self.position / cases != usize::try_from(repetition).unwrap_or(usize::MAX)
            || self.first_repetition[self.position % cases] != case_hash
        {
            self.broken = true;
        }
        self.position += 1;
    }

    /// The case count, when there are several repetitions, each complete and in order.
    fn cases(&self, repetitions: i64) -> Option<u64> {
        let cases = self.first_repetition.len();
        (!self.broken
            && repetitions > 1
            && cases > 0
            && self.position == cases * repetitions as usize)
            .then_some(cases as u64)
    }
}

impl SnapshotBuilder {
    pub fn new(expectation: Expectation) -> SnapshotBuilder {
        SnapshotBuilder {
            expectation,
            snapshot: Snapshot::default(),
            identity_hasher: Xxh3::new(),
            category_index: HashMap::new(),
            seen: HashMap::new(),
            duplicates: 0,
            conflicting: 0,
            first_duplicate: None,
            first_conflict: None,
            revisions: Vec::new(),
            graders: Vec::new(),
            items: HashMap::new(),
            layout: LayoutCheck::default(),
        }
    }

    pub fn push(&mut self, row: &ScanRow) {
        let verdict = verdict_code(row.verdict.as_deref());
        // Turns after the first are named by their turn too; single requests keep the name (and
        // so the identity hash) they always had.
        let identity = match row.turn {
            turn if turn > 1 => format!("{}#{}#t{turn}", row.case_id, row.repetition),
            _ => format!("{}#{}", row.case_id, row.repetition),
        };
        let identity_hash = xxh3_64(identity.as_bytes());
        if let Some(previous) = self.seen.insert(identity_hash, verdict) {
            if previous == verdict {
                self.duplicates += 1;
                self.first_duplicate.get_or_insert(identity);
            } else {
                self.conflicting += 1;
                self.first_conflict.get_or_insert(identity);
            }
            return;
        }
        self.identity_hasher.update(row.case_id.as_bytes());
        self.identity_hasher.update(&[0]);
        self.identity_hasher.update(&row.repetition.to_le_bytes());
        if row.turn > 1 {
            self.identity_hasher.update(b"t");
            self.identity_hasher.update(&row.turn.to_le_bytes());
        }
        let turn_index = usize::try_from(row.turn.max(1) - 1).unwrap_or(0);
        let turns = &mut self.snapshot.header.turns;
        if turn_index < MAX_TALLIED_TURNS {
            if turns.len() <= turn_index {
                turns.resize(turn_index + 1, TurnTally::default());
            }
            turns[turn_index].add(verdict, row.outcome.as_deref());
        }
        if !self.revisions.contains(&row.revision_id) {
            self.revisions.push(row.revision_id);
        }
        if let Some(model) = row.model_used.as_ref().filter(|_| !row.fallback_used) {
            if !self.snapshot.header.models.contains(model)
                && self.snapshot.header.models.len() < 16
            {
                self.snapshot.header.models.push(model.clone());
            }
        }
        let next = self.category_index.len() as u16;
        let category = *self
            .category_index
            .entry(row.category.clone())
            .or_insert_with(|| {
                self.snapshot.header.categories.push(row.category.clone());
                next
            });
        // A conversation's turns are one cluster (they are not independent), but each turn is
        // its own unit of the repetition layout (pass@k is per turn).
        let case_hash = xxh3_64(row.case_id.as_bytes());
        if self.expectation.repetitions > 1 {
            let unit_hash = match row.turn {
                turn if turn > 1 => xxh3_64(format!("{}#t{turn}", row.case_id).as_bytes()),
                _ => case_hash,
            };
            self.layout.push(unit_hash, row.repetition);
        }
        if verdict == VERDICT_PASS || verdict == VERDICT_FAIL {
            let item = self.items.entry(case_hash).or_insert((0, 0, category));
            item.0 += u32::from(verdict == VERDICT_PASS);
            item.1 += 1;
        }
        if let Some(latency_ms) = row.latency_ms {
            let header = &mut self.snapshot.header;
            header.latency.resize(LATENCY_BUCKETS, 0);
            header.latency[latency_bucket(latency_ms)] += 1;
        }
        self.snapshot.identity_ids.push(row.identity_id);
        self.snapshot.verdicts.push(verdict);
        self.snapshot
            .outcomes
            .push(outcome_code(row.outcome.as_deref()));
        self.snapshot.categories.push(category);
    }

    /// The deterministic graders that graded the run's answers (the store keeps them per
    /// run), checked against the manifest's.
    pub fn note_graders(&mut self, graders: impl IntoIterator<Item = String>) {
        for grader in graders {
            if !self.graders.contains(&grader) {
                self.graders.push(grader);
            }
        }
    }

    pub fn finish(mut self) -> Snapshot {
        let problems = &mut self.snapshot.header.problems;
        if self.duplicates > 0 {
            problems.push(Problem::Duplicates {
                count: self.duplicates,
                example: self.first_duplicate.unwrap_or_default(),
            });
        }
        if self.conflicting > 0 {
            problems.push(Problem::ConflictingDuplicates {
                count: self.conflicting,
                example: self.first_conflict.unwrap_or_default(),
            });
        }
        if self
            .revisions
            .iter()
            .any(|r| *r != self.expectation.revision_id)
        {
            problems.push(Problem::MixedDatasetRevisions {
                expected: self.expectation.revision_id,
                found: self.revisions.clone(),
            });
        }
        if self.graders.iter().any(|g| *g != self.expectation.grader) {
            problems.push(Problem::MixedGraders {
                expected: self.expectation.grader.clone(),
                found: self.graders.clone(),
            });
        }
        if self.snapshot.header.models.len() > 1 {
            problems.push(Problem::ChangedEndpoint {
                models: self.snapshot.header.models.clone(),
            });
        }
        let mut clusters = vec![ClusterSums::default(); self.snapshot.header.categories.len()];
        for (passes, answers, category) in self.items.values() {
            if let Some(sums) = clusters.get_mut(usize::from(*category)) {
                sums.add(ItemTally {
                    passes: u64::from(*passes),
                    answers: u64::from(*answers),
                });
            }
        }
        self.snapshot.header.clusters = clusters;
        self.snapshot.header.cases = self.layout.cases(self.expectation.repetitions);
        if self.snapshot.header.turns.len() < 2 {
            self.snapshot.header.turns.clear();
        }
        self.snapshot.identity_hash = format!("{:016x}", self.identity_hasher.digest());
        self.snapshot
    }
}
