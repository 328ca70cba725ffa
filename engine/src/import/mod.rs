//! Importing peers' task definitions: an lm-evaluation-harness task file ([`lm_eval`]) or a
//! file of Inspect AI samples ([`inspect`]) becomes dataset revisions and evals. Every document
//! is rendered with the eval's prompt before anything is stored, so an import that is refused
//! leaves nothing behind.

pub mod inspect;
pub mod lm_eval;

use crate::catalog;
use crate::dataset_files::parse_file;
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::dataset::{DatasetBuilder, DatasetError, DatasetFormat, ItemSink};
use arbiter_domain::ids::{DatasetId, EvalId, UserId};
use arbiter_domain::prompt::{Api, PromptRenderer};
use arbiter_store::Store;
use std::path::Path;

pub use inspect::import_inspect_samples;
pub use lm_eval::import_lm_eval_task;

/// How the imported evals send their prompts.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Completions for base checkpoints (as the harness's `local-completions`), or chat (the
    /// same text as one user message).
    pub api: Api,
    /// Names the datasets and evals; the task's name when empty.
    pub name: String,
}

/// What an import stored.
#[derive(Clone, Debug)]
pub struct Imported {
    /// (dataset name, revision hash, items) of each dataset written.
    pub datasets: Vec<(String, String, i64)>,
    /// (id, name) of each eval defined: one per filter pipeline.
    pub evals: Vec<(EvalId, String)>,
    /// Differences from the harness the user should know of.
    pub notes: Vec<String>,
}

/// Refuses names that evals already have, before anything is stored.
async fn refuse_taken_names(store: &dyn Store, names: &[String]) -> ServiceResult<()> {
    let existing = store.list_evals().await?;
    match names
        .iter()
        .find(|wanted| existing.iter().any(|eval| &eval.name == *wanted))
    {
        Some(clash) => Err(ServiceError::Invalid(format!(
            "an eval named `{clash}` exists already: import under another name (--name)"
        ))),
        None => Ok(()),
    }
}

/// Renders every document of the file, as saving the eval will over the stored revision.
fn check_documents(
    path: &Path,
    format: DatasetFormat,
    renderer: PromptRenderer,
) -> ServiceResult<()> {
    let sink: ItemSink = Box::new(move |chunk| {
        for item in &chunk {
            renderer
                .check_turns(item)
                .map_err(|problem| DatasetError::At {
                    place: format!("document `{}`", item.case_id),
                    message: problem,
                })?;
        }
        Ok(())
    });
    stream(path, format, sink)
}

/// Streams a data file's documents into `sink` within the upload limits.
fn stream(path: &Path, format: DatasetFormat, sink: ItemSink) -> ServiceResult<()> {
    let builder = DatasetBuilder::streaming(catalog::upload_limits(), 5_000, sink);
    parse_file(path, format, builder)
        .map(|_| ())
        .map_err(|err| ServiceError::Invalid(format!("{}: {err}", path.display())))
}

/// Uploads a data file as a revision of the named dataset and records it.
async fn upload(
    store: &dyn Store,
    name: &str,
    path: &Path,
    created_by: Option<UserId>,
    written: &mut Vec<(String, String, i64)>,
) -> ServiceResult<DatasetId> {
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let revision = catalog::upload_dataset_file(
        store,
        name,
        &file_name,
        path,
        created_by,
        catalog::upload_limits(),
    )
    .await?;
    written.push((
        name.to_string(),
        revision.content_hash.clone(),
        revision.item_count,
    ));
    Ok(revision.dataset_id)
}
