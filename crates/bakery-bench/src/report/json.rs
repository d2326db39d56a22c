//! The raw results as JSON (`results.json`, or a command's JSON output).

use std::path::Path;

use crate::error::BenchError;
use crate::results::Report;

/// The file name under `--out`.
pub const FILE: &str = "results.json";

/// The report as pretty-printed JSON.
pub fn to_string(report: &Report) -> Result<String, BenchError> {
    serde_json::to_string_pretty(report)
        .map_err(|e| BenchError::Internal(format!("cannot serialize the results: {e}")))
}

/// Write `results.json` into `dir`.
pub fn write(report: &Report, dir: &Path) -> Result<(), BenchError> {
    let path = dir.join(FILE);
    let mut text = to_string(report)?;
    text.push('\n');
    std::fs::write(&path, text).map_err(|source| BenchError::Write { path, source })
}
