//! Number formatting shared by the target checks, the console tables and
//! the Markdown.

/// A rate with an SI suffix and three significant digits: `812`, `45.6k`,
/// `12.3M`.
pub fn rate(per_sec: f64) -> String {
    let (value, suffix) = if per_sec >= 1e9 {
        (per_sec / 1e9, "G")
    } else if per_sec >= 1e6 {
        (per_sec / 1e6, "M")
    } else if per_sec >= 1e3 {
        (per_sec / 1e3, "k")
    } else {
        (per_sec, "")
    };
    format!("{}{suffix}", three_digits(value))
}

/// A duration in nanoseconds, in the unit that keeps three significant
/// digits: `41ns`, `1.23µs`, `4.56ms`, `1.20s`.
pub fn nanos(ns: u64) -> String {
    let ns = ns as f64;
    if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e6 {
        format!("{}µs", three_digits(ns / 1e3))
    } else if ns < 1e9 {
        format!("{}ms", three_digits(ns / 1e6))
    } else {
        format!("{}s", three_digits(ns / 1e9))
    }
}

/// A ratio per operation: `0`, `1.00`, `0.0012`, `<0.0001`; `-` when there
/// were no operations to divide by.
pub fn per_op(value: Option<f64>) -> String {
    match value {
        None => "-".to_string(),
        Some(0.0) => "0".to_string(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) if v >= 0.01 => format!("{v:.2}"),
        Some(v) if v >= 0.0001 => format!("{v:.4}"),
        Some(_) => "<0.0001".to_string(),
    }
}

/// A multiple, for the target checks: `412×`, `3.4×`.
pub fn times(ratio: f64) -> String {
    if ratio >= 100.0 {
        format!("{ratio:.0}×")
    } else {
        format!("{ratio:.1}×")
    }
}

fn three_digits(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let shown = [
            (rate(812.4), "812"),
            (rate(45_612.0), "45.6k"),
            (rate(12_345_678.0), "12.3M"),
            (nanos(41), "41ns"),
            (nanos(1_234), "1.23µs"),
            (nanos(4_560_000), "4.56ms"),
            (nanos(1_200_000_000), "1.20s"),
            (per_op(None), "-"),
            (per_op(Some(0.0)), "0"),
            (per_op(Some(1.0)), "1.00"),
            (per_op(Some(0.00123)), "0.0012"),
            (per_op(Some(0.00001)), "<0.0001"),
            (times(412.3), "412×"),
            (times(3.44), "3.4×"),
        ];
        for (got, expected) in shown {
            assert_eq!(got, expected);
        }
    }
}
