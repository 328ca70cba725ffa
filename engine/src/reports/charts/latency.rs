//! Latency histogram: answers per latency bucket (time to answer, retries included), on
//! buckets that widen roughly geometrically so both the bulk and the tail are visible. Each bar
//! carries its count as text; the same counts are in the table beside it.

use std::error::Error;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{name_at, render_svg, FONT, PALETTE};
use arbiter_domain::reports::latency::bucket_label;

const WIDTH: u32 = 640;
const HEIGHT: u32 = 320;

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
    use arbiter_domain::reports::latency::LATENCY_BUCKETS;

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
