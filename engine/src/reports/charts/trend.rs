//! Pass rate along a training run: one line per series (the whole run, then chosen
//! categories) through its checkpoints, with the 95% interval as a shaded band around it.
//! Series differ by marker as well as colour; points the comparison flagged as regressions
//! carry a "▼" above them, so the finding does not depend on colour either.

use std::error::Error;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{draw_legend, draw_markers, name_at, render_svg, FONT, PALETTE};
use arbiter_domain::stats::Interval;

const WIDTH: u32 = 720;
const HEIGHT: u32 = 380;

/// One series: per checkpoint (the chart's x order), its rate and interval, or `None` where
/// it graded nothing.
#[derive(Clone, Debug)]
pub struct TrendSeries {
    pub label: String,
    pub points: Vec<Option<(f64, Option<Interval>)>>,
    /// Checkpoint indices where this series regressed against its baseline.
    pub regressions: Vec<usize>,
}

/// Renders the trend; `checkpoints` label the x axis (a step or a name each).
/// Never panics: on a drawing error a small SVG says so.
pub fn trend_svg(title: &str, checkpoints: &[String], series: &[TrendSeries]) -> String {
    render_svg(title, |svg| draw(svg, title, checkpoints, series))
}

fn draw(
    svg: &mut String,
    title: &str,
    checkpoints: &[String],
    series: &[TrendSeries],
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let last = checkpoints.len().saturating_sub(1).max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(48)
        .build_cartesian_2d(-0.3..last + 0.3, 0.0..1.05)?;
    let names = checkpoints.to_vec();
    chart
        .configure_mesh()
        .x_labels(checkpoints.len().clamp(1, 12) * 2 + 1)
        .x_label_formatter(&|v| name_at(&names, *v))
        .y_labels(6)
        .y_label_formatter(&|v: &f64| format!("{:.0}%", v * 100.0))
        .x_desc("checkpoint (training order)")
        .y_desc("pass rate, 95% band")
        .axis_desc_style((FONT, 12))
        .label_style((FONT, 11))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;

    for (index, line) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        // Bands: one polygon per run of consecutive points that have intervals.
        for segment in interval_segments(&line.points) {
            let mut outline: Vec<(f64, f64)> = segment
                .iter()
                .map(|(x, interval)| (*x, interval.upper.min(1.0)))
                .collect();
            outline.extend(
                segment
                    .iter()
                    .rev()
                    .map(|(x, interval)| (*x, interval.lower.max(0.0))),
            );
            chart.draw_series(std::iter::once(Polygon::new(
                outline,
                colour.mix(0.12).filled(),
            )))?;
        }
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .enumerate()
            .filter_map(|(x, point)| point.map(|(rate, _)| (x as f64, rate.clamp(0.0, 1.0))))
            .collect();
        chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?;
        draw_markers(&mut chart, index, &points, &line.label)?;
        let flag = TextStyle::from((FONT, 13))
            .color(&colour)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart.draw_series(line.regressions.iter().filter_map(|&x| {
            let (rate, _) = line.points.get(x).copied().flatten()?;
            Some(
                EmptyElement::at((x as f64, rate.clamp(0.0, 1.0)))
                    + Text::new("▼", (0, -8), flag.clone()),
            )
        }))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}

/// Consecutive points with intervals, as (x, interval) runs of two or more.
fn interval_segments(points: &[Option<(f64, Option<Interval>)>]) -> Vec<Vec<(f64, Interval)>> {
    let mut segments = Vec::new();
    let mut current: Vec<(f64, Interval)> = Vec::new();
    for (x, point) in points.iter().enumerate() {
        match point.and_then(|(_, interval)| interval) {
            Some(interval) => current.push((x as f64, interval)),
            None => {
                if current.len() > 1 {
                    segments.push(std::mem::take(&mut current));
                }
                current.clear();
            }
        }
    }
    if current.len() > 1 {
        segments.push(current);
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(lower: f64, upper: f64) -> Option<Interval> {
        Some(Interval { lower, upper })
    }

    #[test]
    fn bands_span_consecutive_points_with_intervals() {
        let points = vec![
            Some((0.5, band(0.4, 0.6))),
            Some((0.6, band(0.5, 0.7))),
            None,
            Some((0.7, band(0.6, 0.8))),
            Some((0.7, None)),
        ];
        let segments = interval_segments(&points);
        assert_eq!(segments.len(), 1, "a lone interval makes no band");
        assert_eq!(segments[0].len(), 2);
    }

    #[test]
    fn lines_bands_markers_and_regression_flags_are_drawn() {
        let series = vec![
            TrendSeries {
                label: "all".into(),
                points: vec![
                    Some((0.8, band(0.7, 0.9))),
                    Some((0.82, band(0.72, 0.9))),
                    Some((0.6, band(0.5, 0.7))),
                ],
                regressions: vec![2],
            },
            TrendSeries {
                label: "math".into(),
                points: vec![
                    Some((0.5, band(0.3, 0.7))),
                    None,
                    Some((0.4, band(0.2, 0.6))),
                ],
                regressions: vec![],
            },
        ];
        let labels: Vec<String> = ["step 100", "step 200", "step 300"]
            .map(String::from)
            .to_vec();
        let svg = trend_svg("Pass rate over training", &labels, &series);
        for text in [
            "step 100",
            "step 300",
            "all",
            "math",
            "▼",
            "Pass rate over training",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // One band (all three points of "all"); math's points are not consecutive.
        assert_eq!(svg.matches("opacity=\"0.12\"").count(), 1, "{svg}");
        // "all": three filled circles and its legend's.
        assert_eq!(svg.matches("<circle").count(), 4);
        assert_eq!(svg.matches('▼').count(), 1);
    }
}
