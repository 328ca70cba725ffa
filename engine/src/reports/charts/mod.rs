//! Server-side SVG charts.
//!
//! Charts are rendered to an SVG string with plotters' SVG backend only, so
//! no font files, system font libraries or bitmap encoders are needed: text
//! is emitted as SVG `<text>` elements and the viewer's browser renders it.
//! (Plotters lays text out with a rough width estimate in that mode, which is
//! why labels are kept short and given room.)

pub mod latency;
pub mod outcomes;
pub mod rates;
pub mod series;
pub mod trend;

use std::error::Error;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use arbiter_domain::grading::calibration::ReliabilityBin;

/// Chart size in pixels.
const WIDTH: u32 = 480;
const HEIGHT: u32 = 360;

/// Confidence axis: a binary verdict's confidence is never below 0.5.
const X_RANGE: (f64, f64) = (0.5, 1.0);
/// Accuracy axis. The full 0–1 range rather than 0.4–1.0, because a bin
/// where the judge is right less than half the time (worse than a coin flip
/// despite claiming otherwise) is the most important thing this chart can
/// show, and a truncated axis would hide or clip it. The empty lower half
/// that a well-behaved judge leaves also holds the legend.
const Y_RANGE: (f64, f64) = (0.0, 1.0);

/// Fixed marker radius: markers all have the same size so that size never
/// has to be decoded; the number of items per bin is written next to each
/// marker as text instead.
const MARKER_RADIUS: i32 = 4;

/// Reference line: grey *and* dashed, so it stays distinct in greyscale or
/// for readers who cannot tell the colours apart.
const REFERENCE_COLOUR: RGBColor = RGBColor(140, 140, 140);
/// Judge series: dark blue, solid, with circle markers.
const JUDGE_COLOUR: RGBColor = RGBColor(31, 78, 160);

const FONT: &str = "sans-serif";

/// One bin as drawn: a position and the number of items behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PlottedPoint {
    confidence: f64,
    accuracy: f64,
    count: u64,
}

/// Renders a reliability diagram for `bins` as a 480x360 SVG document.
///
/// Each non-empty bin becomes one circle marker at (mean confidence,
/// accuracy), labelled with its item count and joined by a solid line; the
/// dashed grey diagonal shows perfect calibration. Points below the diagonal
/// mean the judge is over-confident there. Empty bins are skipped rather
/// than drawn at zero, so missing data never looks like a bad judge.
///
/// When there is at least one point, the legend also draws one circle (its
/// sample of the judge series), so the SVG holds one `<circle>` per
/// non-empty bin plus one; with no points it holds none and says so in text.
///
/// Never panics: if plotters reports a drawing error, a small SVG carrying
/// the title and the error is returned instead.
pub fn reliability_diagram_svg(bins: &[ReliabilityBin], title: &str) -> String {
    let points = plotted_points(bins);
    render_svg(title, |svg| draw_reliability_diagram(svg, &points, title))
}

/// Runs `draw` into a fresh SVG document; on a drawing error, a small SVG that says so (so no
/// chart ever panics or comes back empty).
fn render_svg(title: &str, draw: impl FnOnce(&mut String) -> Result<(), Box<dyn Error>>) -> String {
    let mut svg = String::new();
    match draw(&mut svg) {
        Ok(()) => svg,
        Err(error) => fallback_svg(title, &error.to_string()),
    }
}

/// The legend box every chart draws, at `position`.
fn draw_legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Result<(), Box<dyn Error>> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, 11))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(200, 200, 200))
        .draw()?;
    Ok(())
}

/// The non-empty bins, with values kept inside the axes. Bins with a
/// non-finite statistic are skipped: they cannot be placed honestly.
fn plotted_points(bins: &[ReliabilityBin]) -> Vec<PlottedPoint> {
    bins.iter()
        .filter(|bin| bin.count > 0)
        .filter_map(|bin| {
            let confidence = bin.mean_confidence.filter(|v| v.is_finite())?;
            let accuracy = bin.accuracy.filter(|v| v.is_finite())?;
            Some(PlottedPoint {
                confidence: confidence.clamp(X_RANGE.0, X_RANGE.1),
                accuracy: accuracy.clamp(Y_RANGE.0, Y_RANGE.1),
                count: bin.count,
            })
        })
        .collect()
}

/// Draws the whole chart into `svg`. The backend borrows `svg` and writes
/// the document when the drawing area is presented and dropped, which
/// happens before this function returns.
fn draw_reliability_diagram(
    svg: &mut String,
    points: &[PlottedPoint],
    title: &str,
) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 16))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(X_RANGE.0..X_RANGE.1, Y_RANGE.0..Y_RANGE.1)?;

    chart
        .configure_mesh()
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|v| format!("{v:.1}"))
        .y_label_formatter(&|v| format!("{v:.1}"))
        .x_desc("judge confidence")
        .y_desc("accuracy against human labels")
        .axis_desc_style((FONT, 13))
        .label_style((FONT, 11))
        .light_line_style(WHITE)
        .bold_line_style(RGBColor(230, 230, 230))
        .draw()?;

    draw_reference_line(&mut chart)?;
    if points.is_empty() {
        draw_no_data_note(&mut chart)?;
    } else {
        draw_judge_series(&mut chart, points)?;
    }

    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present()?;
    Ok(())
}

/// The chart type every drawing helper works on: linear f64 axes on SVG.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The label of an axis whose rows or columns sit at 0, 1, 2, …: the name at a whole
/// position, nothing between positions (where plotters also asks for labels).
fn name_at(names: &[String], position: f64) -> String {
    let index = position.round();
    if (position - index).abs() < 1e-6 && index >= 0.0 {
        names.get(index as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

/// Series colours. Series also differ by marker (see [`draw_markers`]), never by colour alone.
const PALETTE: [RGBColor; 4] = [
    RGBColor(31, 78, 160),
    RGBColor(196, 90, 20),
    RGBColor(40, 120, 60),
    RGBColor(120, 60, 150),
];
const SERIES_MARKER_SIZE: i32 = 5;

/// Series `index`'s markers at `points`, with its legend entry: filled circle, hollow
/// triangle, cross, hollow circle in turn, so series read apart in greyscale.
fn draw_markers<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    index: usize,
    points: &[(f64, f64)],
    label: &str,
) -> Result<(), Box<dyn Error>> {
    let colour = PALETTE[index % PALETTE.len()];
    let hollow = colour.stroke_width(2);
    let filled = colour.filled();
    let size = SERIES_MARKER_SIZE;
    let points = points.iter().copied();
    let label = label.to_string();
    match index % 4 {
        0 => {
            chart
                .draw_series(points.map(|c| Circle::new(c, size, filled)))?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 8, y), size, filled));
        }
        1 => {
            chart
                .draw_series(points.map(|c| TriangleMarker::new(c, size + 2, hollow)))?
                .label(label)
                .legend(move |(x, y)| TriangleMarker::new((x + 8, y), size + 2, hollow));
        }
        2 => {
            chart
                .draw_series(points.map(|c| Cross::new(c, size, hollow)))?
                .label(label)
                .legend(move |(x, y)| Cross::new((x + 8, y), size, hollow));
        }
        _ => {
            chart
                .draw_series(points.map(|c| Circle::new(c, size, hollow)))?
                .label(label)
                .legend(move |(x, y)| Circle::new((x + 8, y), size, hollow));
        }
    }
    Ok(())
}

/// The diagonal where accuracy equals confidence, with its legend entry.
fn draw_reference_line<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), Box<dyn Error>> {
    let style = REFERENCE_COLOUR.stroke_width(1);
    chart
        .draw_series(DashedLineSeries::new(
            [(X_RANGE.0, X_RANGE.0), (X_RANGE.1, X_RANGE.1)],
            6,
            4,
            style,
        ))?
        .label("perfect calibration")
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new([(0, 0), (6, 0)], style)
                + PathElement::new([(10, 0), (16, 0)], style)
        });
    Ok(())
}

/// The judge's bins: a solid line through one circle per bin, each circle
/// labelled with its item count.
fn draw_judge_series<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    points: &[PlottedPoint],
) -> Result<(), Box<dyn Error>> {
    let line = JUDGE_COLOUR.stroke_width(2);
    let marker = JUDGE_COLOUR.filled();
    let coords = points.iter().map(|p| (p.confidence, p.accuracy));

    chart
        .draw_series(LineSeries::new(coords.clone(), line))?
        .label("judge, one point per confidence bin")
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new([(0, 0), (16, 0)], line)
                + Circle::new((8, 0), MARKER_RADIUS, marker)
        });
    chart.draw_series(coords.map(|coord| Circle::new(coord, MARKER_RADIUS, marker)))?;

    let count_style = TextStyle::from((FONT, 10))
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(points.iter().map(|p| {
        EmptyElement::at((p.confidence, p.accuracy))
            + Text::new(
                format!("n={}", p.count),
                (0, -2 * MARKER_RADIUS),
                count_style.clone(),
            )
    }))?;
    Ok(())
}

/// Says so in the plot when there is nothing to draw, so an empty chart is
/// not mistaken for a rendering failure. Placed below the diagonal, in the
/// part of the plot a judge's points rarely reach.
fn draw_no_data_note<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), Box<dyn Error>> {
    let style = TextStyle::from((FONT, 13))
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Center));
    let position = ((X_RANGE.0 + X_RANGE.1) / 2.0, 0.35);
    chart.draw_series(std::iter::once(Text::new(
        "no labelled items yet",
        position,
        style,
    )))?;
    Ok(())
}

/// A minimal SVG used only if plotters fails, so callers always get a
/// well-formed document that says what went wrong.
fn fallback_svg(title: &str, error: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\"><text x=\"10\" y=\"24\" font-family=\"{FONT}\">{}</text>\
         <text x=\"10\" y=\"48\" font-family=\"{FONT}\">chart could not be drawn: {}</text></svg>",
        escape_xml(title),
        escape_xml(error)
    )
}

/// Escapes text for use inside an SVG element or attribute.
fn escape_xml(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '&' => escaped.push_str("&amp;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            _ => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbiter_domain::grading::calibration::{reliability_bins, LabelledJudgement};

    fn judgement(confidence: f64, correct: bool) -> LabelledJudgement {
        LabelledJudgement {
            confidence,
            judge_pass: true,
            human_pass: correct,
            weight: 1.0,
        }
    }

    /// Items in 4 of 10 bins, deliberately over-confident at the top.
    fn sample_bins() -> Vec<ReliabilityBin> {
        let mut items = Vec::new();
        for (confidence, right, wrong) in
            [(0.52, 5, 5), (0.68, 7, 3), (0.83, 30, 10), (0.97, 60, 40)]
        {
            items.extend((0..right).map(|_| judgement(confidence, true)));
            items.extend((0..wrong).map(|_| judgement(confidence, false)));
        }
        reliability_bins(&items, 10)
    }

    #[test]
    fn renders_an_svg_with_title_axes_and_one_marker_per_bin() {
        let bins = sample_bins();
        let non_empty = bins.iter().filter(|b| b.count > 0).count();
        assert_eq!(non_empty, 4);

        let svg = reliability_diagram_svg(&bins, "Judge calibration: gpt-judge-v2");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Judge calibration: gpt-judge-v2"));
        assert!(svg.contains("judge confidence"));
        assert!(svg.contains("accuracy against human labels"));
        assert!(svg.contains("perfect calibration"));
        assert!(svg.contains("n=100"));
        // One circle per non-empty bin, plus the legend's sample circle.
        assert_eq!(svg.matches("<circle").count(), non_empty + 1);
        assert!(svg.contains("width=\"480\"") && svg.contains("height=\"360\""));
    }

    /// The title holds a judge's name (user input) and the page inserts this SVG as HTML: a
    /// renderer that stopped escaping must fail here, not in a browser.
    #[test]
    fn title_text_is_escaped() {
        let svg = reliability_diagram_svg(&sample_bins(), "A & B <v2> \"q\" 'a'");
        assert!(svg.contains("A &amp; B &lt;v2&gt;"), "{svg}");
        assert!(!svg.contains("<v2>") && !svg.contains("\"q\""));
    }

    #[test]
    fn empty_input_still_renders_and_says_so() {
        let svg = reliability_diagram_svg(&reliability_bins(&[], 10), "Nothing yet");
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("no labelled items yet"));
        // No judge series, so neither markers nor its legend sample.
        assert_eq!(svg.matches("<circle").count(), 0);
        assert!(svg.contains("perfect calibration"));
    }

    #[test]
    fn non_finite_and_out_of_range_bins_are_handled() {
        let bins = [
            ReliabilityBin {
                lower: 0.5,
                upper: 0.75,
                count: 3,
                mean_confidence: Some(f64::NAN),
                accuracy: Some(0.5),
            },
            ReliabilityBin {
                lower: 0.75,
                upper: 1.0,
                count: 3,
                mean_confidence: Some(1.4),
                accuracy: Some(-0.2),
            },
        ];
        let points = plotted_points(&bins);
        assert_eq!(
            points,
            vec![PlottedPoint {
                confidence: 1.0,
                accuracy: 0.0,
                count: 3
            }]
        );
        let svg = reliability_diagram_svg(&bins, "odd input");
        assert_eq!(svg.matches("<circle").count(), 2);
    }

    #[test]
    fn fallback_is_well_formed_and_escaped() {
        let svg = fallback_svg("x<y", "bad & worse");
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("x&lt;y") && svg.contains("bad &amp; worse"));
    }
}
