//! Every form a [`Report`] is shown in: console tables ([`text`], built
//! from [`table`]), JSON ([`json`]), SVG charts ([`svg`]) and the Markdown
//! report ([`markdown`]). Each renders from the one report, so the console,
//! the JSON and the Markdown never disagree.

pub mod json;
pub mod markdown;
pub mod svg;
pub mod table;
pub mod text;

use std::path::Path;

use crate::error::BenchError;
use crate::results::Report;

/// Write every file of `report` into `dir` (created if missing):
/// [`json::FILE`], the SVG charts and [`markdown::FILE`]. Returns the chart
/// file names.
pub fn write_files(report: &Report, dir: &Path) -> Result<Vec<String>, BenchError> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    json::write(report, dir)?;
    let charts = svg::write_all(report, dir)?;
    markdown::write(report, &charts, dir)?;
    Ok(charts)
}
