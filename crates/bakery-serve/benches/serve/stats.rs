//! Latencies and errors of one client, merged into a cell's.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// The highest latency kept (an hour), in nanoseconds; 3 significant digits.
const HIGHEST_NS: u64 = 3_600_000_000_000;

/// Timed latencies (HDR, nanoseconds) and failed requests.
pub struct Tally {
    hist: Histogram<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            hist: Histogram::new_with_bounds(1, HIGHEST_NS, 3).expect("valid histogram bounds"),
            errors: 0,
            first_error: None,
        }
    }

    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns.max(1));
    }

    pub fn error(&mut self, message: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message);
        }
    }

    pub fn merge(&mut self, other: Tally) {
        self.hist
            .add(&other.hist)
            .expect("histograms of the same bounds");
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    /// Timed operations.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The latency at `quantile` (0.5 = p50), in nanoseconds.
    pub fn at(&self, quantile: f64) -> u64 {
        self.hist.value_at_quantile(quantile)
    }
}

/// A cell's clock: an untimed warm-up, then the timed part. A request is
/// timed when it starts inside the timed part; clients start no request
/// after it.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    pub timed_from: Instant,
    pub until: Instant,
}

impl Phases {
    /// Starting now.
    pub fn start(warmup: Duration, duration: Duration) -> Phases {
        let timed_from = Instant::now() + warmup;
        Phases {
            timed_from,
            until: timed_from + duration,
        }
    }

    pub fn duration(&self) -> Duration {
        self.until - self.timed_from
    }
}
