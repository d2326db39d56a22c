//! SVG charts, drawn with plotters (SVG backend only: no bitmap code, no
//! system fonts; the same plotters build criterion already brings into
//! the workspace, so it adds no crate to the lock file).
//!
//! Native peers are drawn dashed. Per workload:
//! - `throughput-<workload>.svg`: operations/s against clients, one line
//!   per target and implementation (both axes logarithmic: backends differ
//!   by orders of magnitude);
//! - `latency-<workload>.svg`: the latency distribution of each series at
//!   its largest client count: latency (logarithmic) at each percentile
//!   step from 50% to 99.999%, as far as the sample count supports.

use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::BenchError;
use crate::format::{nanos, rate};
use crate::results::{CellResult, Implementation, Report, WorkloadInfo};
use crate::stats::DISTRIBUTION_QUANTILES;

const SIZE: (u32, u32) = (1100, 560);
/// Width of the legend column right of the plot.
const LEGEND_WIDTH: u32 = 330;
const FONT: &str = "sans-serif";

/// One line of a chart.
struct Series {
    name: String,
    /// A native peer: drawn dashed.
    native: bool,
    points: Vec<(f64, f64)>,
}

/// Tableau's ten colours: distinct, and readable on white.
const PALETTE: [RGBColor; 10] = [
    RGBColor(78, 121, 167),
    RGBColor(242, 142, 43),
    RGBColor(225, 87, 89),
    RGBColor(118, 183, 178),
    RGBColor(89, 161, 79),
    RGBColor(237, 201, 72),
    RGBColor(176, 122, 161),
    RGBColor(255, 157, 167),
    RGBColor(156, 117, 95),
    RGBColor(186, 176, 172),
];

fn color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// Draw every chart of `report` into `dir`; returns the file names.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<String>, BenchError> {
    let mut files = Vec::new();
    for workload in &report.workloads {
        let cells: Vec<&CellResult> = report.cells(&workload.name).collect();
        if cells.is_empty() {
            continue;
        }
        for (kind, draw) in [
            (
                "throughput",
                throughput as fn(&WorkloadInfo, &[&CellResult]) -> _,
            ),
            ("latency", latency),
        ] {
            let name = format!("{kind}-{}.svg", workload.name);
            let path = dir.join(&name);
            let svg = draw(workload, &cells).map_err(|message| BenchError::Chart {
                path: path.clone(),
                message,
            })?;
            std::fs::write(&path, svg).map_err(|source| BenchError::Write { path, source })?;
            files.push(name);
        }
    }
    Ok(files)
}

/// Throughput against clients.
fn throughput(workload: &WorkloadInfo, cells: &[&CellResult]) -> Result<String, String> {
    let mut series: Vec<Series> = Vec::new();
    for cell in cells.iter().filter(|c| c.ops_per_sec > 0.0) {
        let point = (cell.clients as f64, cell.ops_per_sec);
        let name = cell.series();
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => series.push(Series {
                name,
                native: cell.implementation == Implementation::Native,
                points: vec![point],
            }),
        }
    }
    let unit = format!("{}/s", workload.unit);
    draw(
        &format!("{}: {unit} by clients", workload.name),
        "clients",
        &unit,
        &series,
        Axis::LogClients,
        &|y| rate(*y),
    )
}

/// Latency distribution of each series at its largest client count.
fn latency(workload: &WorkloadInfo, cells: &[&CellResult]) -> Result<String, String> {
    let mut series: Vec<Series> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for cell in cells {
        let name = cell.series();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    for name in names {
        let Some(widest) = cells
            .iter()
            .filter(|c| c.series() == name)
            .max_by_key(|c| c.clients)
        else {
            continue;
        };
        let points: Vec<(f64, f64)> = widest
            .distribution
            .iter()
            .filter(|p| p.quantile < 1.0 && p.latency_ns > 0)
            .filter_map(|p| {
                let index = DISTRIBUTION_QUANTILES
                    .iter()
                    .position(|q| *q == p.quantile)?;
                Some((index as f64, p.latency_ns as f64))
            })
            .collect();
        if !points.is_empty() {
            series.push(Series {
                name: format!("{name} ({} clients)", widest.clients),
                native: widest.implementation == Implementation::Native,
                points,
            });
        }
    }
    draw(
        &format!("{}: latency distribution per operation", workload.name),
        "percentile",
        "latency",
        &series,
        Axis::Percentile,
        &|ns| nanos(*ns as u64),
    )
}

/// The x axis of a chart.
#[derive(Clone, Copy)]
enum Axis {
    /// Client counts, logarithmic.
    LogClients,
    /// Percentiles: the steps of [`DISTRIBUTION_QUANTILES`], evenly spaced.
    Percentile,
}

fn draw(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    axis: Axis,
    y_format: &dyn Fn(&f64) -> String,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (plot, legend) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let y_range = log_range(ys());
        let mut chart = ChartBuilder::on(&plot);
        chart
            .caption(title, (FONT, 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(76);
        match axis {
            Axis::LogClients => {
                let mut chart = chart
                    .build_cartesian_2d(log_range(xs()).log_scale(), y_range.log_scale())
                    .map_err(|e| e.to_string())?;
                let x_format = |x: &f64| format!("{x:.0}");
                let x_axis: XAxis<f64> = (DEFAULT_X_LABELS, &x_format);
                draw_mesh(&mut chart, (x_label, y_label), x_axis, y_format)?;
                for (i, s) in series.iter().enumerate() {
                    plot_line(&mut chart, i, s.native, s.points.clone())?;
                }
            }
            Axis::Percentile => {
                // x is the index of the quantile in DISTRIBUTION_QUANTILES:
                // evenly spaced steps, each labelled with its percentile.
                let last = xs().fold(0.0, f64::max) as i32;
                let mut chart = chart
                    .build_cartesian_2d(0..last.max(1), y_range.log_scale())
                    .map_err(|e| e.to_string())?;
                let x_format = |i: &i32| {
                    usize::try_from(*i)
                        .ok()
                        .and_then(|i| DISTRIBUTION_QUANTILES.get(i))
                        .map_or_else(String::new, |q| percentile_label(*q))
                };
                let x_axis: XAxis<i32> = (DISTRIBUTION_QUANTILES.len(), &x_format);
                draw_mesh(&mut chart, (x_label, y_label), x_axis, y_format)?;
                for (i, s) in series.iter().enumerate() {
                    let points = s.points.iter().map(|&(x, y)| (x as i32, y)).collect();
                    plot_line(&mut chart, i, s.native, points)?;
                }
            }
        }
        draw_legend(&legend, series).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Draw one series: a line (dashed for a native peer) with a dot on each
/// measured point.
/// An x axis's labels: how many, and how each value is shown.
type XAxis<'a, V> = (usize, &'a dyn Fn(&V) -> String);

/// How many x labels plotters shows unless told otherwise.
const DEFAULT_X_LABELS: usize = 11;

/// Draw the mesh of a chart with a log y axis: both axis descriptions,
/// `x_axis` (how many x labels, and how each is shown), the y labels shown
/// by `y_format`, and no minor grid lines (on a log axis they crowd into
/// grey bands).
fn draw_mesh<DB, X>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, LogCoord<f64>>>,
    (x_label, y_label): (&str, &str),
    (x_labels, x_format): XAxis<'_, X::ValueType>,
    y_format: &dyn Fn(&f64) -> String,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged + ValueFormatter<X::ValueType>,
{
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(x_labels)
        .x_label_formatter(x_format)
        .y_label_formatter(y_format)
        .draw()
        .map_err(|e| e.to_string())
}

fn plot_line<DB, X>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, LogCoord<f64>>>,
    index: usize,
    native: bool,
    points: Vec<(X::ValueType, f64)>,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: Ranged,
    X::ValueType: Clone + 'static,
{
    let style = color(index).stroke_width(2);
    if native {
        chart
            .draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))
            .map_err(|e| e.to_string())?;
    } else {
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .map_err(|e| e.to_string())?;
    }
    chart
        .draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, color(index).filled())),
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// The legend, in its own column so it never hides a line.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    series: &[Series],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if series.is_empty() {
        area.draw(&Text::new("no data", (10, 60), (FONT, 14)))?;
    }
    for (i, s) in series.iter().enumerate() {
        let y = 60 + 22 * i as i32;
        let style = color(i).stroke_width(3);
        if s.native {
            // Two short strokes: the dashed look of a native peer's line.
            area.draw(&PathElement::new(vec![(6, y), (16, y)], style))?;
            area.draw(&PathElement::new(vec![(22, y), (34, y)], style))?;
        } else {
            area.draw(&PathElement::new(vec![(6, y), (34, y)], style))?;
        }
        area.draw(&Text::new(s.name.clone(), (42, y - 7), (FONT, 13)))?;
    }
    Ok(())
}

/// A range around `values` for a logarithmic axis: from half the smallest
/// positive value to twice the largest (1..10 when there is none).
fn log_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (low, high) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::INFINITY, 0.0f64), |(low, high), v| {
            (low.min(v), high.max(v))
        });
    if high <= 0.0 {
        return 1.0..10.0;
    }
    low / 2.0..high * 2.0
}

/// A quantile as a percentile: `50%`, `99.9%`.
fn percentile_label(quantile: f64) -> String {
    let percent = quantile * 100.0;
    let text = format!("{percent:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis() {
        assert_eq!(percentile_label(0.5), "50%");
        assert_eq!(percentile_label(0.99), "99%");
        assert_eq!(percentile_label(0.999), "99.9%");
        assert_eq!(percentile_label(0.99999), "99.999%");
        assert_eq!(log_range(std::iter::empty()), 1.0..10.0);
        assert_eq!(log_range([4.0, 16.0].into_iter()), 2.0..32.0);
    }
}
