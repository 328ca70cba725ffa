//! Checkpoint announcements a training job writes: a directory with one JSON announcement per
//! checkpoint (`step-2000.json`), or one JSON Lines manifest with a line per checkpoint. Each
//! new announcement is registered and triggers its suites.
//!
//! Polling rather than file-system events: it works the same on local disks, NFS and
//! Kubernetes volumes, and a scan is cheap. Writers should write a file under another name
//! and rename it into place; a half-written file that does not parse yet is retried when its
//! content changes. Handled announcements are kept in the store by content hash, so a restart
//! registers nothing twice and a bad one is reported once.

use crate::error::ServiceResult;
use crate::suites::{register_announced, Announcement};
use arbiter_domain::ids::CheckpointId;
use arbiter_store::Store;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// What one scan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// (source, checkpoint id, runs launched).
    pub registered: Vec<(String, CheckpointId, usize)>,
    /// (source, why it was refused).
    pub refused: Vec<(String, String)>,
}

/// One announcement found on disk: where it came from and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub source: String,
    pub text: String,
}

/// The announcements at `path`: each `*.json` file of a directory (hidden and temporary files
/// skipped), or each complete line of a JSON Lines file (a last line without its newline is
/// still being written).
pub fn find_announcements(path: &Path) -> std::io::Result<Vec<Found>> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|file| {
                let name = file
                    .file_name()
                    .and_then(|name| name.to_str())
                    .unwrap_or("");
                file.is_file() && name.ends_with(".json") && !name.starts_with('.')
            })
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|file| {
                Ok(Found {
                    text: std::fs::read_to_string(&file)?,
                    source: file.display().to_string(),
                })
            })
            .collect()
    } else {
        let text = std::fs::read_to_string(path)?;
        let complete = match text.rfind('\n') {
            Some(end) => &text[..=end],
            None => "",
        };
        Ok(complete
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(index, line)| Found {
                source: format!("{}#{}", path.display(), index + 1),
                text: line.to_string(),
            })
            .collect())
    }
}

fn content_hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Registers every new or changed announcement at `path`.
pub async fn scan_once(store: &dyn Store, path: &Path) -> ServiceResult<ScanReport> {
    let found = find_announcements(path).map_err(|err| {
        crate::error::ServiceError::Invalid(format!("cannot read {}: {err}", path.display()))
    })?;
    let mut report = ScanReport::default();
    for Found { source, text } in found {
        let hash = content_hash(&text);
        if store.announcement_hash(&source).await?.as_deref() == Some(hash.as_str()) {
            continue;
        }
        let now = arbiter_store::now_ms();
        let outcome = match serde_json::from_str::<Announcement>(&text) {
            Ok(announcement) => match register_announced(store, &announcement, None).await {
                // The store failed, not the announcement: try it again on the next scan.
                Err(crate::error::ServiceError::Internal) => {
                    tracing::warn!(%source, "checkpoint announcement not handled yet; retrying");
                    continue;
                }
                other => other.map_err(|err| err.to_string()),
            },
            Err(err) => Err(format!("not a checkpoint announcement: {err}")),
        };
        match outcome {
            Ok(registered) => {
                store
                    .record_announcement(&source, &hash, Some(registered.checkpoint_id), None, now)
                    .await?;
                tracing::info!(%source, checkpoint = registered.checkpoint_id.get(), runs = registered.runs.len(), "checkpoint announced");
                report
                    .registered
                    .push((source, registered.checkpoint_id, registered.runs.len()));
            }
            Err(error) => {
                store
                    .record_announcement(&source, &hash, None, Some(&error), now)
                    .await?;
                tracing::warn!(%source, %error, "checkpoint announcement refused");
                report.refused.push((source, error));
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_give_json_files_and_manifests_give_complete_lines() {
        let directory = tempfile::tempdir().unwrap();
        std::fs::write(directory.path().join("b.json"), "{}").unwrap();
        std::fs::write(directory.path().join("a.json"), "{\"x\": 1}").unwrap();
        std::fs::write(directory.path().join(".hidden.json"), "{}").unwrap();
        std::fs::write(directory.path().join("c.json.tmp"), "{").unwrap();
        let found = find_announcements(directory.path()).unwrap();
        let names: Vec<&str> = found
            .iter()
            .map(|found| found.source.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(names, ["a.json", "b.json"]);

        let manifest = directory.path().join("checkpoints.jsonl");
        std::fs::write(&manifest, "{\"a\": 1}\n\n{\"b\": 2}\n{\"c\": ").unwrap();
        let lines = find_announcements(&manifest).unwrap();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].source.ends_with("checkpoints.jsonl#1"));
        assert!(lines[1].source.ends_with("checkpoints.jsonl#3"));
        assert_eq!(lines[1].text, "{\"b\": 2}");
        assert!(find_announcements(&directory.path().join("missing")).is_err());
    }
}
