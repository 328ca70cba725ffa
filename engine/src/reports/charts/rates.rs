//! Pass rate by category with 95% intervals, one series per run: the picture beside a report's
//! or comparison's table. Runs differ by marker shape and fill as well as colour (filled
//! circle, hollow triangle, cross, hollow circle), so the chart reads in greyscale; each interval
//! is a whisker through its marker.

use std::error::Error;

use plotters::prelude::*;

use super::{draw_legend, draw_markers, name_at, render_svg, FONT, PALETTE};
use arbiter_domain::stats::Interval;

const WIDTH: u32 = 640;
/// Pixels per category row, plus room for the axes and legend.
const ROW_HEIGHT: u32 = 28;
const CHROME_HEIGHT: u32 = 120;

/// One run's rates: per category (same order as the chart's categories), `None` where the
/// run graded nothing in that category.
#[derive(Clone, Debug)]
pub struct RateSeries {
    pub label: String,
    pub points: Vec<Option<(f64, Option<Interval>)>>,
}

/// Renders the chart as an SVG document sized to the number of categories.
/// Never panics: on a drawing error a small SVG says so.
pub fn category_rates_svg(title: &str, categories: &[String], series: &[RateSeries]) -> String {
    let height = CHROME_HEIGHT + ROW_HEIGHT * categories.len().max(1) as u32;
    render_svg(title, |svg| draw(svg, title, categories, series, height))
}

fn draw(
    svg: &mut String,
    title: &str,
    categories: &[String],
    series: &[RateSeries],
    height: u32,
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let rows = categories.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 15))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(110)
        .build_cartesian_2d(0.0..1.0, -0.5..rows - 0.5)?;
    let names = categories.to_vec();
    chart
        .configure_mesh()
        .x_labels(6)
        .x_label_formatter(&|v: &f64| format!("{:.0}%", v * 100.0))
        .y_labels(categories.len().max(1) * 2 + 1)
        .y_label_formatter(&|v| name_at(&names, *v))
        .x_desc("pass rate (95% interval)")
        .axis_desc_style((FONT, 12))
        .label_style((FONT, 11))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;

    let count = series.len().max(1) as f64;
    for (index, run) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        // Spread a category's runs across its row, so whiskers never overlap.
        let offset = (index as f64 - (count - 1.0) / 2.0) * (0.6 / count);
        let placed: Vec<(f64, f64, Option<Interval>)> = run
            .points
            .iter()
            .enumerate()
            .filter_map(|(row, point)| {
                point.map(|(rate, interval)| (rate.clamp(0.0, 1.0), row as f64 + offset, interval))
            })
            .collect();
        let line = colour.stroke_width(2);
        chart.draw_series(placed.iter().filter_map(|(_, y, interval)| {
            interval
                .map(|i| PathElement::new([(i.lower.max(0.0), *y), (i.upper.min(1.0), *y)], line))
        }))?;
        let points: Vec<(f64, f64)> = placed.iter().map(|(x, y, _)| (*x, *y)).collect();
        draw_markers(&mut chart, index, &points, &run.label)?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_marker_and_one_whisker_per_point_and_names_on_the_axis() {
        let categories = vec!["math".to_string(), "code".to_string()];
        let interval = |l, u| Some(Interval { lower: l, upper: u });
        let series = vec![
            RateSeries {
                label: "baseline".into(),
                points: vec![
                    Some((0.7, interval(0.6, 0.8))),
                    Some((0.5, interval(0.4, 0.6))),
                ],
            },
            RateSeries {
                label: "candidate".into(),
                points: vec![Some((0.75, interval(0.65, 0.85))), None],
            },
        ];
        let svg = category_rates_svg("Pass rate by category", &categories, &series);
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "math",
            "code",
            "baseline",
            "candidate",
            "Pass rate by category",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Baseline: two filled circles plus its legend's.
        assert_eq!(svg.matches("<circle").count(), 3);
        // Candidate: one hollow triangle plus its legend's (triangles are polygons).
        assert_eq!(svg.matches("<polygon").count(), 2);

        // Category names come from uploaded datasets: they are escaped, never markup.
        let hostile = vec!["<script>x</script>".to_string()];
        let svg = category_rates_svg(
            "t",
            &hostile,
            &[RateSeries {
                label: "a".into(),
                points: vec![Some((0.5, None))],
            }],
        );
        assert!(!svg.contains("<script>") && svg.contains("&lt;script&gt;"));
    }
}
