//! Time charts for the HTML report: lines over UTC time, incidents as shaded
//! bands, drawn as SVG text with plotters' SVG backend.
//!
//! Pure: values in, an `<svg>` element out, so the charts are tested on
//! plain numbers. The backend writes text as SVG `<text>` elements and
//! leaves the font to the browser, which is why plotters is built without
//! its font features (they need system font libraries). The legend is not
//! drawn here: the page lists the series in HTML below each chart, in the
//! colours of [`color`], where long process names wrap instead of covering
//! the data.

use anyhow::{anyhow, Result};
use chrono::{DateTime, Utc};
use plotters::prelude::*;

/// Drawn size in CSS pixels; the page scales charts down to its width.
pub const WIDTH: u32 = 1000;
pub const HEIGHT: u32 = 240;

/// One series: values at interval starts (UTC ns).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub label: String,
    pub points: Vec<(i64, f64)>,
}

/// A stretch of time to shade, e.g. an incident, with a short label drawn
/// at its top.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub start: i64,
    pub end: i64,
    pub label: String,
}

/// What one chart shows.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Said by the SVG's `<title>`, for screen readers and tooltips.
    pub title: String,
    /// The y axis' description, with its unit: `% of all CPUs`.
    pub unit: String,
    pub lines: Vec<Line>,
    /// The y axis reaches at least this far (100 for a percentage of all
    /// CPUs), so a quiet series is not magnified into noise.
    pub y_at_least: f64,
    /// Points further apart than 1.5 steps are not joined: a gap in the
    /// data stays a gap on the chart.
    pub step_ns: i64,
}

/// Line colours, told apart also by people with the common colour
/// blindnesses (Okabe-Ito, then darker tones).
const PALETTE: [(u8, u8, u8); 10] = [
    (0, 114, 178),
    (213, 94, 0),
    (0, 158, 115),
    (204, 121, 167),
    (86, 180, 233),
    (230, 159, 0),
    (0, 0, 0),
    (120, 94, 240),
    (140, 86, 75),
    (127, 127, 127),
];

const BAND: RGBColor = RGBColor(214, 39, 40);

fn rgb(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

/// The colour of line `i`, as CSS: `#0072b2`.
pub fn color(i: usize) -> String {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// A number for an axis: `0`, `2.5`, `40`, `12k`, `3.4M`.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let text = if scaled.abs() >= 10.0 || scaled == scaled.trunc() {
        format!("{scaled:.0}")
    } else {
        format!("{scaled:.1}")
    };
    format!("{text}{suffix}")
}

fn utc(ns: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_nanos(ns)
}

/// How times on the x axis read, for a chart spanning `span_ns`.
fn time_format(span_ns: i64) -> &'static str {
    const HOUR: i64 = 3_600_000_000_000;
    if span_ns <= HOUR {
        "%H:%M:%S"
    } else if span_ns <= 24 * HOUR {
        "%H:%M"
    } else {
        "%d %b %H:%M"
    }
}

/// Splits `points` (in time order) where two neighbours are more than 1.5
/// steps apart.
fn segments(points: &[(i64, f64)], step_ns: i64) -> Vec<&[(i64, f64)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=points.len() {
        if i == points.len() || (points[i].0 - points[i - 1].0) * 2 > step_ns * 3 {
            out.push(&points[start..i]);
            start = i;
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Draws `chart` over `[from, to]` (UTC ns) with `bands` shaded: one
/// `<svg>` element, without an XML prolog, to put inside an HTML page.
pub fn svg(chart: &Chart, (from, to): (i64, i64), bands: &[Band]) -> Result<String> {
    let to = to.max(from + 1);
    let top = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(chart.y_at_least, f64::max);
    let top = if top > 0.0 { top * 1.05 } else { 1.0 };
    let plotted = |e: DrawingAreaErrorKind<_>| anyhow!("drawing the chart {:?}: {e}", chart.title);
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(plotted)?;
        let mut plot = ChartBuilder::on(&root)
            .margin_top(18)
            .margin_right(20)
            .margin_left(6)
            .x_label_area_size(42)
            .y_label_area_size(62)
            .build_cartesian_2d(utc(from)..utc(to), 0f64..top)
            .map_err(plotted)?;
        let format = time_format(to - from);
        let label_style = ("sans-serif", 13).into_font();
        plot.configure_mesh()
            .light_line_style(WHITE)
            .bold_line_style(BLACK.mix(0.12))
            .x_labels(8)
            .y_labels(6)
            .label_style(label_style.clone())
            .axis_desc_style(label_style.clone())
            .x_desc("time (UTC)")
            .y_desc(chart.unit.as_str())
            .x_label_formatter(&|t: &DateTime<Utc>| t.format(format).to_string())
            .y_label_formatter(&|v: &f64| compact(*v))
            .draw()
            .map_err(plotted)?;
        for band in bands {
            let (start, end) = (band.start.max(from), band.end.min(to));
            if start >= end {
                continue;
            }
            plot.draw_series(std::iter::once(Rectangle::new(
                [(utc(start), 0.0), (utc(end), top)],
                BAND.mix(0.14).filled(),
            )))
            .map_err(plotted)?;
            plot.draw_series(std::iter::once(Text::new(
                band.label.clone(),
                (utc(start), top),
                ("sans-serif", 13).into_font().color(&BAND),
            )))
            .map_err(plotted)?;
        }
        for (i, line) in chart.lines.iter().enumerate() {
            let style = rgb(i).stroke_width(2);
            for segment in segments(&line.points, chart.step_ns) {
                if let [(t, v)] = segment {
                    plot.draw_series(std::iter::once(Circle::new(
                        (utc(*t), *v),
                        2,
                        style.filled(),
                    )))
                    .map_err(plotted)?;
                } else {
                    plot.draw_series(LineSeries::new(
                        segment.iter().map(|(t, v)| (utc(*t), *v)),
                        style,
                    ))
                    .map_err(plotted)?;
                }
            }
        }
        root.present().map_err(plotted)?;
    }
    Ok(titled(&text, &chart.title))
}

/// Gives the `<svg>` element a `<title>` and the image role, so a screen
/// reader says what the chart is.
fn titled(svg: &str, title: &str) -> String {
    let title = super::escape(title);
    match svg.find('>') {
        Some(end) if svg.starts_with("<svg") => format!(
            "{} role=\"img\" aria-label=\"{title}\"><title>{title}</title>{}",
            &svg[..end],
            &svg[end + 1..]
        ),
        _ => svg.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    const T0: i64 = 1_700_000_000 * S;

    #[test]
    fn numbers_on_axes_are_short() {
        let cases = [
            (0.0, "0"),
            (2.5, "2.5"),
            (40.0, "40"),
            (12_345.0, "12k"),
            (1_500.0, "1.5k"),
            (3_400_000.0, "3.4M"),
            (2e9, "2G"),
        ];
        for (v, text) in cases {
            assert_eq!(compact(v), text, "{v}");
        }
    }

    #[test]
    fn gaps_split_lines() {
        let points = [
            (0, 1.0),
            (10, 2.0),
            (20, 3.0),
            (50, 4.0),
            (60, 5.0),
            (100, 6.0),
        ];
        let parts: Vec<usize> = segments(&points, 10).iter().map(|s| s.len()).collect();
        assert_eq!(parts, [3, 2, 1]);
        assert!(segments(&[], 10).is_empty());
    }

    #[test]
    fn a_chart_is_one_svg_element_with_its_title_axes_and_bands() {
        let chart = Chart {
            title: "CPU <busy> & idle".into(),
            unit: "% of all CPUs".into(),
            lines: vec![Line {
                label: "busy".into(),
                points: (0..60).map(|k| (T0 + k * S, (k % 7) as f64)).collect(),
            }],
            y_at_least: 100.0,
            step_ns: S,
        };
        let band = Band {
            start: T0 + 20 * S,
            end: T0 + 30 * S,
            label: "incident 1".into(),
        };
        let svg = svg(&chart, (T0, T0 + 60 * S), &[band]).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert_eq!(svg.matches("<svg").count(), 1);
        assert!(
            svg.contains("<title>CPU &lt;busy&gt; &amp; idle</title>"),
            "{svg}"
        );
        assert!(svg.contains("% of all CPUs"), "{svg}");
        assert!(svg.contains("time (UTC)"), "{svg}");
        assert!(svg.contains("22:13:20"), "the first tick, in UTC: {svg}");
        assert!(
            svg.contains(">\nincident 1\n<") || svg.contains(">incident 1<"),
            "{svg}"
        );
        assert!(svg.contains("<polyline"), "{svg}");
        // The y axis reaches 100 % although the data stay below 7.
        assert!(svg.contains(">\n100\n<") || svg.contains(">100<"), "{svg}");
    }

    #[test]
    fn an_empty_or_flat_chart_still_draws() {
        let chart = Chart {
            title: "nothing".into(),
            unit: "events".into(),
            lines: Vec::new(),
            y_at_least: 0.0,
            step_ns: S,
        };
        let svg = svg(&chart, (T0, T0), &[]).unwrap();
        assert!(svg.contains("<svg"), "{svg}");
    }
}
