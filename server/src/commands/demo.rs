//! `arbiter demo`: a fresh embedded database, the simulator (and the bundled model when
//! built), demo accounts and runs, then the server as `arbiter serve` runs it.

use super::open;
use super::serve::{background_jobs, run_server};
use super::sim::model_names;
use anyhow::Context;
use arbiter_engine::clients::mail::Mailer;
use arbiter_sim::SimConfig;
use server::demo;
use std::net::SocketAddr;
use std::sync::Arc;

/// `arbiter demo`.
pub async fn demo(args: crate::DemoArgs) -> anyhow::Result<()> {
    let crate::DemoArgs {
        addr,
        sim_addr,
        data_dir,
        site_root,
        queue_monitor_seconds,
        model_gguf,
        model_addr,
        humaneval,
    } = args;
    let real_model = super::model::start_for_demo(model_gguf.as_deref(), model_addr).await;
    run_demo(
        addr,
        sim_addr,
        &data_dir,
        &site_root,
        queue_monitor_seconds,
        real_model,
        humaneval.as_deref(),
    )
    .await
}

async fn run_demo(
    addr: SocketAddr,
    sim_addr: SocketAddr,
    data_dir: &std::path::Path,
    site_root: &str,
    queue_monitor_seconds: u64,
    real_model: Option<super::model::RunningModel>,
    humaneval: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // A fresh database every start, so the demo always shows the same story.
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(data_dir.join(format!("demo.db{suffix}")));
    }
    // The demo's checkpoints live on loopback, which the default egress policy refuses: allow
    // its own simulator and model server, on their ports only (not Arbiter's own API).
    let mut own_endpoints = vec![sim_addr.to_string()];
    if let Some(model) = &real_model {
        let url = reqwest::Url::parse(&model.base_url).context("the bundled model's URL")?;
        own_endpoints.push(format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(80)
        ));
    }
    let launcher = demo_launcher(sim_addr, data_dir, real_model.is_some())?;
    own_endpoints.extend(launcher.endpoints());
    super::install_egress(&own_endpoints)?;
    let sim_listener = tokio::net::TcpListener::bind(sim_addr)
        .await
        .with_context(|| format!("cannot start the simulator on {sim_addr}"))?;
    let sim_config = SimConfig::demo();
    let sim_models = model_names(&sim_config);
    tokio::spawn(async move {
        if let Err(err) = arbiter_sim::serve(sim_config, sim_listener).await {
            tracing::error!(error = %err, "simulator stopped");
        }
    });
    let database_url = format!("sqlite://{}", data_dir.join("demo.db").display());
    let database = open(&database_url).await?;
    let mut seeded = demo::seed(
        database.store().as_ref(),
        &format!("http://{sim_addr}/v1"),
        humaneval,
    )
    .await?;
    if let Some(model) = &real_model {
        let runs = demo::seed_real_model(
            database.store().as_ref(),
            &seeded,
            &model.base_url,
            &model.name,
        )
        .await?;
        seeded.run_ids.extend(runs);
    }
    let mail_dir = data_dir.join("mail");
    let mailer = Mailer::from_config(
        &format!("file:{}", mail_dir.display()),
        "Arbiter demo <arbiter@arbiter.demo>",
    )?;
    println!();
    println!(
        "  Arbiter demo is up at http://{addr}  (ready in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    println!(
        "  Simulated model endpoint (arbiter sim) at http://{sim_addr}/v1 serving {sim_models}"
    );
    if let Some(model) = &real_model {
        println!(
            "  Real model (SmolLM2-135M-Instruct on CPU, arbiter model serve) at {} as `{}`",
            model.base_url, model.name
        );
    }
    println!("  Database: {}", data_dir.join("demo.db").display());
    println!(
        "  Runs launched: {:?} (in-process workers are answering them now)",
        seeded.run_ids
    );
    println!();
    println!("  Demo accounts (username / password):");
    for (username, role, password) in demo::DEMO_ACCOUNTS {
        println!("    {:<10}  {username:<12} / {password}", role.as_str());
    }
    println!(
        "  Mail to the lead ({}) is written to {}",
        demo::DEMO_LEAD_EMAIL,
        mail_dir.display()
    );
    println!();
    let announcements = data_dir.join("announcements");
    std::fs::create_dir_all(&announcements)
        .with_context(|| format!("cannot create {}", announcements.display()))?;
    println!(
        "  Announce a checkpoint of `{}`: write a JSON file into {}",
        demo::DEMO_TRAINING_RUN,
        announcements.display()
    );
    println!(
        "    e.g. {{\"name\": \"step-3000\", \"endpoint_url\": \"http://{sim_addr}/v1\", \"model\": \"sim-ckpt-a\", \"training_run\": \"{}\", \"training_step\": 3000}}",
        demo::DEMO_TRAINING_RUN
    );
    println!("    and its smoke suite `demo-smoke` starts within seconds.");
    println!(
        "  Or have Arbiter serve it (started on ports {}–{}, retired when idle): replace \"endpoint_url\" with",
        launcher.ports.0, launcher.ports.1
    );
    println!("    \"serve\": {{\"engine\": \"simulator\", \"path\": \"demo-weights\"}}, or use \"Serve a checkpoint\" on the Checkpoints page.");
    println!();
    let mut jobs = background_jobs(
        Arc::new(mailer),
        1,
        64,
        queue_monitor_seconds,
        Some((announcements, std::time::Duration::from_secs(5))),
    )?;
    jobs.launcher = Some(arbiter_engine::serving::config::LauncherConfig::Local(
        launcher,
    ));
    run_server(&database, addr, site_root, jobs).await
}

/// The demo's launcher: simulator replicas (and, with the bundled model, `arbiter model
/// serve`) started from this binary on the ten ports after the simulator's, retired after a
/// minute idle; their logs under the data directory.
fn demo_launcher(
    sim_addr: SocketAddr,
    data_dir: &std::path::Path,
    with_model: bool,
) -> anyhow::Result<arbiter_engine::serving::config::LocalLauncherConfig> {
    use arbiter_domain::serving::ServingEngine;
    let binary = std::env::current_exe().context("the path of this binary")?;
    let binary = shell_words::quote(&binary.display().to_string()).into_owned();
    let first = sim_addr.port().saturating_add(10);
    let mut engines = std::collections::BTreeMap::from([(
        ServingEngine::Simulator,
        format!("{binary} sim --addr {{host}}:{{port}} --model {{model}}:0.8"),
    )]);
    if with_model {
        engines.insert(
            ServingEngine::ArbiterModel,
            format!(
                "{binary} model serve --gguf {{path}} --name {{model}} --addr {{host}}:{{port}}"
            ),
        );
    }
    Ok(arbiter_engine::serving::config::LocalLauncherConfig {
        id: "demo".into(),
        host: sim_addr.ip().to_string(),
        ports: (first, first.saturating_add(9)),
        log_dir: data_dir.join("launch-logs"),
        policy: arbiter_domain::serving::launch::LaunchPolicy {
            idle_ms: 60_000,
            ..Default::default()
        },
        gpus: 0,
        engines,
    })
}
