//! `arbiter migrate`, `export`, `backup`, `retention`, `keygen` and `rekey`: the data an operator
//! keeps, moves and protects.

use super::{open, redact};
use arbiter_domain::ids::RunId;
use arbiter_store::Database;

/// `arbiter retention`.
pub async fn retention(args: crate::RetentionArgs) -> anyhow::Result<()> {
    let crate::RetentionArgs {
        database_url,
        raw_days,
        summary_days,
    } = args;
    use arbiter_engine::retention;
    let database = open(&database_url).await?;
    let store = database.store();
    if let (Some(raw), Some(summary)) = (raw_days, summary_days) {
        retention::set_policy(store.as_ref(), &raw, &summary).await?;
    }
    let policy = retention::policy(store.as_ref()).await?;
    println!(
        "policy: raw answers and logprobs kept {} days, summaries {} days",
        policy.raw_days, policy.summary_days
    );
    let report = retention::enforce(store.as_ref(), policy, arbiter_store::now_ms()).await?;
    println!("{}", report.summary());
    Ok(())
}

/// `arbiter backup`.
pub async fn backup(args: crate::BackupArgs) -> anyhow::Result<()> {
    let crate::BackupArgs { database_url, out } = args;
    match open(&database_url).await? {
    Database::Sqlite(store) => {
        store.backup_into(&out).await?;
        println!("backed up {} to {}", redact(&database_url), out.display());
        Ok(())
    }
    Database::Postgres(_) => anyhow::bail!(
        "back up PostgreSQL with its own tools: pg_dump --format=custom --file {} \"$DATABASE_URL\" (restore with pg_restore --dbname NEW_URL FILE)",
        out.display()
    ),
}
}

/// `arbiter export`.
pub async fn export(args: crate::ExportArgs) -> anyhow::Result<()> {
    let crate::ExportArgs {
        database_url,
        runs,
        format,
        out,
        labels,
    } = args;
    export_runs(&database_url, &runs, &format, out.as_deref(), labels).await
}

/// One run's results, or its human labels, into `out`.
async fn export_one<W: std::io::Write + Send>(
    store: &dyn arbiter_store::Store,
    run_id: RunId,
    format: arbiter_engine::reports::export::ExportFormat,
    out: W,
    labels: bool,
) -> anyhow::Result<(W, u64)> {
    let written = if labels {
        arbiter_engine::reports::label_export::export_labels(store, run_id, format, out).await
    } else {
        arbiter_engine::reports::export::export_run(store, run_id, format, out).await
    };
    written.map_err(|err| anyhow::anyhow!("run {run_id}: {err}"))
}

/// `arbiter import lm-eval TASK.yaml` and `arbiter import inspect SAMPLES.jsonl`: prints the
/// datasets and evals made, and what differs from the peer.
/// `arbiter contamination index`.
pub fn contamination(args: crate::ContaminationArgs) -> anyhow::Result<()> {
    let crate::ContaminationAction::Index { out, n, corpora } = args.action;
    let started = std::time::Instant::now();
    let built = arbiter_engine::contamination::build_index(
        &corpora,
        &out,
        n,
        arbiter_engine::contamination::DEFAULT_RUN_HASHES,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "index {}: {} distinct {n}-grams from {} documents ({:.1} MB) in {seconds:.1} s ({:.1} MB/s)",
        built.path.display(),
        built.ngrams,
        built.documents,
        built.bytes_read as f64 / 1e6,
        built.bytes_read as f64 / 1e6 / seconds.max(1e-9),
    );
    println!("content hash {}", built.content_hash);
    Ok(())
}

pub async fn import(args: crate::ImportArgs) -> anyhow::Result<()> {
    use arbiter_engine::import::{import_inspect_samples, import_lm_eval_task, ImportOptions};
    let crate::ImportArgs {
        database_url,
        source,
    } = args;
    let api_of = |api: &str| match api {
        "completions" => Ok(arbiter_domain::prompt::Api::Completions),
        "chat" => Ok(arbiter_domain::prompt::Api::Chat),
        other => Err(anyhow::anyhow!(
            "--api is completions or chat, not `{other}`"
        )),
    };
    let database = open(&database_url).await?;
    let store = database.store();
    let imported = match source {
        crate::ImportSource::LmEval {
            task,
            name,
            api,
            max_length,
        } => {
            let options = ImportOptions {
                api: api_of(&api)?,
                name,
                max_length,
            };
            import_lm_eval_task(store.as_ref(), &task, &options, None).await?
        }
        crate::ImportSource::Inspect {
            samples,
            name,
            grader,
            api,
        } => {
            let options = ImportOptions {
                api: api_of(&api)?,
                name,
                max_length: None,
            };
            let grader = grader
                .map(|text| arbiter_engine::catalog::parse_grader_form(&text))
                .transpose()?;
            import_inspect_samples(store.as_ref(), &samples, &options, grader, None).await?
        }
    };
    for (name, hash, items) in &imported.datasets {
        println!("dataset `{name}`: revision {hash} ({items} items)");
    }
    for (id, name) in &imported.evals {
        println!("eval {id} `{name}`");
    }
    for note in &imported.notes {
        println!("note: {note}");
    }
    Ok(())
}

/// `arbiter dataset upload FILE --name NAME`: streams the file into the store (bounded
/// memory whatever its size) and prints the revision.
pub async fn dataset(args: crate::DatasetArgs) -> anyhow::Result<()> {
    let crate::DatasetArgs {
        database_url,
        action,
    } = args;
    let crate::DatasetAction::Upload { file, name } = action;
    let database = open(&database_url).await?;
    let file_name = file
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let started = std::time::Instant::now();
    let revision = arbiter_engine::catalog::upload_dataset_file(
        database.store().as_ref(),
        &name,
        &file_name,
        &file,
        None,
        arbiter_engine::catalog::upload_limits(),
    )
    .await
    .map_err(|err| anyhow::anyhow!("{}: {err}", file.display()))?;
    println!(
        "dataset `{name}` revision {} ({}): {} items in {:.1} s",
        revision.id,
        revision.content_hash,
        revision.item_count,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `arbiter migrate`.
pub async fn migrate(args: crate::MigrateArgs) -> anyhow::Result<()> {
    let crate::MigrateArgs { database_url } = args;
    let database = open(&database_url).await?;
    println!(
        "database at {} is migrated ({})",
        redact(&database_url),
        database.store().backend()
    );
    Ok(())
}

/// `arbiter export`: see the subcommand's help.
async fn export_runs(
    database_url: &str,
    runs: &[RunId],
    format: &str,
    out: Option<&std::path::Path>,
    labels: bool,
) -> anyhow::Result<()> {
    use arbiter_engine::reports::export::{partition_path, ExportFormat};
    let format = ExportFormat::parse(format)
        .ok_or_else(|| anyhow::anyhow!("unknown format `{format}`: use csv, jsonl or parquet"))?;
    let database = open(database_url).await?;
    let store = database.store();
    match (format, out) {
        (ExportFormat::Parquet, Some(folder)) => {
            for &run_id in runs {
                let run = store
                    .run_header(run_id)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("no run with id {run_id}"))?;
                // Labels have a root of their own: one glob over the results never mixes the
                // two schemas.
                let root = if labels {
                    folder.join("labels")
                } else {
                    folder.to_path_buf()
                };
                let mut path =
                    root.join(partition_path(run.created_at, &run.checkpoint_name, run_id));
                if labels {
                    path.set_file_name(format!("labels-{run_id}.parquet"));
                }
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                // Written beside, then renamed: an archive never holds a half-written file.
                let partial = path.with_extension("parquet.partial");
                let file = std::io::BufWriter::new(std::fs::File::create(&partial)?);
                let (writer, rows) =
                    export_one(store.as_ref(), run_id, format, file, labels).await?;
                writer
                    .into_inner()
                    .map_err(|err| err.into_error())?
                    .sync_all()?;
                std::fs::rename(&partial, &path)?;
                println!("{} ({rows} rows)", path.display());
            }
            Ok(())
        }
        (ExportFormat::Parquet, None) => {
            anyhow::bail!("parquet needs --out FOLDER (it writes one partitioned file per run)")
        }
        (_, _) if runs.len() != 1 => anyhow::bail!("csv and jsonl export one run at a time"),
        (_, Some(path)) => {
            let file = std::io::BufWriter::new(std::fs::File::create(path)?);
            let (writer, rows) = export_one(store.as_ref(), runs[0], format, file, labels).await?;
            writer.into_inner().map_err(|err| err.into_error())?;
            eprintln!("{} ({rows} rows)", path.display());
            Ok(())
        }
        (_, None) => {
            let stdout = std::io::BufWriter::new(std::io::stdout());
            let (mut writer, _) =
                export_one(store.as_ref(), runs[0], format, stdout, labels).await?;
            std::io::Write::flush(&mut writer)?;
            Ok(())
        }
    }
}

/// `arbiter keygen`.
pub fn keygen() -> anyhow::Result<()> {
    println!("{}", arbiter_engine::secrets::SecretBox::generate_key());
    Ok(())
}

/// `arbiter rekey`.
pub async fn rekey(args: crate::RekeyArgs) -> anyhow::Result<()> {
    use arbiter_engine::secrets::SecretBox;
    if args.old_key.trim() == args.new_key.trim() {
        anyhow::bail!("the old and the new key are the same: make a new one with `arbiter keygen`");
    }
    let old = SecretBox::from_hex(&args.old_key)
        .map_err(|problem| anyhow::anyhow!("the old key: {problem}"))?;
    let new = SecretBox::from_hex(&args.new_key)
        .map_err(|problem| anyhow::anyhow!("the new key: {problem}"))?;
    let database = open(&args.database_url).await?;
    let (endpoint_keys, webhook_secrets) =
        arbiter_engine::secrets::rekey(database.store().as_ref(), &old, &new)
            .await
            .map_err(|problem| anyhow::anyhow!("{problem}"))?;
    println!(
        "re-sealed {endpoint_keys} endpoint keys and {webhook_secrets} webhook secrets; restart every server and worker with the new ARBITER_SECRET_KEY"
    );
    Ok(())
}
