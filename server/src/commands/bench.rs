//! `arbiter bench SCENARIO` and the hidden `bench-dataset` its memory scenario runs in a
//! child process.

/// `arbiter bench-dataset`.
pub async fn bench_dataset(args: crate::BenchDatasetArgs) -> anyhow::Result<()> {
    let crate::BenchDatasetArgs {
        database_url,
        name,
        items,
    } = args;
    server::bench::write_dataset(&database_url, &name, items).await
}

/// `arbiter bench`.
pub async fn bench(args: crate::BenchArgs) -> anyhow::Result<()> {
    let crate::BenchArgs {
        scenario,
        items,
        database_url,
        endpoint,
    } = args;
    // The benchmarks' simulators listen on loopback, which the default policy refuses.
    super::install_egress(&["127.0.0.1".to_string()])?;
    server::bench::run(scenario, items, database_url, endpoint).await
}
