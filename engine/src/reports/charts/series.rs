//! Figures over time (queue depth, claimed identities) for the health page: one line per
//! series against hours before now. The first series is solid and the second dashed, so they
//! read apart without colour; the latest value of each is in the page's table.

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

/// Renders `series` over the `hours` before `now`. Never panics.
pub fn time_series_svg(
    title: &str,
    y_desc: &str,
    now: i64,
    hours: f64,
    series: &[TimeSeries],
) -> String {
    render_svg(title, |svg| draw(svg, title, y_desc, now, hours, series))
}

fn draw(
    svg: &mut String,
    title: &str,
    y_desc: &str,
    now: i64,
    hours: f64,
    series: &[TimeSeries],
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let hours_ago = |at: i64| -((now - at) as f64 / 3_600_000.0);
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
        .build_cartesian_2d(-hours..0.0, 0.0..highest * 1.1)?;
    chart
        .configure_mesh()
        .x_labels(9)
        .x_label_formatter(&|v| format!("{:.0} h", v))
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("hours before now")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 12))
        .label_style((FONT, 11))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    if series.iter().all(|line| line.points.is_empty()) {
        chart.draw_series(std::iter::once(Text::new(
            "no samples yet: the monitor records one every round",
            (-hours * 0.8, highest * 0.5),
            (FONT, 13),
        )))?;
    }
    for (index, line) in series.iter().enumerate() {
        let colour = PALETTE[index % PALETTE.len()];
        let style = colour.stroke_width(2);
        let points: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|(at, value)| (hours_ago(*at), *value))
            .filter(|(x, _)| *x >= -hours)
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
        let svg = time_series_svg("Queue", "identities", now, 24.0, &[queue, claimed]);
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("queued") && svg.contains("claimed"));
        assert!(
            svg.contains("stroke-dasharray")
                || svg.matches("<polyline").count() >= 1
                || svg.matches("<path").count() >= 1
        );
        let empty = time_series_svg("Queue", "identities", now, 24.0, &[]);
        assert!(empty.contains("no samples yet"));
    }
}
