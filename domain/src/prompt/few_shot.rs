//! Few-shot exemplars: which items of a dataset are shown before each question, and how.
//!
//! The draw is one seeded choice of `count` items (plus one spare) from a dataset revision:
//! the items whose ids hash lowest under the seed, in that order. It is a pure function of the
//! seed and the ids, so it streams over a dataset of any size, and a launch freezes the drawn
//! items themselves into the manifest: the run's identity says exactly which shots were used,
//! and changing them (another seed, count or revision) is another run. When the exemplars
//! come from the evaluated dataset, an item never sees itself as a shot: the spare stands in.
//!
//! As text (lm-evaluation-harness's layout), each shot is the eval's own prompt for the
//! exemplar, the target delimiter and its answer, joined by the shot delimiter before the
//! question. As turns, each shot is a user message and the assistant's answer.

use crate::dataset::DatasetItem;
use crate::ids::DatasetId;
use serde::{Deserialize, Serialize};
use std::collections::BinaryHeap;

/// Most shots an eval may ask for.
pub const MAX_SHOTS: u32 = 64;

/// How shots are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FewShotStyle {
    /// In the prompt text, before the question.
    #[default]
    Text,
    /// As earlier user and assistant turns of the conversation (chat only).
    Turns,
}

/// An eval's few-shot setting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FewShotSpec {
    /// The dataset the shots come from (its newest revision at launch).
    pub dataset_id: DatasetId,
    /// Shots per prompt (lm-evaluation-harness's `num_fewshot`).
    pub count: u32,
    /// Seed of the draw.
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub style: FewShotStyle,
    /// Between shots, and between the last shot and the question (text style).
    #[serde(default = "default_delimiter")]
    pub delimiter: String,
    /// Between a shot's prompt and its answer (text style).
    #[serde(default = "default_target_delimiter")]
    pub target_delimiter: String,
    /// The dataset's first `count` items, in its order (lm-evaluation-harness's `first_n`
    /// sampler), instead of the seeded draw.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_order: bool,
}

fn default_delimiter() -> String {
    "\n\n".into()
}

fn default_target_delimiter() -> String {
    " ".into()
}

impl FewShotSpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.count == 0 || self.count > MAX_SHOTS {
            return Err(format!("few-shot needs between 1 and {MAX_SHOTS} shots"));
        }
        if self.delimiter.len() > 256 || self.target_delimiter.len() > 256 {
            return Err("few-shot delimiters are at most 256 bytes".into());
        }
        Ok(())
    }
}

/// The drawn exemplars, frozen into a run's manifest: `count` shots and, when the dataset had
/// one more item, a spare that replaces a shot which is the item being asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exemplars {
    pub dataset_id: DatasetId,
    /// Content hash of the revision they were drawn from.
    pub dataset_revision: String,
    pub items: Vec<DatasetItem>,
}

impl Exemplars {
    /// The case ids, in the order they are shown.
    pub fn case_ids(&self) -> Vec<&str> {
        self.items
            .iter()
            .map(|item| item.case_id.as_str())
            .collect()
    }
}

/// Where an item falls in the draw under `seed`: lowest first.
pub fn draw_rank(seed: u64, case_id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(case_id.as_bytes(), seed)
}

/// A streaming draw: offer every item of a revision (in its order), then take the `keep`
/// lowest-ranked, or with `in_order` the first `keep`.
pub struct ExemplarDraw {
    seed: u64,
    keep: usize,
    in_order: bool,
    /// Items offered so far: with `in_order`, an item's rank.
    offered: u64,
    /// Max-heap on rank: the worst kept item is on top, dropped when a better one comes.
    best: BinaryHeap<(u64, String, Ranked)>,
}

/// An item in the draw (ordered by rank and id only).
struct Ranked(DatasetItem);

impl PartialEq for Ranked {
    fn eq(&self, _: &Ranked) -> bool {
        true
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Ranked) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, _: &Ranked) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl ExemplarDraw {
    /// A draw keeping `count` shots and one spare.
    pub fn new(spec: &FewShotSpec) -> ExemplarDraw {
        ExemplarDraw {
            seed: spec.seed,
            keep: spec.count as usize + 1,
            in_order: spec.in_order,
            offered: 0,
            best: BinaryHeap::new(),
        }
    }

    pub fn offer(&mut self, item: &DatasetItem) {
        let rank = if self.in_order {
            self.offered
        } else {
            draw_rank(self.seed, &item.case_id)
        };
        self.offered += 1;
        if self.best.len() < self.keep {
            self.best
                .push((rank, item.case_id.clone(), Ranked(item.clone())));
        } else if let Some(worst) = self.best.peek() {
            if (rank, &item.case_id) < (worst.0, &worst.1) {
                self.best.pop();
                self.best
                    .push((rank, item.case_id.clone(), Ranked(item.clone())));
            }
        }
    }

    /// The kept items, lowest rank first.
    pub fn finish(self) -> Vec<DatasetItem> {
        self.best
            .into_sorted_vec()
            .into_iter()
            .map(|(_, _, Ranked(item))| item)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str) -> DatasetItem {
        DatasetItem::four_field(id, format!("question {id}"), format!("answer {id}"), "")
    }

    fn spec(count: u32, seed: u64) -> FewShotSpec {
        FewShotSpec {
            dataset_id: DatasetId(1),
            count,
            seed,
            style: FewShotStyle::Text,
            delimiter: default_delimiter(),
            target_delimiter: default_target_delimiter(),
            in_order: false,
        }
    }

    fn draw(count: u32, seed: u64, ids: &[&str]) -> Vec<String> {
        let mut draw = ExemplarDraw::new(&spec(count, seed));
        for id in ids {
            draw.offer(&item(id));
        }
        draw.finish().into_iter().map(|item| item.case_id).collect()
    }

    #[test]
    fn the_draw_depends_on_the_seed_and_the_ids_not_their_order() {
        let ids: Vec<String> = (0..200).map(|i| format!("item-{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let drawn = draw(3, 7, &ids);
        assert_eq!(drawn.len(), 4, "three shots and a spare");
        let mut reversed = ids.clone();
        reversed.reverse();
        assert_eq!(draw(3, 7, &reversed), drawn);
        assert_ne!(draw(3, 8, &ids), drawn, "another seed, other shots");
        // Lowest rank first, as the full sort would give.
        let mut by_rank = ids.clone();
        by_rank.sort_by_key(|id| (draw_rank(7, id), id.to_string()));
        assert_eq!(drawn, by_rank[..4].to_vec());
    }

    #[test]
    fn in_order_takes_the_first_items_as_offered() {
        let mut draw = ExemplarDraw::new(&FewShotSpec {
            in_order: true,
            ..spec(2, 7)
        });
        for id in ["z", "b", "m", "a"] {
            draw.offer(&item(id));
        }
        let ids: Vec<String> = draw.finish().into_iter().map(|item| item.case_id).collect();
        assert_eq!(
            ids,
            ["z", "b", "m"],
            "two shots and a spare, in dataset order"
        );
    }

    #[test]
    fn small_datasets_give_what_they_have() {
        assert_eq!(draw(5, 1, &["a", "b"]).len(), 2);
        assert!(spec(0, 1).validate().is_err());
        assert!(spec(MAX_SHOTS + 1, 1).validate().is_err());
    }
}
