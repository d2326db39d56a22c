//! Latency histograms (HDR) and Jain's fairness index.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::error::BenchError;

/// Latencies are kept in nanoseconds from 1 ns to one hour, to three
/// significant digits (a value is off by at most 0.1%): enough for a cached
/// `next()` (tens of ns) and a Cassandra LWT under contention alike.
const HIGHEST_NS: u64 = 3_600_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// The quantiles kept for the distribution charts and the JSON.
pub const DISTRIBUTION_QUANTILES: &[f64] = &[
    0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99999,
];

/// A latency histogram of one client or of a whole cell.
#[derive(Debug, Clone)]
pub struct LatencyHistogram(Histogram<u64>);

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Result<Self, BenchError> {
        Histogram::new_with_bounds(1, HIGHEST_NS, SIGNIFICANT_DIGITS)
            .map(LatencyHistogram)
            .map_err(|e| BenchError::Internal(format!("cannot create a latency histogram: {e}")))
    }

    /// Record one operation's latency (clamped into the histogram's range).
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.0.saturating_record(nanos.max(1));
    }

    /// The recorded values as (value, count) pairs, each value its
    /// bucket's highest: what a histogram of another process is sent as.
    pub fn counts(&self) -> Vec<(u64, u64)> {
        self.0
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    /// The histogram of [`counts`](Self::counts).
    pub fn from_counts(counts: &[(u64, u64)]) -> Result<Self, BenchError> {
        let mut histogram = LatencyHistogram::new()?;
        for &(value, count) in counts {
            histogram.0.saturating_record_n(value.max(1), count);
        }
        Ok(histogram)
    }

    /// Add every value of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) -> Result<(), BenchError> {
        self.0
            .add(&other.0)
            .map_err(|e| BenchError::Internal(format!("cannot merge latency histograms: {e}")))
    }

    /// Percentiles, min, max and mean; all zero when nothing was recorded.
    pub fn summary(&self) -> LatencySummary {
        if self.0.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            min_ns: self.0.min(),
            p50_ns: self.0.value_at_quantile(0.5),
            p90_ns: self.0.value_at_quantile(0.9),
            p99_ns: self.0.value_at_quantile(0.99),
            p999_ns: self.0.value_at_quantile(0.999),
            max_ns: self.0.max(),
            mean_ns: self.0.mean(),
        }
    }

    /// The latency at each of [`DISTRIBUTION_QUANTILES`] that the number of
    /// samples supports (a quantile needs at least `1 / (1 - q)` samples to
    /// mean anything), then the maximum.
    pub fn distribution(&self) -> Vec<QuantilePoint> {
        let count = self.0.len() as f64;
        let mut points: Vec<QuantilePoint> = DISTRIBUTION_QUANTILES
            .iter()
            .filter(|q| count * (1.0 - **q) >= 1.0)
            .map(|&quantile| QuantilePoint {
                quantile,
                latency_ns: self.0.value_at_quantile(quantile),
            })
            .collect();
        if !self.0.is_empty() {
            points.push(QuantilePoint {
                quantile: 1.0,
                latency_ns: self.0.max(),
            });
        }
        points
    }
}

/// The usual latency figures of a cell, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Fastest operation.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Slowest operation.
    pub max_ns: u64,
    /// Arithmetic mean.
    pub mean_ns: f64,
}

/// One point of a latency distribution: `quantile` of the operations took
/// at most `latency_ns` (quantile 1.0 is the maximum).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QuantilePoint {
    /// From 0.5 to 1.0.
    pub quantile: f64,
    /// Nanoseconds.
    pub latency_ns: u64,
}

/// Jain's fairness index of `shares` (what each client got):
/// `(Σx)² / (n · Σx²)`. 1.0 when every client got the same, `1/n` when one
/// client got everything. `None` for no clients or nothing shared out.
/// Used for the per-client operation counts (for the `lock` workload: the
/// grants).
pub fn jain_index(shares: &[f64]) -> Option<f64> {
    let sum: f64 = shares.iter().sum();
    let sum_of_squares: f64 = shares.iter().map(|x| x * x).sum();
    if shares.is_empty() || sum_of_squares <= 0.0 {
        return None;
    }
    Some(sum * sum / (shares.len() as f64 * sum_of_squares))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0.0, 0.0]), None);
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), Some(1.0));
        let one_takes_all = jain_index(&[10.0, 0.0, 0.0, 0.0]).unwrap_or_default();
        assert!((one_takes_all - 0.25).abs() < 1e-12);
    }

    #[test]
    fn histogram_percentiles_and_merge() -> Result<(), BenchError> {
        let mut a = LatencyHistogram::new()?;
        let mut b = LatencyHistogram::new()?;
        for i in 1..=1000u64 {
            a.record(Duration::from_micros(i));
        }
        b.record(Duration::from_secs(2));
        a.merge(&b)?;
        let s = a.summary();
        assert!((498_000..=503_000).contains(&s.p50_ns), "{s:?}");
        assert!(s.max_ns >= 1_999_000_000, "{s:?}");
        let d = a.distribution();
        assert_eq!(d.first().map(|p| p.quantile), Some(0.5));
        assert_eq!(d.last().map(|p| p.quantile), Some(1.0));
        // 1001 samples support the 99.9th percentile, not the 99.99th.
        assert!(d.iter().any(|p| p.quantile == 0.999));
        assert!(!d.iter().any(|p| p.quantile == 0.9999));
        assert_eq!(
            LatencyHistogram::new()?.summary(),
            LatencySummary::default()
        );
        Ok(())
    }
}
