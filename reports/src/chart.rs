//! What a plot shows, independent of how it is drawn: two chart kinds cover every plot
//! ridgeline makes. [`XyChart`] draws lines, points (optionally sized) and stacked areas
//! against numeric axes (linear or logarithmic): rooflines, memory against batch size,
//! scaling curves, prediction against measurement. [`BarChart`] draws categories of
//! grouped or stacked bars with optional horizontal reference lines: time breakdowns,
//! data movement by source, histograms. [`crate::plot`] renders both to SVG or PNG.

use serde::Serialize;

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Linear.
    Linear,
    /// Logarithmic (every value must be positive).
    Log,
}

/// A numeric axis: its label (with the unit) and scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    /// Label, with the unit in parentheses.
    pub label: String,
    /// Scale.
    pub scale: Scale,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
        }
    }

    /// A logarithmic axis.
    pub fn log(label: impl Into<String>) -> Self {
        Axis {
            label: label.into(),
            scale: Scale::Log,
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    /// A solid line through the points.
    Line,
    /// A dashed line (ceilings, ideal curves, y = x).
    Dashed,
    /// Filled circles, sized by [`Series::sizes`] when given.
    Points,
    /// The region between this series and the one before it (or the axis), for stacked
    /// areas: give the series cumulative values, bottom first.
    Area,
}

/// One named series of an [`XyChart`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// How it is drawn.
    pub mark: Mark,
    /// Colour index into the palette (series sharing an index share a colour).
    pub color: usize,
    /// Points `(x, y)`.
    pub points: Vec<(f64, f64)>,
    /// Relative marker sizes for [`Mark::Points`] (scaled so the largest is the biggest
    /// marker), one per point.
    pub sizes: Option<Vec<f64>>,
}

impl Series {
    /// A series drawn with `mark`, coloured by `color`.
    pub fn new(name: impl Into<String>, mark: Mark, color: usize, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            mark,
            color,
            points,
            sizes: None,
        }
    }

    /// Sets per-point marker sizes.
    #[must_use]
    pub fn sized(mut self, sizes: Vec<f64>) -> Self {
        self.sizes = Some(sizes);
        self
    }
}

/// A chart of series against two numeric axes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct XyChart {
    /// Title.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// Series, drawn in order.
    pub series: Vec<Series>,
}

/// One named series of bars: one value per category.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarSeries {
    /// Legend entry.
    pub name: String,
    /// One value per category.
    pub values: Vec<f64>,
}

/// A horizontal reference line across a bar chart (a capacity, a limit).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    /// Legend entry.
    pub name: String,
    /// Height.
    pub value: f64,
}

/// Bars per category, grouped side by side or stacked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BarChart {
    /// Title.
    pub title: String,
    /// Label under the categories.
    pub x_label: String,
    /// Vertical axis (linear or log; stacked bars need linear).
    pub y: Axis,
    /// Category labels.
    pub categories: Vec<String>,
    /// Series, each with one value per category.
    pub series: Vec<BarSeries>,
    /// Whether series stack (bottom first) rather than stand side by side.
    pub stacked: bool,
    /// Horizontal reference lines.
    pub levels: Vec<Level>,
}

/// A chart of either kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Chart {
    /// Series against numeric axes.
    Xy(XyChart),
    /// Bars per category.
    Bar(BarChart),
}

impl Chart {
    /// The chart's title.
    pub fn title(&self) -> &str {
        match self {
            Chart::Xy(c) => &c.title,
            Chart::Bar(c) => &c.title,
        }
    }

    /// Legend entries, in drawing order.
    pub fn series_names(&self) -> Vec<&str> {
        match self {
            Chart::Xy(c) => c.series.iter().map(|s| s.name.as_str()).collect(),
            Chart::Bar(c) => c
                .series
                .iter()
                .map(|s| s.name.as_str())
                .chain(c.levels.iter().map(|l| l.name.as_str()))
                .collect(),
        }
    }
}

/// A chart in a report: an identifier (its file stem), the chart and a caption.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// File stem and HTML anchor: lowercase letters, digits and `-`.
    pub id: String,
    /// The chart.
    pub chart: Chart,
    /// What it shows and where its numbers come from.
    pub caption: String,
}
