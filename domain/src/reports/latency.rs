//! Latency buckets of a report: answers per bucket of time to answer (retries included), on
//! edges that widen roughly geometrically so both the bulk and the tail are visible.

/// Upper edges of the buckets in milliseconds; the last bucket is open-ended.
pub const LATENCY_EDGES_MS: [i64; 11] = [
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 120_000,
];

/// Number of buckets: one per edge and one above the last.
pub const LATENCY_BUCKETS: usize = LATENCY_EDGES_MS.len() + 1;

/// The bucket a latency falls in.
pub fn latency_bucket(latency_ms: i64) -> usize {
    LATENCY_EDGES_MS
        .iter()
        .position(|&edge| latency_ms < edge)
        .unwrap_or(LATENCY_EDGES_MS.len())
}

/// The bucket's range in words, e.g. "0.5–1 s" or "≥ 120 s".
pub fn bucket_label(bucket: usize) -> String {
    let seconds = |ms: i64| {
        if ms < 1_000 {
            format!("{}", ms as f64 / 1_000.0)
        } else {
            format!("{}", ms / 1_000)
        }
    };
    match (
        bucket.checked_sub(1).and_then(|i| LATENCY_EDGES_MS.get(i)),
        LATENCY_EDGES_MS.get(bucket),
    ) {
        (None, Some(upper)) => format!("< {} s", seconds(*upper)),
        (Some(lower), Some(upper)) => format!("{}–{} s", seconds(*lower), seconds(*upper)),
        (Some(lower), None) => format!("≥ {} s", seconds(*lower)),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_widening_buckets() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(99), 0);
        assert_eq!(latency_bucket(100), 1);
        assert_eq!(latency_bucket(1_500), 4);
        assert_eq!(latency_bucket(500_000), LATENCY_BUCKETS - 1);
        assert_eq!(bucket_label(0), "< 0.1 s");
        assert_eq!(bucket_label(3), "0.5–1 s");
        assert_eq!(bucket_label(5), "2–5 s");
        assert_eq!(bucket_label(LATENCY_BUCKETS - 1), "≥ 120 s");
    }
}
