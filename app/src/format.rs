//! Formatting shared by the pages: route ids, times and durations, without a clock so that
//! server and browser render the same text.

use leptos::prelude::*;

/// The current route's `:id` as the id type the page shows (0 when missing or not a number,
/// which the server answers with "not found").
pub(crate) fn route_id<Id: From<i64>>() -> impl Fn() -> Id + Copy + Send + Sync + 'static {
    let params = leptos_router::hooks::use_params_map();
    move || {
        params
            .read()
            .get("id")
            .and_then(|id| id.parse::<i64>().ok())
            .unwrap_or(0)
            .into()
    }
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM` UTC, computed without a clock so that
/// server and browser render the same text.
pub(crate) fn format_time(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let minutes_of_day = ms.rem_euclid(86_400_000) / 60_000;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        minutes_of_day / 60,
        minutes_of_day % 60
    )
}

/// "40 s", "1.5 min", "2.3 h": a duration for people (run ETAs, time to results).
pub fn human_duration(seconds: f64) -> String {
    if seconds >= 90.0 * 60.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else if seconds >= 90.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

/// A human verdict as pages show it: `pass` or `fail`.
pub(crate) fn verdict_word(pass: bool) -> &'static str {
    if pass {
        "pass"
    } else {
        "fail"
    }
}

/// `sha256:` and the first 12 hex digits: enough to tell revisions apart at a glance.
pub(crate) fn short_hash(hash: &str) -> String {
    hash.chars().take("sha256:".len() + 12).collect()
}

/// Rows shown on the dataset and run pages.
#[cfg(feature = "ssr")]
pub const PAGE_ROWS: i64 = 200;

#[cfg(test)]
mod tests {
    #[test]
    fn formats_unix_milliseconds_as_utc() {
        assert_eq!(super::format_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(
            super::format_time(1_795_000_000_000),
            "2026-11-18 11:06 UTC"
        );
    }
}
