//! The side-by-side tables, as aligned plain text (console) or Markdown.

use crate::format::{nanos, per_op, rate};
use crate::results::{Report, WorkloadInfo};

/// A table of strings, rendered as text or Markdown.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Column headings.
    pub headers: Vec<String>,
    /// Per column: numbers are right-aligned.
    pub numeric: Vec<bool>,
    /// The cells, row by row.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(columns: &[(&str, bool)]) -> Self {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            numeric: columns.iter().map(|(_, n)| *n).collect(),
            rows: Vec::new(),
        }
    }

    /// Columns padded to their widest cell, two spaces apart.
    pub fn to_text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|col| {
                std::iter::once(&self.headers[col])
                    .chain(self.rows.iter().filter_map(|row| row.get(col)))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(col, cell)| {
                    let pad = widths[col].saturating_sub(cell.chars().count());
                    if self.numeric.get(col).copied().unwrap_or(false) {
                        format!("{}{cell}", " ".repeat(pad))
                    } else {
                        format!("{cell}{}", " ".repeat(pad))
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }

    /// A GitHub-flavoured Markdown table (`|` in cells escaped).
    pub fn to_markdown(&self) -> String {
        let escape = |cell: &str| cell.replace('|', "\\|");
        let mut out = String::new();
        out.push_str(&format!(
            "| {} |\n",
            self.headers
                .iter()
                .map(|h| escape(h))
                .collect::<Vec<_>>()
                .join(" | ")
        ));
        let rule: Vec<&str> = self
            .numeric
            .iter()
            .map(|numeric| if *numeric { "---:" } else { "---" })
            .collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for row in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                row.iter()
                    .map(|c| escape(c))
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        out
    }
}

/// One row per cell of `workload` in one process, or across processes
/// (`across_processes`: a client per process, the `processes` column):
/// target, implementation, clients, throughput, latency percentiles, round
/// trips and conflicts per operation, errors, fairness and the workload's
/// extra counters. `None` when the workload has no such cells.
pub fn workload_table(
    report: &Report,
    workload: &WorkloadInfo,
    across_processes: bool,
) -> Option<Table> {
    let cells: Vec<_> = if across_processes {
        report.cells_across_processes(&workload.name).collect()
    } else {
        report.cells(&workload.name).collect()
    };
    if cells.is_empty() {
        return None;
    }
    let throughput = format!("{}/s", workload.unit);
    let mut columns: Vec<(&str, bool)> = vec![
        ("target", false),
        ("implementation", false),
        (
            if across_processes {
                "processes"
            } else {
                "clients"
            },
            true,
        ),
        (&throughput, true),
        ("p50", true),
        ("p99", true),
        ("p999", true),
        ("round trips/op", true),
        ("conflicts/op", true),
        ("errors", true),
        ("fairness", true),
    ];
    columns.extend(workload.extra_columns.iter().map(|c| (c.as_str(), true)));
    let mut table = Table::new(&columns);
    for cell in cells {
        let mut row = vec![
            cell.target.clone(),
            cell.label.clone(),
            cell.clients.to_string(),
            rate(cell.ops_per_sec),
            nanos(cell.latency.p50_ns),
            nanos(cell.latency.p99_ns),
            nanos(cell.latency.p999_ns),
            per_op(cell.round_trips_per_op),
            per_op(cell.conflicts_per_op),
            cell.errors.to_string(),
            cell.fairness
                .map_or_else(|| "-".to_string(), |f| format!("{f:.2}")),
        ];
        row.extend(workload.extra_columns.iter().map(|name| {
            cell.extras
                .get(name)
                .map_or_else(|| "-".to_string(), u64::to_string)
        }));
        table.rows.push(row);
    }
    Some(table)
}

/// The heading of a workload's table across processes.
pub fn across_processes_title(workload: &WorkloadInfo) -> String {
    format!(
        "{} across processes: the same cells with each client in an OS process of its own \
         (its own connection and runtime), started together; the parent checks every \
         process's grants and ids together (no overlap, a reader never beside a writer, a \
         shared counter with no lost increment, fencing tokens in grant order, no id twice; a violation is an error); \
         a memory:// store is one process's and has no such cells",
        workload.name
    )
}

/// The stores measured: label, URI (password hidden), server version.
pub fn targets_table(report: &Report) -> Table {
    let mut table = Table::new(&[("target", false), ("URI", false), ("version", false)]);
    for target in &report.targets {
        table.rows.push(vec![
            target.label.clone(),
            target.uri.clone(),
            target.version.clone(),
        ]);
    }
    table
}

/// The performance targets: status and the worst case.
pub fn checks_table(report: &Report) -> Table {
    let mut table = Table::new(&[("status", false), ("target", false), ("result", false)]);
    for check in &report.checks {
        table.rows.push(vec![
            check.status.as_str().to_string(),
            check.target.clone(),
            check.summary.clone(),
        ]);
    }
    table
}

/// Why `workload` did not run on some targets: `skipped on target: reason`.
pub fn skipped_lines(report: &Report, workload: &str) -> Vec<String> {
    report
        .skipped
        .iter()
        .filter(|s| s.workload == workload)
        .map(|s| format!("skipped on {}: {}", s.target, s.reason))
        .collect()
}

/// The first error of every cell that had errors: `target · label ·
/// N clients: message`.
pub fn error_lines(report: &Report) -> Vec<String> {
    report
        .results
        .iter()
        .filter(|cell| cell.errors > 0)
        .map(|cell| {
            let checks = match cell.violations {
                0 => String::new(),
                n => format!(" ({n} a failed check)"),
            };
            format!(
                "{} · {} · {} · {} {}: {} error(s){checks}, first: {}",
                cell.workload,
                cell.target,
                cell.label,
                cell.clients,
                if cell.across_processes {
                    "processes"
                } else {
                    "clients"
                },
                cell.errors,
                cell.first_error.as_deref().unwrap_or("(no message)")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_markdown_alignment() {
        let mut table = Table::new(&[("name", false), ("n", true)]);
        table.rows.push(vec!["a|b".into(), "1".into()]);
        table.rows.push(vec!["µs".into(), "100".into()]);
        assert_eq!(table.to_text(), "name    n\na|b     1\nµs    100\n");
        assert_eq!(
            table.to_markdown(),
            "| name | n |\n| --- | ---: |\n| a\\|b | 1 |\n| µs | 100 |\n"
        );
    }
}
