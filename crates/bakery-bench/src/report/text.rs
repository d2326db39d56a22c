//! The console form of a report: a heading line, the targets, a table per
//! workload, the errors and the target checks.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::table::{
    across_processes_title, checks_table, error_lines, skipped_lines, targets_table, workload_table,
};
use super::{json, markdown};
use crate::results::Report;

/// Where a run's files went, for the last line of the console output.
#[derive(Debug, Clone, Copy)]
pub struct Written<'a> {
    /// The directory.
    pub dir: &'a Path,
    /// The chart files in it.
    pub charts: &'a [String],
}

/// The whole console output of `report`; `written` names the files written
/// beside it, if any.
pub fn render(report: &Report, written: Option<Written<'_>>) -> String {
    let mut out = String::new();
    // `write!` into a String cannot fail; the results are ignored.
    let rounds = match report.settings.rounds {
        0 | 1 => String::new(),
        n => format!(", median of {n} rounds"),
    };
    let _ = writeln!(
        out,
        "bakery bench: {} per cell{rounds}; {}",
        humantime::format_duration(Duration::from_millis(report.settings.duration_ms)),
        report.machine.one_line()
    );
    let _ = writeln!(out);
    out.push_str(&targets_table(report).to_text());
    for workload in &report.workloads {
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", workload.title);
        if let Some(table) = workload_table(report, workload, false) {
            out.push_str(&table.to_text());
        }
        if let Some(table) = workload_table(report, workload, true) {
            let _ = writeln!(out);
            let _ = writeln!(out, "{}", across_processes_title(workload));
            out.push_str(&table.to_text());
        }
        for line in skipped_lines(report, &workload.name) {
            let _ = writeln!(out, "  {line}");
        }
    }
    let errors = error_lines(report);
    if !errors.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(out, "errors");
        for line in errors {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "targets (measured, never asserted)");
    out.push_str(&checks_table(report).to_text());
    if let Some(Written { dir, charts }) = written {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "wrote {}: {}, {}, {}",
            dir.display(),
            json::FILE,
            markdown::FILE,
            charts.join(", ")
        );
    }
    out
}
