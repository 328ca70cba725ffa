//! Latency histogram: answers per latency bucket (time to answer, retries included), on
//! buckets that widen roughly geometrically so both the bulk and the tail are visible. Each bar
//! carries its count as text; the same counts are in the table beside it.

use std::error::Error;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{name_at, render_svg, FONT, PALETTE};

const WIDTH: u32 = 640;
const HEIGHT: u32 = 320;

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

/// Renders the histogram of `counts` (one per bucket). Never panics.
pub fn latency_histogram_svg(title: &str, counts: &[u64]) -> String {
    render_svg(title, |svg| draw(svg, title, counts))
}

fn draw(svg: &mut String, title: &str, counts: &[u64]) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let highest = counts.iter().copied().max().unwrap_or(0).max(1) as f64;
    let buckets = counts.len().max(1) as f64;
    let bucket_names: Vec<String> = (0..counts.len()).map(bucket_label).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 15))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5..buckets - 0.5, 0.0..highest * 1.15)?;
    chart
        .configure_mesh()
        .x_labels(counts.len().max(1) * 2 + 1)
        .x_label_formatter(&|v| name_at(&bucket_names, *v))
        .y_labels(5)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("time to answer (retries included)")
        .y_desc("answers")
        .axis_desc_style((FONT, 12))
        .label_style((FONT, 10))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    let colour = PALETTE[0];
    chart.draw_series(counts.iter().enumerate().filter(|(_, &n)| n > 0).map(
        |(bucket, &count)| {
            let x = bucket as f64;
            Rectangle::new([(x - 0.38, 0.0), (x + 0.38, count as f64)], colour.filled())
        },
    ))?;
    let on_top = TextStyle::from((FONT, 10))
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(counts.iter().enumerate().filter(|(_, &n)| n > 0).map(
        |(bucket, &count)| {
            Text::new(
                count.to_string(),
                (bucket as f64, count as f64 + highest * 0.02),
                on_top.clone(),
            )
        },
    ))?;
    root.present()?;
    Ok(())
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

    #[test]
    fn one_bar_and_count_per_non_empty_bucket() {
        let mut counts = vec![0; LATENCY_BUCKETS];
        counts[2] = 40;
        counts[5] = 7;
        let svg = latency_histogram_svg("Latency", &counts);
        assert!(svg.contains("\n40\n") && svg.contains("\n7\n"), "{svg}");
        assert!(svg.contains("0.25–0.5 s"));
        // Two bars plus the background.
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
    }
}
