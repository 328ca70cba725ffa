//! `arbiter bench login-burst`: sign-in bursts over HTTP against the real router, with the
//! process's peak resident memory around each.
//!
//! 1. One account, `--items` concurrent wrong passwords (default 50) from one address: how many
//!    reached Argon2 (401) against the account's limit, and how many were refused first (429).
//! 2. A crowd: `--items` × 10 concurrent sign-ins for unknown names, each from an address of its
//!    own (the bench trusts loopback as a proxy and sets `X-Forwarded-For`), so neither the
//!    account nor the address limit stops them: how many were checked, how many were turned
//!    away (503), and what the checks cost in memory (about 19 MiB each while running).
//!
//! The clients run in the same process as the server, so the peak includes their connections:
//! it bounds what the server alone needs.

use super::support::{memory_mib, reset_peak_memory};
use anyhow::Context;
use arbiter_domain::accounts::Role;
use arbiter_engine::clients::mail::Mailer;
use arbiter_store::Database;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PASSWORD: &str = "login-burst-pass";

/// Statuses of a burst, counted.
async fn burst(
    base: &str,
    attempts: impl Iterator<Item = (String, String, String)>,
) -> BTreeMap<u16, usize> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("an HTTP client");
    let mut requests = tokio::task::JoinSet::new();
    for (username, password, address) in attempts {
        let (client, url) = (client.clone(), format!("{base}/login"));
        requests.spawn(async move {
            client
                .post(url)
                .header("accept", "application/json")
                .header("x-forwarded-for", address)
                .form(&[("username", username), ("password", password)])
                .send()
                .await
                .map_or(0, |response| response.status().as_u16())
        });
    }
    let mut counts = BTreeMap::new();
    while let Some(status) = requests.join_next().await {
        *counts.entry(status.unwrap_or(0)).or_insert(0) += 1;
    }
    counts
}

fn print_phase(name: &str, counts: &BTreeMap<u16, usize>, took: Duration, before_mib: f64) {
    let (peak, current, _, _) = memory_mib();
    let count = |status: u16| counts.get(&status).copied().unwrap_or(0);
    println!(
        "{name}: {} checked (401), {} refused by the throttle (429), {} turned away busy (503), \
         {} other, in {:.2} s; peak RSS {peak:.0} MiB ({:+.0} MiB over the {before_mib:.0} MiB \
         before), now {current:.0} MiB",
        count(401),
        count(429),
        count(503),
        counts
            .iter()
            .filter(|(status, _)| ![401, 429, 503].contains(*status))
            .map(|(_, count)| count)
            .sum::<usize>(),
        took.as_secs_f64(),
        peak - before_mib,
    );
}

pub async fn run(attempts: usize) -> anyhow::Result<()> {
    println!(
        "== login burst: {attempts} wrong passwords for one account, then {} sign-ins from as many addresses",
        attempts * 10
    );
    // Each request of the crowd comes from its own address, as from a botnet behind a proxy.
    std::env::set_var("ARBITER_TRUSTED_PROXIES", "127.0.0.1");
    let directory = tempfile::tempdir()?;
    let database = Database::open(&format!(
        "sqlite://{}",
        directory.path().join("login.db").display()
    ))
    .await?;
    arbiter_engine::accounts::create_user(
        database.store().as_ref(),
        "target",
        PASSWORD,
        Role::Annotator,
    )
    .await
    .context("creating the target account")?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let base = format!("http://{address}");
    let app = crate::http::router(
        &database,
        crate::http::leptos_options("target/site", address),
        Arc::new(Mailer::log_only()),
    )
    .await?;
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await;
    });

    reset_peak_memory();
    let before = memory_mib().1;
    let started = Instant::now();
    let one_account = burst(
        &base,
        (0..attempts).map(|guess| {
            (
                "target".into(),
                format!("guess-{guess}"),
                "198.51.100.7".into(),
            )
        }),
    )
    .await;
    print_phase("one account", &one_account, started.elapsed(), before);

    reset_peak_memory();
    let before = memory_mib().1;
    let started = Instant::now();
    let crowd = burst(
        &base,
        (0..attempts * 10).map(|index| {
            (
                format!("nobody-{index}"),
                "wrong-password".into(),
                format!(
                    "10.{}.{}.{}",
                    index >> 16 & 255,
                    index >> 8 & 255,
                    index & 255
                ),
            )
        }),
    )
    .await;
    print_phase("crowd", &crowd, started.elapsed(), before);
    Ok(())
}
