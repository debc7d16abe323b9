//! Drawing [`Chart`]s with plotters, as SVG (text, the default) or PNG (bytes).
//!
//! Text is laid out with DejaVu Sans, bundled in the crate (`fonts/`, Bitstream Vera
//! licence) and registered with plotters' `ab_glyph` support, so plots render identically
//! on machines without system fonts. Every value is checked before drawing: a non-finite
//! value, or a non-positive one on a logarithmic axis, is an error naming the chart and the
//! series.

use std::ops::Range;
use std::sync::OnceLock;

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::Error;
use crate::chart::{BarChart, Chart, Mark, Scale, XyChart};

/// Width of every plot, pixels.
pub const WIDTH: u32 = 960;
/// Height of every plot, pixels.
pub const HEIGHT: u32 = 560;
/// Font family the bundled font is registered under.
const FAMILY: &str = "sans-serif";
/// DejaVu Sans 2.37 (Debian `fonts-dejavu-core`); licence in `fonts/LICENSE-DejaVu.txt`.
const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
/// Largest marker radius of sized points, pixels.
const MAX_MARKER: f64 = 14.0;
/// Smallest marker radius, pixels.
const MIN_MARKER: f64 = 3.0;

/// Tableau 10: distinguishable colours, also in print.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Registers the bundled font once per process.
fn font() -> Result<(), Error> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Error::Plot {
            chart: String::new(),
            message: "the bundled font could not be loaded".into(),
        })
    }
}

/// The chart as an SVG document.
pub fn svg(chart: &Chart) -> Result<String, Error> {
    font()?;
    check(chart)?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart)?;
    }
    Ok(out)
}

/// The chart as a PNG image (8-bit RGB).
pub fn png(chart: &Chart) -> Result<Vec<u8>, Error> {
    font()?;
    check(chart)?;
    let mut pixels = vec![0u8; WIDTH as usize * HEIGHT as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, chart)?;
    }
    let mut out = Vec::new();
    let mut encoder = ::png::Encoder::new(&mut out, WIDTH, HEIGHT);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    let err = |e: ::png::EncodingError| Error::Plot {
        chart: chart.title().to_owned(),
        message: format!("encoding PNG: {e}"),
    };
    let mut writer = encoder.write_header().map_err(err)?;
    writer.write_image_data(&pixels).map_err(err)?;
    writer.finish().map_err(err)?;
    Ok(out)
}

/// Refuses values plotters cannot place.
fn check(chart: &Chart) -> Result<(), Error> {
    let fail = |series: &str, message: String| Error::Plot {
        chart: chart.title().to_owned(),
        message: format!("series `{series}`: {message}"),
    };
    let positive = |series: &str, v: f64, scale: Scale, axis: &str| {
        if !v.is_finite() {
            return Err(fail(series, format!("{axis} value {v} is not finite")));
        }
        if scale == Scale::Log && v <= 0.0 {
            return Err(fail(
                series,
                format!("{axis} value {v} cannot be shown on a logarithmic axis"),
            ));
        }
        Ok(())
    };
    match chart {
        Chart::Xy(c) => {
            if c.series.iter().all(|s| s.points.is_empty()) {
                return Err(fail("(all)", "no points to plot".into()));
            }
            for s in &c.series {
                for &(x, y) in &s.points {
                    positive(&s.name, x, c.x.scale, "x")?;
                    positive(&s.name, y, c.y.scale, "y")?;
                }
                if let Some(sizes) = &s.sizes
                    && (sizes.len() != s.points.len()
                        || sizes.iter().any(|v| !v.is_finite() || *v < 0.0))
                {
                    return Err(fail(
                        &s.name,
                        "needs one non-negative size per point".into(),
                    ));
                }
            }
        }
        Chart::Bar(c) => {
            if c.categories.is_empty() {
                return Err(fail("(all)", "no categories to plot".into()));
            }
            if c.stacked && c.y.scale == Scale::Log {
                return Err(fail("(all)", "stacked bars need a linear axis".into()));
            }
            for s in &c.series {
                if s.values.len() != c.categories.len() {
                    return Err(fail(
                        &s.name,
                        format!(
                            "has {} values for {} categories",
                            s.values.len(),
                            c.categories.len()
                        ),
                    ));
                }
                for &v in &s.values {
                    if !v.is_finite() || v < 0.0 {
                        return Err(fail(
                            &s.name,
                            format!("bar value {v} is not a finite non-negative number"),
                        ));
                    }
                }
            }
            for l in &c.levels {
                positive(&l.name, l.value, c.y.scale, "y")?;
            }
        }
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), Error> {
    let err = |e: &dyn std::fmt::Display| Error::Plot {
        chart: chart.title().to_owned(),
        message: e.to_string(),
    };
    root.fill(&WHITE).map_err(|e| err(&e))?;
    match chart {
        Chart::Xy(c) => xy(root, c),
        Chart::Bar(c) => bars(root, c),
    }
    .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// A tick label: three significant digits with an SI prefix.
pub fn tick(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    const PREFIXES: [(f64, &str); 10] = [
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
        (1e-3, "m"),
        (1e-6, "µ"),
        (1e-9, "n"),
        (1e-12, "p"),
    ];
    let a = v.abs();
    let (scale, prefix) = PREFIXES
        .iter()
        .copied()
        .find(|&(s, _)| a >= s * 0.9995)
        .unwrap_or((1e-12, "p"));
    let m = v / scale;
    let text = if m.abs() >= 100.0 {
        format!("{m:.0}")
    } else if m.abs() >= 10.0 {
        format!("{m:.1}")
    } else {
        format!("{m:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{prefix}")
}

/// The span of `values` on an axis, padded: 5 % each side on linear axes (including zero
/// when `from_zero`), a quarter decade on log axes.
fn span(values: impl Iterator<Item = f64>, scale: Scale, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    match scale {
        Scale::Log => {
            let (l, h) = (lo.log10() - 0.25, hi.log10() + 0.25);
            10f64.powf(l)..10f64.powf(h)
        }
        Scale::Linear => {
            if from_zero {
                lo = lo.min(0.0);
            }
            if hi - lo <= 0.0 {
                hi = lo + lo.abs().max(1.0);
            }
            let pad = 0.05 * (hi - lo);
            let lo = if from_zero && lo >= 0.0 { lo } else { lo - pad };
            lo..hi + pad
        }
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn xy<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &XyChart) -> DrawResult<DB> {
    let points = || c.series.iter().flat_map(|s| s.points.iter());
    let x = span(points().map(|p| p.0), c.x.scale, false);
    let y = span(points().map(|p| p.1), c.y.scale, c.y.scale == Scale::Linear);
    match (c.x.scale, c.y.scale) {
        (Scale::Linear, Scale::Linear) => xy_in(root, c, x, y),
        (Scale::Log, Scale::Linear) => xy_in(root, c, log(x, 1000.0), y),
        (Scale::Linear, Scale::Log) => xy_in(root, c, x, log(y, 10.0)),
        (Scale::Log, Scale::Log) => xy_in(root, c, log(x, 1000.0), log(y, 10.0)),
    }
}

/// A logarithmic axis over `range`: ticks at powers of ten, or of two where the range spans
/// less than `ratio` (so that an axis of 4 to 64 nodes is labelled at every power of two;
/// horizontal axes take powers of two up to three decades, vertical ones up to one).
fn log(range: Range<f64>, ratio: f64) -> LogCoord<f64> {
    let base = if range.end / range.start < ratio {
        2.0
    } else {
        10.0
    };
    range.log_scale().base(base).into()
}

fn xy_in<DB, X, Y>(root: &DrawingArea<DB, Shift>, c: &XyChart, x: X, y: Y) -> DrawResult<DB>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(&c.x.label)
        .y_desc(&c.y.label)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    let base = match c.y.scale {
        Scale::Linear => 0.0,
        Scale::Log => f64::MIN_POSITIVE,
    };
    let mut below: Option<&[(f64, f64)]> = None;
    for s in &c.series {
        let col = color(s.color);
        let legend = |style: ShapeStyle, mark: Mark| {
            move |(px, py): (i32, i32)| -> DynElement<'static, DB, (i32, i32)> {
                match mark {
                    Mark::Points => Circle::new((px + 8, py), 5, style).into_dyn(),
                    Mark::Area => {
                        Rectangle::new([(px, py - 5), (px + 16, py + 5)], style).into_dyn()
                    }
                    Mark::Line | Mark::Dashed => {
                        PathElement::new(vec![(px, py), (px + 18, py)], style).into_dyn()
                    }
                }
            }
        };
        match s.mark {
            Mark::Line => {
                let style = col.stroke_width(2);
                let anno = chart.draw_series(LineSeries::new(s.points.iter().copied(), style))?;
                if !s.name.is_empty() {
                    anno.label(&s.name).legend(legend(style, Mark::Line));
                }
            }
            Mark::Dashed => {
                let style = col.stroke_width(2);
                let anno = chart.draw_series(DashedLineSeries::new(
                    s.points.iter().copied(),
                    8,
                    5,
                    style,
                ))?;
                if !s.name.is_empty() {
                    anno.label(&s.name).legend(legend(style, Mark::Dashed));
                }
            }
            Mark::Points => {
                let style = col.mix(0.7).filled();
                let largest = s
                    .sizes
                    .as_ref()
                    .and_then(|v| v.iter().copied().reduce(f64::max))
                    .filter(|&m| m > 0.0);
                let radius = |i: usize| match (&s.sizes, largest) {
                    (Some(v), Some(m)) => {
                        (MAX_MARKER * (v[i] / m).sqrt()).max(MIN_MARKER).round() as i32
                    }
                    _ => 5,
                };
                let anno = chart.draw_series(
                    s.points
                        .iter()
                        .enumerate()
                        .map(|(i, &p)| Circle::new(p, radius(i), style)),
                )?;
                if !s.name.is_empty() {
                    anno.label(&s.name).legend(legend(style, Mark::Points));
                }
            }
            Mark::Area => {
                let style = col.mix(0.75).filled();
                let mut outline: Vec<(f64, f64)> = s.points.clone();
                match below {
                    Some(prev) => outline.extend(prev.iter().rev().copied()),
                    None => outline.extend(s.points.iter().rev().map(|&(x, _)| (x, base))),
                }
                let anno = chart.draw_series(std::iter::once(Polygon::new(outline, style)))?;
                if !s.name.is_empty() {
                    anno.label(&s.name).legend(legend(style, Mark::Area));
                }
                below = Some(&s.points);
            }
        }
    }
    legend(&mut chart)
}

/// The legend box, top left.
fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> DrawResult<DB>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .label_font((FAMILY, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
}

fn bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &BarChart) -> DrawResult<DB> {
    let n = c.categories.len();
    let tops: Vec<f64> = if c.stacked {
        (0..n)
            .map(|i| c.series.iter().map(|s| s.values[i]).sum())
            .collect()
    } else {
        c.series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .collect()
    };
    let levels = c.levels.iter().map(|l| l.value);
    let x = 0.0..n as f64;
    match c.y.scale {
        Scale::Linear => {
            let y = span(tops.iter().copied().chain(levels), Scale::Linear, true);
            bars_in(root, c, x, y.clone(), y.start)
        }
        Scale::Log => {
            let positive = tops.iter().copied().filter(|&v| v > 0.0).chain(levels);
            let y = span(positive, Scale::Log, false);
            let floor = y.start;
            bars_in(root, c, x, log(y, 10.0), floor)
        }
    }
}

fn bars_in<DB, Y>(
    root: &DrawingArea<DB, Shift>,
    c: &BarChart,
    x: Range<f64>,
    y: Y,
    floor: f64,
) -> DrawResult<DB>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let n = c.categories.len();
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, (FAMILY, 22))
        .margin(14)
        .x_label_area_size(56)
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_desc(&c.x_label)
        .y_desc(&c.y.label)
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08))
        .draw()?;
    let k = c.series.len().max(1) as f64;
    for (j, s) in c.series.iter().enumerate() {
        let style = color(j).filled();
        let rects = (0..n).filter_map(|i| {
            let (x0, x1, y0) = if c.stacked {
                let below: f64 = c.series[..j].iter().map(|t| t.values[i]).sum();
                (i as f64 + 0.15, i as f64 + 0.85, below)
            } else {
                let w = 0.8 / k;
                let x0 = i as f64 + 0.1 + j as f64 * w;
                (x0, x0 + w, floor)
            };
            let y1 = if c.stacked {
                y0 + s.values[i]
            } else {
                s.values[i]
            };
            (y1 > y0.max(floor)).then(|| Rectangle::new([(x0, y0.max(floor)), (x1, y1)], style))
        });
        chart
            .draw_series(rects)?
            .label(&s.name)
            .legend(move |(px, py)| Rectangle::new([(px, py - 5), (px + 14, py + 5)], style));
    }
    for (j, l) in c.levels.iter().enumerate() {
        let style = color(c.series.len() + j).stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, l.value), (n as f64, l.value)],
                8,
                5,
                style,
            ))?
            .label(&l.name)
            .legend(move |(px, py)| PathElement::new(vec![(px, py), (px + 18, py)], style));
    }
    let label_style = TextStyle::from((FAMILY, 13).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Top));
    for (i, name) in c.categories.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, floor));
        root.draw_text(name, &label_style, (px, py + 6))?;
    }
    legend(&mut chart)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::{Axis, BarSeries, Level, Series};

    fn roofline() -> Chart {
        Chart::Xy(XyChart {
            title: "Roofline: resnet50 on <a100> & co".into(),
            x: Axis::log("arithmetic intensity (FLOP/byte)"),
            y: Axis::log("attainable (FLOP/s)"),
            series: vec![
                Series::new(
                    "peak",
                    Mark::Line,
                    0,
                    vec![(0.1, 1.5e11), (10.0, 1.5e13), (1000.0, 1.5e13)],
                ),
                Series::new("conv", Mark::Points, 1, vec![(50.0, 1e13), (5.0, 2e12)])
                    .sized(vec![1.0, 4.0]),
            ],
        })
    }

    fn stacked() -> Chart {
        Chart::Bar(BarChart {
            title: "Memory".into(),
            x_label: "batch".into(),
            y: Axis::linear("bytes"),
            categories: vec!["1".into(), "2".into(), "4".into()],
            series: vec![
                BarSeries {
                    name: "weights".into(),
                    values: vec![1e8, 1e8, 1e8],
                },
                BarSeries {
                    name: "activations".into(),
                    values: vec![1e8, 2e8, 4e8],
                },
            ],
            stacked: true,
            levels: vec![Level {
                name: "device memory".into(),
                value: 6e8,
            }],
        })
    }

    /// The `<text>` contents of an SVG document, parsed as XML (so this also checks that
    /// the document is well-formed).
    fn texts(svg: &str) -> Vec<String> {
        let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        doc.descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(|t| t.trim().to_owned()))
            .collect()
    }

    #[test]
    fn svg_has_title_axes_and_legend_with_markup_escaped() {
        let svg = svg(&roofline()).unwrap();
        let texts = texts(&svg);
        assert!(texts.contains(&"Roofline: resnet50 on <a100> & co".to_owned()));
        assert!(texts.contains(&"arithmetic intensity (FLOP/byte)".to_owned()));
        assert!(texts.contains(&"peak".to_owned()) && texts.contains(&"conv".to_owned()));
        assert!(!svg.contains("<a100>"), "title text must be escaped");
        // Sized points: the larger time gets the larger circle.
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let radii: Vec<f64> = doc
            .descendants()
            .filter(|n| n.has_tag_name("circle"))
            .filter_map(|n| n.attribute("r")?.parse().ok())
            .collect();
        assert!(radii.contains(&MAX_MARKER), "{radii:?}");
        assert!(radii.contains(&(MAX_MARKER / 2.0)), "{radii:?}");
    }

    #[test]
    fn stacked_bars_and_levels() {
        let svg = svg(&stacked()).unwrap();
        let texts = texts(&svg);
        for want in [
            "Memory",
            "weights",
            "activations",
            "device memory",
            "1",
            "2",
            "4",
        ] {
            assert!(texts.iter().any(|t| t == want), "missing {want}: {texts:?}");
        }
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
        // 6 bars, 2 legend swatches, the background, the legend box.
        assert!(rects >= 8, "{rects} rects");
    }

    #[test]
    fn png_decodes_with_the_plot_size_and_ink() {
        let bytes = png(&roofline()).unwrap();
        let decoder = ::png::Decoder::new(std::io::Cursor::new(bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (WIDTH, HEIGHT));
        let ink = buf.chunks(3).filter(|p| p != &[255, 255, 255]).count();
        assert!(ink > 5_000, "only {ink} non-white pixels");
    }

    #[test]
    fn bad_values_are_named() {
        let Chart::Xy(mut c) = roofline() else {
            unreachable!()
        };
        c.series[1].points[0].1 = 0.0;
        let e = svg(&Chart::Xy(c.clone())).unwrap_err().to_string();
        assert!(e.contains("conv") && e.contains("logarithmic"), "{e}");
        c.series[1].points[0].1 = f64::NAN;
        let e = svg(&Chart::Xy(c)).unwrap_err().to_string();
        assert!(e.contains("not finite"), "{e}");
        let Chart::Bar(mut b) = stacked() else {
            unreachable!()
        };
        b.series[0].values.pop();
        let e = svg(&Chart::Bar(b)).unwrap_err().to_string();
        assert!(e.contains("weights") && e.contains("2 values for 3"), "{e}");
    }

    #[test]
    fn ticks_use_si_prefixes() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(1.5e13), "15T");
        assert_eq!(tick(2.5e-3), "2.5m");
        assert_eq!(tick(100.0), "100");
        assert_eq!(tick(0.1), "100m");
        assert_eq!(tick(1024.0), "1.02k");
    }
}
