//! Outcome mix: one horizontal bar per row (a run or a category) split into its answers' outcomes
//! (ok, truncated, empty, refused, endpoint error, timeout), as shares of the row. Every
//! segment wide enough carries its name and share as text, and the legend names them all, so
//! the chart does not rely on colour; the same counts are in the table beside it.

use std::error::Error;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{draw_legend, name_at, render_svg, FONT};

const WIDTH: u32 = 640;
const ROW_HEIGHT: u32 = 34;
const CHROME_HEIGHT: u32 = 110;
/// Segments narrower than this share get no label inside (the legend and table name them).
const LABEL_MIN_SHARE: f64 = 0.09;

/// The outcomes in `Outcome::ALL` order, as the chart names them.
pub const OUTCOME_NAMES: [&str; 6] = ["ok", "truncated", "empty", "refused", "error", "timeout"];
const OUTCOME_COLOURS: [RGBColor; 6] = [
    RGBColor(120, 170, 120),
    RGBColor(230, 170, 60),
    RGBColor(180, 180, 180),
    RGBColor(150, 110, 190),
    RGBColor(210, 80, 70),
    RGBColor(120, 80, 50),
];

/// Renders the bars; each row is a label and its counts in [`OUTCOME_NAMES`] order.
/// Never panics: on a drawing error a small SVG says so.
pub fn outcome_mix_svg(title: &str, rows: &[(String, [u64; 6])]) -> String {
    let height = CHROME_HEIGHT + ROW_HEIGHT * rows.len().max(1) as u32;
    render_svg(title, |svg| draw(svg, title, rows, height))
}

fn draw(
    svg: &mut String,
    title: &str,
    rows: &[(String, [u64; 6])],
    height: u32,
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let count = rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 15))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(120)
        .build_cartesian_2d(0.0..1.0, -0.5..count - 0.5)?;
    let names: Vec<String> = rows.iter().map(|(label, _)| label.clone()).collect();
    chart
        .configure_mesh()
        .x_labels(6)
        .x_label_formatter(&|v: &f64| format!("{:.0}%", v * 100.0))
        .y_labels(rows.len().max(1) * 2 + 1)
        .y_label_formatter(&|v| name_at(&names, *v))
        .x_desc("share of answers")
        .axis_desc_style((FONT, 12))
        .label_style((FONT, 11))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;
    let inside = TextStyle::from((FONT, 10))
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Center));
    for (outcome, name) in OUTCOME_NAMES.iter().enumerate() {
        let colour = OUTCOME_COLOURS[outcome];
        let mut segments = Vec::new();
        for (row, (_, counts)) in rows.iter().enumerate() {
            let total: u64 = counts.iter().sum();
            if total == 0 || counts[outcome] == 0 {
                continue;
            }
            let start = counts[..outcome].iter().sum::<u64>() as f64 / total as f64;
            let share = counts[outcome] as f64 / total as f64;
            segments.push((row as f64, start, share));
        }
        chart
            .draw_series(segments.iter().map(|&(y, start, share)| {
                Rectangle::new(
                    [(start, y - 0.32), (start + share, y + 0.32)],
                    colour.filled(),
                )
            }))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        chart.draw_series(
            segments
                .iter()
                .filter(|(_, _, share)| *share >= LABEL_MIN_SHARE)
                .map(|&(y, start, share)| {
                    Text::new(
                        format!("{name} {:.0}%", share * 100.0),
                        (start + share / 2.0, y),
                        inside.clone(),
                    )
                }),
        )?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_is_a_named_segment_of_its_row() {
        let rows = vec![
            ("baseline".to_string(), [80, 15, 0, 0, 5, 0]),
            ("candidate".to_string(), [100, 0, 0, 0, 0, 0]),
        ];
        let svg = outcome_mix_svg("Outcome mix", &rows);
        for text in [
            "baseline",
            "candidate",
            "ok 80%",
            "truncated 15%",
            "ok 100%",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // The 5% error share is too narrow for a label inside; the legend names it.
        assert!(!svg.contains("error 5%"));
        assert!(svg.contains("\nerror\n"));
        // Background, four segments, six legend swatches, the legend's box and border.
        assert_eq!(svg.matches("<rect").count(), 1 + 4 + 6 + 2, "{svg}");
    }
}
