//! The per-prompt diff of two runs, a page at a time, filtered and searched; and for one row,
//! the first token where the two answers diverged.

use crate::error::{ServiceError, ServiceResult};
use crate::reports::compare::check_runs;
use crate::reports::runs::snapshot_of;
use arbiter_domain::ids::{IdentityId, RunId};
use arbiter_domain::logprobs;
use arbiter_domain::logprobs::TokenLogprob;
use arbiter_domain::reports::compare::{changed_items, ChangedItem, DiffFilter};
use arbiter_domain::reports::diff::DiffSide;
use arbiter_store::Store;
use serde::{Deserialize, Serialize};

/// Rows per page of the per-prompt diff.
pub const DIFF_PAGE: usize = 50;

/// Changed items whose texts one text search reads before it stops (and says so).
pub const SEARCH_SCAN_LIMIT: usize = 20_000;

const DIFF_FETCH_BATCH: usize = 200;

/// One row of the per-prompt diff.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffRow {
    pub change: arbiter_domain::reports::compare::Change,
    pub baseline: DiffSide,
    pub candidate: DiffSide,
    /// Images the item was sent with (data URLs).
    #[serde(default)]
    pub images: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffPage {
    pub rows: Vec<DiffRow>,
    /// The baseline's categories, for the filter.
    pub categories: Vec<String>,
    /// Changed items matching the filter (before any text search).
    pub matching: u64,
    /// Where the next page starts, if there is one.
    pub next_offset: Option<usize>,
    /// With a text search: changed items read; the search stops at `SEARCH_SCAN_LIMIT`.
    pub searched: usize,
    pub search_truncated: bool,
}

fn contains_folded(haystack: &str, needle: &str) -> bool {
    haystack.to_lowercase().contains(needle)
}

fn row_matches(row: &DiffRow, needle: &str) -> bool {
    [
        &row.baseline.case_id,
        &row.baseline.input,
        &row.baseline.target,
        &row.baseline.output,
        &row.candidate.output,
    ]
    .iter()
    .any(|text| contains_folded(text, needle))
}

/// A page of the items whose verdict changed between the baseline and one candidate,
/// regressions first, filtered by category, change, outcome and text.
pub async fn diff_page(
    store: &dyn Store,
    baseline_run: RunId,
    candidate_run: RunId,
    filter: &DiffFilter,
    search: &str,
    offset: usize,
) -> ServiceResult<DiffPage> {
    check_runs(baseline_run, &[candidate_run])?;
    let baseline = snapshot_of(store, baseline_run).await?;
    let candidate = snapshot_of(store, candidate_run).await?;
    if let Some(reason) = arbiter_domain::reports::compare::unpairable_reason(&baseline, &candidate)
    {
        return Err(ServiceError::Invalid(reason));
    }
    let items = changed_items(&baseline, &candidate, filter);
    let needle = search.trim().to_lowercase();
    let mut rows = Vec::new();
    let mut position = offset.min(items.len());
    let mut searched = 0;
    // Without a search every row is shown, so fetch just what the page lacks; with one, read
    // in larger batches and keep the matches.
    'pages: while position < items.len() && rows.len() < DIFF_PAGE {
        let batch_len = if needle.is_empty() {
            DIFF_PAGE - rows.len()
        } else {
            DIFF_FETCH_BATCH
        };
        let batch = &items[position..(position + batch_len).min(items.len())];
        for row in fetch_rows(store, batch).await? {
            position += 1;
            if !needle.is_empty() {
                searched += 1;
            }
            let Some(row) = row else { continue };
            if needle.is_empty() || row_matches(&row, &needle) {
                rows.push(row);
                if rows.len() == DIFF_PAGE {
                    break 'pages;
                }
            }
            if searched >= SEARCH_SCAN_LIMIT {
                break 'pages;
            }
        }
    }
    let shown: Vec<IdentityId> = rows.iter().map(|row| row.baseline.identity_id).collect();
    for (row, images) in rows
        .iter_mut()
        .zip(crate::runs::images_sent(store, baseline_run, &shown).await?)
    {
        row.images = images;
    }
    let search_truncated = searched >= SEARCH_SCAN_LIMIT && position < items.len();
    Ok(DiffPage {
        rows,
        categories: baseline.header.categories,
        matching: items.len() as u64,
        next_offset: (position < items.len()).then_some(position),
        searched,
        search_truncated,
    })
}

/// Both sides of each item, in the items' order; `None` where a side is missing.
async fn fetch_rows(
    store: &dyn Store,
    items: &[ChangedItem],
) -> ServiceResult<Vec<Option<DiffRow>>> {
    let ids: Vec<IdentityId> = items
        .iter()
        .flat_map(|item| [item.baseline_id, item.candidate_id])
        .collect();
    let mut sides: std::collections::HashMap<IdentityId, DiffSide> = store
        .diff_sides(&ids)
        .await?
        .into_iter()
        .map(|side| (side.identity_id, side))
        .collect();
    Ok(items
        .iter()
        .map(|item| {
            // Each id belongs to one item (the two runs are distinct), so sides move out.
            Some(DiffRow {
                change: item.change,
                baseline: sides.remove(&item.baseline_id)?,
                candidate: sides.remove(&item.candidate_id)?,
                images: Vec::new(),
            })
        })
        .collect())
}

/// Where two answers' tokens first differ, with each side's top alternatives there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// Index of the first differing token (0-based).
    pub index: usize,
    /// The text both answers share before it.
    pub shared_prefix: String,
    pub baseline: Option<TokenChoice>,
    pub candidate: Option<TokenChoice>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenChoice {
    pub token: String,
    pub probability: f64,
    /// Runner-up tokens with their probabilities, most likely first.
    pub alternatives: Vec<(String, f64)>,
}

fn choice(token: &TokenLogprob) -> TokenChoice {
    TokenChoice {
        token: token.text().into_owned(),
        probability: f64::from(token.logprob).exp(),
        alternatives: token
            .top
            .iter()
            .filter(|alt| alt.bytes != token.bytes)
            .map(|alt| (alt.text().into_owned(), f64::from(alt.logprob).exp()))
            .collect(),
    }
}

/// The first token where the two answers part; `None` when they are identical token for token.
pub fn first_divergence(
    baseline: &[TokenLogprob],
    candidate: &[TokenLogprob],
) -> Option<Divergence> {
    let index = baseline
        .iter()
        .zip(candidate)
        .position(|(a, b)| a.bytes != b.bytes)
        .unwrap_or(baseline.len().min(candidate.len()));
    if index == baseline.len() && index == candidate.len() {
        return None;
    }
    let prefix: Vec<u8> = baseline
        .iter()
        .take(index)
        .flat_map(|token| token.bytes.iter().copied())
        .collect();
    Some(Divergence {
        index,
        shared_prefix: String::from_utf8_lossy(&prefix).into_owned(),
        baseline: baseline.get(index).map(choice),
        candidate: candidate.get(index).map(choice),
    })
}

/// Both sides of one changed item, with the first diverging token where logprobs were stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiffDetail {
    pub baseline: DiffSide,
    pub candidate: DiffSide,
    pub divergence: Option<Divergence>,
    /// Why no divergence is shown, when none is.
    pub divergence_note: Option<String>,
}

pub async fn diff_detail(
    store: &dyn Store,
    baseline_item: IdentityId,
    candidate_item: IdentityId,
) -> ServiceResult<DiffDetail> {
    let sides = store.diff_sides(&[baseline_item, candidate_item]).await?;
    let side = |id: IdentityId| {
        sides
            .iter()
            .find(|side| side.identity_id == id)
            .cloned()
            .ok_or_else(|| ServiceError::NotFound(format!("no result with id {id}")))
    };
    let (baseline, candidate) = (side(baseline_item)?, side(candidate_item)?);
    if baseline.case_id != candidate.case_id
        || baseline.repetition != candidate.repetition
        || baseline.turn != candidate.turn
    {
        return Err(ServiceError::Invalid(
            "these two results are not the same item on two checkpoints".into(),
        ));
    }
    let tokens = |id: Option<IdentityId>| async move {
        match id {
            Some(id) => match store.generation_logprobs(id).await? {
                Some(data) => Ok::<_, ServiceError>(logprobs::decode(&data).ok()),
                None => Ok(None),
            },
            None => Ok(None),
        }
    };
    let (base_tokens, cand_tokens) = (
        tokens(baseline.logprobs_id).await?,
        tokens(candidate.logprobs_id).await?,
    );
    let (divergence, divergence_note) = match (base_tokens, cand_tokens) {
        (Some(a), Some(b)) => match first_divergence(&a, &b) {
            Some(divergence) => (Some(divergence), None),
            None => (
                None,
                Some("both answers are the same token for token".to_string()),
            ),
        },
        _ => (
            None,
            Some("no logprobs were stored for one of the answers".to_string()),
        ),
    };
    Ok(DiffDetail {
        baseline,
        candidate,
        divergence,
        divergence_note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::logprobs::Alternative;

    fn token(text: &str, logprob: f32, alternatives: &[(&str, f32)]) -> TokenLogprob {
        TokenLogprob {
            bytes: text.as_bytes().to_vec(),
            logprob,
            top: alternatives
                .iter()
                .map(|(t, l)| Alternative {
                    bytes: t.as_bytes().to_vec(),
                    logprob: *l,
                })
                .collect(),
        }
    }

    #[test]
    fn divergence_finds_the_near_tie_that_flipped() {
        let baseline = [
            token("The", -0.01, &[]),
            token(" answer", -0.69, &[(" answer", -0.69), (" result", -0.71)]),
        ];
        let candidate = [
            token("The", -0.02, &[]),
            token(" result", -0.68, &[(" result", -0.68), (" answer", -0.70)]),
        ];
        let divergence = first_divergence(&baseline, &candidate).unwrap();
        assert_eq!(divergence.index, 1);
        assert_eq!(divergence.shared_prefix, "The");
        let base = divergence.baseline.unwrap();
        assert_eq!(base.token, " answer");
        assert!((base.probability - 0.5016).abs() < 1e-3);
        assert_eq!(base.alternatives[0].0, " result");
        assert!(first_divergence(&baseline, &baseline).is_none());
        let longer = [
            token("The", -0.01, &[]),
            token(" answer", -0.69, &[]),
            token("!", -1.0, &[]),
        ];
        let divergence = first_divergence(&baseline, &longer).unwrap();
        assert_eq!((divergence.index, divergence.baseline.is_none()), (2, true));
    }
}
