//! Figures over time: queue depth and claimed identities on the health page (against hours
//! before now), a run's load on its page (against time since it started). Odd series are
//! solid and even ones dashed, so neighbours read apart without colour.

use std::error::Error;

use plotters::prelude::*;

use super::{draw_legend, render_svg, FONT, PALETTE};

const WIDTH: u32 = 720;
const HEIGHT: u32 = 300;

/// One line: (time in Unix milliseconds, value), oldest first.
#[derive(Clone, Debug)]
pub struct TimeSeries {
    pub label: String,
    pub points: Vec<(i64, f64)>,
}

/// The chart's time axis: times are drawn as `(at - origin) / unit_ms` over `range`.
#[derive(Clone, Debug)]
pub struct TimeAxis {
    origin: i64,
    unit_ms: f64,
    range: (f64, f64),
    desc: &'static str,
    suffix: &'static str,
    /// What the chart says when no series has a point.
    empty_note: &'static str,
}

impl TimeAxis {
    /// The `hours` before `now`, in hours.
    pub fn hours_before(now: i64, hours: f64) -> TimeAxis {
        TimeAxis {
            origin: now,
            unit_ms: 3_600_000.0,
            range: (-hours, 0.0),
            desc: "hours before now",
            suffix: " h",
            empty_note: "no samples yet: the monitor records one every round",
        }
    }

    /// From `start` to `end`, in seconds, minutes or hours since `start` by the span.
    pub fn since(start: i64, end: i64) -> TimeAxis {
        let span_ms = (end - start).max(1) as f64;
        let (unit_ms, desc, suffix) = if span_ms <= 180_000.0 {
            (1_000.0, "seconds since the run started", " s")
        } else if span_ms <= 3.0 * 3_600_000.0 {
            (60_000.0, "minutes since the run started", " min")
        } else {
            (3_600_000.0, "hours since the run started", " h")
        };
        TimeAxis {
            origin: start,
            unit_ms,
            range: (0.0, span_ms / unit_ms),
            desc,
            suffix,
            empty_note: "no samples: workers sample a run's load every two seconds",
        }
    }

    fn x(&self, at: i64) -> f64 {
        (at - self.origin) as f64 / self.unit_ms
    }
}

/// Renders `series` along `axis`. Never panics.
pub fn time_series_svg(
    title: &str,
    y_desc: &str,
    axis: &TimeAxis,
    series: &[TimeSeries],
) -> String {
    render_svg(title, |svg| draw(svg, title, y_desc, axis, series))
}

fn draw(
    svg: &mut String,
    title: &str,
    y_desc: &str,
    axis: &TimeAxis,
    series: &[TimeSeries],
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (from, to) = axis.range;
    let highest = series
        .iter()
        .flat_map(|line| line.points.iter().map(|(_, value)| *value))
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 15))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(from..to, 0.0..highest * 1.1)?;
    chart
        .configure_mesh()
        .x_labels(9)
        .x_label_formatter(&|v| format!("{v:.0}{}", axis.suffix))
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_desc(axis.desc)
        .y_desc(y_desc)
        .axis_desc_style((FONT, 12))
        .label_style((FONT, 11))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    if series.iter().all(|line| line.points.is_empty()) {
        chart.draw_series(std::iter::once(Text::new(
            axis.empty_note,
            (from + (to - from) * 0.1, highest * 0.5),
            (FONT, 13),
        )))?;
    }
    for (index, line) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        let style = colour.stroke_width(2);
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|(at, value)| (axis.x(*at), *value))
            .filter(|(x, _)| *x >= from && *x <= to)
            .collect();
        let label = line.label.clone();
        if index % 2 == 0 {
            chart
                .draw_series(LineSeries::new(points, style))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
        } else {
            chart
                .draw_series(DashedLineSeries::new(points, 6, 4, style))?
                .label(label)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new([(0, 0), (6, 0)], style)
                        + PathElement::new([(10, 0), (16, 0)], style)
                });
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_each_series_with_its_legend_and_says_when_empty() {
        let now = 1_800_000_000_000;
        let queue = TimeSeries {
            label: "queued".into(),
            points: (0..60)
                .map(|m| (now - (59 - m) * 60_000, (m * 10) as f64))
                .collect(),
        };
        let claimed = TimeSeries {
            label: "claimed".into(),
            points: (0..60).map(|m| (now - (59 - m) * 60_000, 64.0)).collect(),
        };
        let axis = TimeAxis::hours_before(now, 24.0);
        let svg = time_series_svg("Queue", "identities", &axis, &[queue, claimed]);
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("queued") && svg.contains("claimed"));
        assert!(
            svg.contains("stroke-dasharray")
                || svg.matches("<polyline").count() >= 1
                || svg.matches("<path").count() >= 1
        );
        let empty = time_series_svg("Queue", "identities", &axis, &[]);
        assert!(empty.contains("no samples yet"));
    }

    #[test]
    fn a_run_axis_counts_from_its_start_in_a_unit_fitting_its_span() {
        let start = 1_800_000_000_000;
        let short = TimeAxis::since(start, start + 90_000);
        assert_eq!((short.suffix, short.x(start + 30_000)), (" s", 30.0));
        let long = TimeAxis::since(start, start + 3_600_000);
        assert_eq!((long.suffix, long.x(start + 1_800_000)), (" min", 30.0));
        let longest = TimeAxis::since(start, start + 10 * 3_600_000);
        assert_eq!(longest.suffix, " h");
        let svg = time_series_svg("Load", "identities", &short, &[]);
        assert!(svg.contains("seconds since the run started"), "{svg}");
        assert!(svg.contains("workers sample"));
    }
}
