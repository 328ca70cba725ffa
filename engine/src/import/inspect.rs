//! Importing a file of Inspect AI samples (JSONL, optionally gzipped): one dataset revision and
//! one eval whose mapping, prompt and grader follow the samples' shape.

use super::{check_documents, refuse_taken_names, stream, upload, ImportOptions, Imported};
use crate::catalog::{self, EvalForm, EvalOptions};
use crate::error::{ServiceError, ServiceResult};
use arbiter_domain::dataset::{DatasetError, DatasetFormat, ItemSink};
use arbiter_domain::grading::GraderSpec;
use arbiter_domain::ids::{DatasetId, UserId};
use arbiter_domain::import::inspect::{inspect_eval, InspectEval, SampleShape};
use arbiter_domain::prompt::TemplateSyntax;
use arbiter_store::Store;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Imports the samples at `path` as the dataset and eval named `options.name` (the file's
/// name without extension when empty); `grader` replaces the one the shape implies.
pub async fn import_inspect_samples(
    store: &dyn Store,
    path: &Path,
    options: &ImportOptions,
    grader: Option<GraderSpec>,
    created_by: Option<UserId>,
) -> ServiceResult<Imported> {
    let name = match options.name.trim() {
        "" => path
            .file_name()
            .map(|name| name.to_string_lossy())
            .and_then(|name| name.split('.').next().map(String::from))
            .filter(|stem| !stem.is_empty())
            .ok_or_else(|| ServiceError::Invalid("name the import (--name)".into()))?,
        name => name.to_string(),
    };
    let names = std::slice::from_ref(&name);
    refuse_taken_names(store, names, names).await?;
    let format = DatasetFormat::from_file_name(&path.to_string_lossy());
    if !matches!(format, DatasetFormat::Jsonl | DatasetFormat::JsonlGzip) {
        return Err(ServiceError::Invalid(
            "Inspect samples are read from JSONL (or JSONL.gz)".into(),
        ));
    }
    let shape = observe(path, format)?;
    let eval = inspect_eval(&shape, grader).map_err(ServiceError::Invalid)?;
    let checking = eval_form(&name, &eval, options, DatasetId(1))?;
    let prompt = catalog::eval_spec(&checking)?.prompt;
    let renderer = crate::prompts::renderer(&prompt, None, DatasetId(1))?;
    let grader = catalog::parse_grader_form(&checking.grader)?;
    check_documents(path, format, renderer, &[grader])?;

    let mut imported = Imported {
        datasets: Vec::new(),
        evals: Vec::new(),
        notes: Vec::new(),
    };
    let dataset = upload(
        store,
        &name,
        path,
        format,
        created_by,
        &mut imported.datasets,
    )
    .await?;
    let form = eval_form(&name, &eval, options, dataset)?;
    imported
        .evals
        .push((catalog::define_eval(store, &form, created_by).await?, name));
    Ok(imported)
}

/// The samples' shape, from one pass over the file.
fn observe(path: &Path, format: DatasetFormat) -> ServiceResult<SampleShape> {
    let shape = Arc::new(Mutex::new(SampleShape::default()));
    let seen = shape.clone();
    let sink: ItemSink = Box::new(move |chunk| {
        let mut shape = seen.lock().map_err(|_| DatasetError::At {
            place: "the import".into(),
            message: "failed while reading the samples".into(),
        })?;
        for item in &chunk {
            let position = shape.samples + 1;
            shape
                .observe(&item.fields())
                .map_err(|message| DatasetError::At {
                    place: format!("sample {position} (`{}`)", item.case_id),
                    message,
                })?;
        }
        Ok(())
    });
    stream(path, format, sink)?;
    Arc::into_inner(shape)
        .and_then(|shape| shape.into_inner().ok())
        .ok_or(ServiceError::Internal)
}

fn eval_form(
    name: &str,
    eval: &InspectEval,
    options: &ImportOptions,
    dataset: DatasetId,
) -> ServiceResult<EvalForm> {
    Ok(EvalForm {
        name: name.to_string(),
        dataset_id: dataset,
        prompt_template: eval.prompt_template.clone(),
        max_tokens: 1024,
        temperature: 0.0,
        repetitions: 1,
        seed: 0,
        grader: serde_json::to_string(&eval.grader).map_err(|_| ServiceError::Internal)?,
        options: EvalOptions {
            template_syntax: Some(if eval.prompt_template.is_empty() {
                TemplateSyntax::Placeholder
            } else {
                TemplateSyntax::Jinja
            }),
            api: options.api,
            mapping: Some(eval.mapping.clone()),
            ..EvalOptions::default()
        },
    })
}
