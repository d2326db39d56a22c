//! How busy the machine was with other work during the run: all CPUs' busy
//! time (`/proc/stat`) minus this process's and its waited-for children's
//! (the servers, `/proc/self/stat`). On a machine the run shares, this says
//! how far to trust its figures. Linux only; `None` elsewhere.

/// Clock ticks at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Busy ticks of all CPUs together.
    busy: u64,
    /// All ticks of all CPUs together.
    total: u64,
    /// This process's and its reaped children's ticks.
    own: u64,
}

impl Sample {
    pub fn now() -> Option<Sample> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks: Vec<u64> = stat
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .filter_map(|field| field.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is
        // already in user and nice).
        let total: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
        let own_stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // After the command name in parentheses: fields 3 on; utime, stime,
        // cutime and cstime are fields 14 to 17.
        let (_, after) = own_stat.rsplit_once(')')?;
        let own = after
            .split_whitespace()
            .skip(11)
            .take(4)
            .filter_map(|field| field.parse::<u64>().ok())
            .sum();
        Some(Sample {
            busy: total.saturating_sub(idle),
            total,
            own,
        })
    }

    /// The share of one CPU that other processes used on average from
    /// `self` to `later` (0.5 = half a CPU, the whole time).
    pub fn others_until(&self, later: &Sample, cpus: usize) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        if total == 0 {
            return None;
        }
        let busy = later.busy.saturating_sub(self.busy);
        let own = later.own.saturating_sub(self.own);
        let others = busy.saturating_sub(own);
        Some(others as f64 / total as f64 * cpus as f64)
    }
}
