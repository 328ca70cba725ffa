//! `arbiter bench structured`: a million MMLU-style items as a researcher brings them. A JSONL
//! file of about half a gigabyte is streamed into the store by `arbiter dataset upload` (run as
//! a child process, whose peak memory is sampled while it works), then a templated chat eval
//! (a Jinja template with lettered choices, a system prompt over a field, a field mapping) is
//! defined (every item rendered once) and launched (every item rendered again, then expanded
//! into result identities); this process's peak memory covers both.

use super::pipeline::Bench;
use super::support::{memory_mib, start_sim};
use anyhow::{bail, Context};
use arbiter_engine::catalog::EvalForm;
use arbiter_store::Database;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

const SUBJECTS: [&str; 8] = [
    "astronomy",
    "biology",
    "chemistry",
    "economics",
    "geography",
    "history",
    "law",
    "physics",
];

/// Writes `items` MMLU-style items (about 500 bytes each) to `path`; returns the file's size.
fn write_items(path: &std::path::Path, items: usize) -> anyhow::Result<u64> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let padding = "which of the following statements about the matter is best supported".repeat(5);
    for index in 0..items {
        let subject = SUBJECTS[index % SUBJECTS.len()];
        let line = serde_json::json!({
            "id": format!("q{index:07}"),
            "question": format!("Question {index} in {subject}: {padding}?"),
            "choices": [format!("option {}", index % 11), format!("option {}", index % 13),
                        format!("option {}", index % 17), format!("option {}", index % 19)],
            "answer": index % 4,
            "subject": subject,
        });
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// The peak resident memory (MiB) of a child process, sampled until it exits.
fn wait_sampling_peak(mut child: std::process::Child) -> anyhow::Result<(bool, f64)> {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0.0f64;
    loop {
        if let Ok(status) = std::fs::read_to_string(&status_file) {
            if let Some(kib) = status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
        }
        if let Some(status) = child.try_wait()? {
            return Ok((status.success(), peak_kib / 1024.0));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) async fn structured(items: usize) -> anyhow::Result<()> {
    println!("== structured: {items} MMLU-style items, streamed upload and templated chat expansion, SQLite");
    let directory = tempfile::tempdir()?;
    let file = directory.path().join("mmlu.jsonl");
    let size = write_items(&file, items)?;
    let url = format!("sqlite://{}", directory.path().join("bench.db").display());
    let started = Instant::now();
    let child = Command::new(std::env::current_exe()?)
        .args([
            "dataset",
            "--database-url",
            &url,
            "upload",
            "--name",
            "mmlu",
        ])
        .arg(&file)
        .env("RUST_LOG", "warn")
        .spawn()?;
    let (uploaded, upload_peak) = wait_sampling_peak(child)?;
    if !uploaded {
        bail!("the upload failed");
    }
    let upload_s = started.elapsed().as_secs_f64();
    println!(
        "upload: {:.0} MB, {items} items in {upload_s:.1} s ({:.0} items/s, {:.1} MB/s); peak RSS of `arbiter dataset upload` {upload_peak:.0} MiB",
        size as f64 / 1e6,
        items as f64 / upload_s,
        size as f64 / 1e6 / upload_s
    );
    let sim = start_sim(&["--latency-ms-min", "0", "--latency-ms-max", "0"]).await?;
    let database = Database::open(&url).await?;
    let bench = Bench::on(database.store());
    let dataset_id = bench
        .store
        .list_datasets()
        .await?
        .first()
        .context("the dataset was not stored")?
        .id;
    let checkpoint = bench
        .register(&sim.base_url, "bench", "structured", 1024)
        .await?;
    let defined = Instant::now();
    let eval = arbiter_engine::catalog::define_eval(
        bench.store.as_ref(),
        &EvalForm {
            name: "mmlu templated".into(),
            dataset_id,
            prompt_template: crate::demo::CHOICE_TEMPLATE.into(),
            max_tokens: 8,
            temperature: 0.0,
            repetitions: 1,
            seed: 0,
            grader: "multiple_choice@1".into(),
            options: crate::demo::choice_options(),
        },
        None,
    )
    .await
    .map_err(|err| anyhow::anyhow!("define: {err}"))?;
    let define_s = defined.elapsed().as_secs_f64();
    let (run_id, launch_s) = bench.launch(eval, checkpoint).await?;
    let expected = bench
        .store
        .run_header(run_id)
        .await?
        .context("the run exists")?
        .expected;
    let (peak, now, anonymous, file_backed) = memory_mib();
    println!(
        "define (every item rendered): {define_s:.1} s ({:.0} items/s); launch (every item rendered again, then {expected} identities expanded): {launch_s:.1} s ({:.0} items/s)",
        items as f64 / define_s,
        items as f64 / launch_s
    );
    println!("peak RSS {peak:.0} MiB (target under 300); now {now:.0} MiB = {anonymous:.0} MiB anonymous + {file_backed:.0} MiB file-backed");
    Ok(())
}
