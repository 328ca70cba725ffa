//! Importing peers' task definitions: an lm-evaluation-harness task file ([`lm_eval`]) or a
//! file of Inspect AI samples ([`inspect`]) becomes dataset revisions and evals. Every document
//! is rendered with the eval's prompt before anything is stored, so an import that is refused
//! leaves nothing behind.

pub mod inspect;
pub mod lm_eval;

use crate::catalog;
use crate::dataset_files::parse_file;
use crate::error::{ServiceError, ServiceResult};
use crate::prompts::check_item;
use arbiter_domain::dataset::{DatasetBuilder, DatasetError, DatasetFormat, ItemSink};
use arbiter_domain::grading::{Grader, GraderSpec};
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
    /// A `loglikelihood_rolling` task's window, as the harness's `max_length` model argument
    /// (its default, 2048, when `None`).
    pub max_length: Option<u32>,
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

/// Longest dataset or eval name.
const MAX_NAME_CHARS: usize = 200;

/// Refuses, before anything is stored, eval and dataset names that are taken (an import never
/// adds a revision to someone's dataset), repeated within the import, or too long.
async fn refuse_taken_names(
    store: &dyn Store,
    evals: &[String],
    datasets: &[String],
) -> ServiceResult<()> {
    let refuse = |message: String| Err(ServiceError::Invalid(message));
    // Stored names are trimmed: compare them so.
    let evals: Vec<String> = evals.iter().map(|name| name.trim().to_string()).collect();
    let datasets: Vec<String> = datasets
        .iter()
        .map(|name| name.trim().to_string())
        .collect();
    let (evals, datasets) = (&evals[..], &datasets[..]);
    for (kind, names) in [("eval", evals), ("dataset", datasets)] {
        for (index, name) in names.iter().enumerate() {
            if name.chars().count() > MAX_NAME_CHARS {
                return refuse(format!(
                    "the {kind} name `{name}` is longer than {MAX_NAME_CHARS} characters: import under a shorter name (--name)"
                ));
            }
            if names[..index].contains(name) {
                return refuse(format!(
                    "the import would make two {kind}s named `{name}`: name the task's filter pipelines apart"
                ));
            }
        }
    }
    let existing_evals = store.list_evals().await?;
    if let Some(clash) = evals
        .iter()
        .find(|wanted| existing_evals.iter().any(|eval| &eval.name == *wanted))
    {
        return refuse(format!(
            "an eval named `{clash}` exists already: import under another name (--name)"
        ));
    }
    let existing_datasets = store.list_datasets().await?;
    if let Some(clash) = datasets.iter().find(|wanted| {
        existing_datasets
            .iter()
            .any(|dataset| &dataset.name == *wanted)
    }) {
        return refuse(format!(
            "a dataset named `{clash}` exists already, and an import never adds to it: import under another name (--name)"
        ));
    }
    Ok(())
}

/// Checks every document of the file as saving the eval will over the stored revision (its
/// prompt renders; the graders find the fields they read), so a refusal stores nothing.
fn check_documents(
    path: &Path,
    format: DatasetFormat,
    renderer: PromptRenderer,
    graders: &[GraderSpec],
) -> ServiceResult<()> {
    let graders: Vec<Grader> = graders
        .iter()
        .filter_map(|spec| spec.compile().ok())
        .collect();
    let sink: ItemSink = Box::new(move |chunk| {
        for item in &chunk {
            let problem = if graders.is_empty() {
                check_item(&renderer, None, item).err()
            } else {
                graders
                    .iter()
                    .find_map(|grader| check_item(&renderer, Some(grader), item).err())
            };
            if let Some(problem) = problem {
                return Err(DatasetError::At {
                    place: format!("document `{}`", item.case_id),
                    message: problem,
                });
            }
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
    format: DatasetFormat,
    created_by: Option<UserId>,
    written: &mut Vec<(String, String, i64)>,
) -> ServiceResult<DatasetId> {
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let revision = catalog::upload_dataset_file_as(
        store,
        name,
        &file_name,
        path,
        format,
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
