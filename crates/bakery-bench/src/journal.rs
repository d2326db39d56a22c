//! What one client of a cell run *across processes* writes down, and the
//! checks its parent runs on every client's record merged: grants that
//! overlap, a shared counter that lost increments, fencing tokens out of
//! order, ids handed out twice. In one process the lock workload's grant
//! log sees every client itself; across processes each client only sees
//! its own grants, so they are logged with a clock every process shares
//! (`CLOCK_MONOTONIC`) and judged together afterwards.
//!
//! ```
//! use bakery_bench::journal::{check_grants, Grant};
//!
//! // Two processes inside the lock at once: an overlap, and a lost
//! // increment of the counter their critical sections shared.
//! let grant = |process, entered_ns, token| Grant {
//!     process,
//!     asked_ns: 0,
//!     entered_ns,
//!     left_ns: entered_ns + 20,
//!     token: Some(token),
//!     shared: false,
//! };
//! let mut grants = vec![grant(0, 10, 1), grant(1, 20, 2)];
//! let problems = check_grants(&mut grants, 1, Some(1));
//! assert_eq!(problems.len(), 2, "{problems:?}");
//!
//! // Two readers of a read-write lock inside at once are fine.
//! let mut readers = vec![
//!     Grant { shared: true, ..grant(0, 10, 1) },
//!     Grant { shared: true, ..grant(1, 20, 2) },
//! ];
//! assert!(check_grants(&mut readers, 1, Some(0)).is_empty());
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::stats::LatencyHistogram;

/// Nanoseconds on `CLOCK_MONOTONIC`: the one clock every process of the
/// machine reads alike, so grants of different processes can be ordered.
#[cfg(unix)]
pub fn monotonic_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64)
    })
}

/// Nanoseconds of the wall clock: without `CLOCK_MONOTONIC` the best
/// clock processes share (a clock step would show as a false overlap).
#[cfg(not(unix))]
pub fn monotonic_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// One grant of a lock (a permit, a leadership, a read or write hold of a
/// read-write lock): when its client asked, entered and left (the holder's
/// release starts at `left_ns`), on [`monotonic_ns`]; the fencing token, if
/// the lock gives one; whether it was shared (a read hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The process (client) it was granted to.
    pub process: usize,
    /// When the client started to acquire.
    pub asked_ns: u64,
    /// When it was inside.
    pub entered_ns: u64,
    /// When it started its release.
    pub left_ns: u64,
    /// The grant's fencing token (bakery's locks give one; a native lock
    /// may not).
    pub token: Option<u64>,
    /// A shared grant (a read hold of a read-write lock), which may
    /// overlap other shared grants but no exclusive one; `false` (the
    /// default, also of a record without the field): exclusive.
    #[serde(default)]
    pub shared: bool,
}

/// The record of one client of a cell run across processes: its grants,
/// the ids it was handed (as runs of consecutive ids), and the counter file
/// its critical sections read, increment and write back: what two holders
/// inside at once would lose an increment of.
#[derive(Debug)]
pub struct Journal {
    process: usize,
    counter: Option<Mutex<File>>,
    grants: Mutex<Vec<Grant>>,
    ids: Mutex<Vec<(u64, u64)>>,
}

impl Journal {
    /// The journal of client `process`, its critical sections incrementing
    /// the counter in the file `counter` (8 bytes, little-endian), if any.
    pub fn new(process: usize, counter: Option<&Path>) -> Result<Journal, BenchError> {
        let counter = match counter {
            Some(path) => Some(Mutex::new(
                File::options()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(|e| {
                        BenchError::Internal(format!(
                            "cannot open the shared counter {}: {e}",
                            path.display()
                        ))
                    })?,
            )),
            None => None,
        };
        Ok(Journal {
            process,
            counter,
            grants: Mutex::new(Vec::new()),
            ids: Mutex::new(Vec::new()),
        })
    }

    /// The client (process) index this journal is of.
    pub fn process(&self) -> usize {
        self.process
    }

    /// Inside the lock since `asked_ns`: increment the shared counter
    /// (read, add one, write back: not atomic, on purpose) and log the
    /// grant. The error is the counter file's, in one line.
    pub fn critical_section(&self, asked_ns: u64, token: Option<u64>) -> Result<(), String> {
        self.section(asked_ns, token, false)
    }

    /// Inside a read-write lock for reading since `asked_ns`: read the
    /// shared counter (without incrementing it), read it again before
    /// leaving, and log the shared grant. An error if the counter changed
    /// in between (a writer was inside too), or the counter file's.
    pub fn shared_section(&self, asked_ns: u64, token: Option<u64>) -> Result<(), String> {
        self.section(asked_ns, token, true)
    }

    fn section(&self, asked_ns: u64, token: Option<u64>, shared: bool) -> Result<(), String> {
        let entered_ns = monotonic_ns();
        if let Some(counter) = &self.counter {
            let mut file = counter
                .lock()
                .map_err(|_| "the shared counter's lock is poisoned".to_string())?;
            if shared {
                let before = read(&mut file).map_err(|e| format!("shared counter: {e}"))?;
                let after = read(&mut file).map_err(|e| format!("shared counter: {e}"))?;
                if before != after {
                    return Err(format!(
                        "the shared counter went from {before} to {after} while a reader was \
                         inside (a writer held the lock too)"
                    ));
                }
            } else {
                increment(&mut file).map_err(|e| format!("shared counter: {e}"))?;
            }
        }
        let left_ns = monotonic_ns();
        if let Ok(mut grants) = self.grants.lock() {
            grants.push(Grant {
                process: self.process,
                asked_ns,
                entered_ns,
                left_ns,
                token,
                shared,
            });
        }
        Ok(())
    }

    /// The client was handed `id`.
    pub fn id(&self, id: u64) {
        if let Ok(mut ids) = self.ids.lock() {
            match ids.last_mut() {
                Some((_, last)) if id == last.saturating_add(1) => *last = id,
                _ => ids.push((id, id)),
            }
        }
    }

    /// The grants logged, in order.
    pub fn grants(&self) -> Vec<Grant> {
        self.grants.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// The ids handed out, as inclusive runs of consecutive ids.
    pub fn ids(&self) -> Vec<(u64, u64)> {
        self.ids.lock().map(|i| i.clone()).unwrap_or_default()
    }
}

fn read(file: &mut File) -> std::io::Result<u64> {
    let mut bytes = [0u8; 8];
    file.seek(SeekFrom::Start(0))?;
    file.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

fn increment(file: &mut File) -> std::io::Result<()> {
    let value = read(file)?.wrapping_add(1);
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&value.to_le_bytes())
}

/// Create the counter file at `path`, at 0.
pub fn create_counter(path: &Path) -> Result<(), BenchError> {
    std::fs::write(path, 0u64.to_le_bytes()).map_err(|source| BenchError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The counter's value in the file at `path`.
pub fn read_counter(path: &Path) -> Result<u64, BenchError> {
    let bytes = std::fs::read(path).map_err(|e| {
        BenchError::Internal(format!(
            "cannot read the shared counter {}: {e}",
            path.display()
        ))
    })?;
    let bytes: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
        BenchError::Internal(format!(
            "the shared counter {} has {} bytes, not 8",
            path.display(),
            bytes.len()
        ))
    })?;
    Ok(u64::from_le_bytes(bytes))
}

/// The problems of the merged `grants` of a cell (sorted here by entry):
/// more than `holders` exclusive grants inside at once, or a shared grant
/// (a reader) inside with an exclusive one (shared grants may overlap each
/// other); fencing tokens out of grant order (an exclusive grant's token
/// must exceed that of every grant that entered before it, a shared
/// grant's that of the last exclusive grant before it: readers granted
/// together may enter in any order); and (if given) a shared counter whose
/// value is not the number of exclusive grants (only they increment it).
/// Empty: none.
pub fn check_grants(grants: &mut [Grant], holders: usize, counter: Option<u64>) -> Vec<String> {
    grants.sort_by_key(|g| (g.entered_ns, g.left_ns));
    let mut problems = Vec::new();
    // The ends of the exclusive and of the shared grants still inside,
    // earliest first.
    let mut exclusive: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut shared: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut overlaps = 0u64;
    for grant in grants.iter() {
        for inside in [&mut exclusive, &mut shared] {
            while inside
                .peek()
                .is_some_and(|Reverse(left)| *left < grant.entered_ns)
            {
                inside.pop();
            }
        }
        let violated = if grant.shared {
            shared.push(Reverse(grant.left_ns));
            !exclusive.is_empty()
        } else {
            exclusive.push(Reverse(grant.left_ns));
            exclusive.len() > holders || !shared.is_empty()
        };
        if violated {
            overlaps += 1;
        }
    }
    if overlaps > 0 {
        problems.push(format!(
            "{overlaps} grants across processes found more than {holders} holder(s) inside, \
             or a reader beside a writer (exclusion violated)"
        ));
    }
    let (mut highest, mut last_exclusive): (Option<u64>, Option<u64>) = (None, None);
    let mut out_of_order = 0usize;
    for grant in grants.iter() {
        let Some(token) = grant.token else { continue };
        let floor = if grant.shared {
            last_exclusive
        } else {
            highest
        };
        if floor.is_some_and(|floor| token <= floor) {
            out_of_order += 1;
        }
        highest = Some(highest.map_or(token, |h| h.max(token)));
        if !grant.shared {
            last_exclusive = Some(token);
        }
    }
    if out_of_order > 0 {
        problems.push(format!(
            "{out_of_order} fencing tokens across processes did not increase in grant order"
        ));
    }
    if let Some(value) = counter {
        let granted = grants.iter().filter(|g| !g.shared).count() as u64;
        if value != granted {
            problems.push(format!(
                "the counter the critical sections shared reads {value} after {granted} \
                 exclusive grants ({} increments lost)",
                granted.abs_diff(value)
            ));
        }
    }
    problems
}

/// The most shared grants inside at once in `grants` (the most readers
/// holding a read-write lock together); 0 without a shared grant.
pub fn most_shared(grants: &[Grant]) -> u64 {
    // Entries and exits of the shared grants, an exit before an entry at
    // the same instant (as the overlap check sees grants that only touch).
    let mut events: Vec<(u64, bool)> = grants
        .iter()
        .filter(|g| g.shared)
        .flat_map(|g| [(g.entered_ns, true), (g.left_ns.saturating_add(1), false)])
        .collect();
    events.sort_unstable();
    let (mut inside, mut most) = (0u64, 0u64);
    for (_, entering) in events {
        if entering {
            inside += 1;
            most = most.max(inside);
        } else {
            inside = inside.saturating_sub(1);
        }
    }
    most
}

/// The problem of the ids of a cell's processes (inclusive runs of
/// consecutive ids): ids handed out more than once. `None`: all distinct.
pub fn check_ids(mut ranges: Vec<(u64, u64)>) -> Option<String> {
    ranges.sort_unstable();
    let mut duplicates = 0u64;
    let mut highest: Option<u64> = None;
    for (start, end) in ranges {
        if let Some(high) = highest {
            if start <= high {
                duplicates += end.min(high) - start + 1;
            }
        }
        highest = Some(highest.map_or(end, |h| h.max(end)));
    }
    (duplicates > 0).then(|| format!("{duplicates} ids handed out twice across processes"))
}

/// The most consecutive grants to one process while another process was
/// asking, in `grants` sorted by entry (as [`check_grants`] leaves them):
/// the same figure the lock workload's grant log gives in one process.
pub fn longest_run(grants: &[Grant]) -> u64 {
    let processes = grants.iter().map(|g| g.process + 1).max().unwrap_or(0);
    // Per process, its grants' indices in entry order, and how far the
    // sweep has passed them.
    let mut by_process: Vec<Vec<usize>> = vec![Vec::new(); processes];
    for (index, grant) in grants.iter().enumerate() {
        by_process[grant.process].push(index);
    }
    let mut next = vec![0usize; processes];
    let (mut longest, mut current) = (0u64, 0u64);
    let mut last: Option<usize> = None;
    for (index, grant) in grants.iter().enumerate() {
        if let Some(position) = next.get_mut(grant.process) {
            *position += 1;
        }
        // Another process is asking if its next grant was asked for
        // before this one entered.
        let others_asking = (0..processes).any(|p| {
            p != grant.process
                && by_process[p]
                    .get(next[p])
                    .is_some_and(|&i| i > index && grants[i].asked_ns < grant.entered_ns)
        });
        current = if last == Some(grant.process) && others_asking {
            current + 1
        } else {
            1
        };
        last = Some(grant.process);
        longest = longest.max(current);
    }
    longest
}

/// The hand-offs in `grants` sorted by entry: from one process's release
/// to the next grant of another process.
pub fn handoffs(grants: &[Grant]) -> Result<Option<LatencyHistogram>, BenchError> {
    let mut histogram: Option<LatencyHistogram> = None;
    for pair in grants.windows(2) {
        if pair[0].process != pair[1].process {
            let took = pair[1].entered_ns.saturating_sub(pair[0].left_ns);
            let histogram = match histogram.as_mut() {
                Some(h) => h,
                None => histogram.insert(LatencyHistogram::new()?),
            };
            histogram.record(std::time::Duration::from_nanos(took));
        }
    }
    Ok(histogram)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(process: usize, asked_ns: u64, entered_ns: u64, left_ns: u64) -> Grant {
        Grant {
            process,
            asked_ns,
            entered_ns,
            left_ns,
            token: Some(entered_ns),
            shared: false,
        }
    }

    fn shared(process: usize, entered_ns: u64, left_ns: u64) -> Grant {
        Grant {
            shared: true,
            ..grant(process, 0, entered_ns, left_ns)
        }
    }

    /// The problems [`check_grants`] finds in `grants`, the first of which
    /// mentions `found`.
    fn problems_with(
        grants: &mut [Grant],
        holders: usize,
        counter: Option<u64>,
        found: &str,
    ) -> Vec<String> {
        let problems = check_grants(grants, holders, counter);
        assert!(
            problems.first().is_some_and(|p| p.contains(found)),
            "{problems:?}"
        );
        problems
    }

    /// The negative control of a read-write lock: a writer overlapping a
    /// reader is found, readers overlapping each other are not.
    #[test]
    fn a_writer_beside_a_reader_is_found_and_readers_together_are_not() {
        let mut readers = vec![shared(0, 10, 30), shared(1, 20, 40), shared(2, 25, 26)];
        assert!(check_grants(&mut readers, 1, Some(0)).is_empty());
        assert_eq!(most_shared(&readers), 3);
        // Writers before and after the readers, apart from them: fine.
        let mut apart = vec![
            grant(3, 0, 1, 5),
            shared(0, 10, 30),
            shared(1, 20, 40),
            grant(3, 0, 41, 45),
        ];
        assert!(check_grants(&mut apart, 1, Some(2)).is_empty());
        // A writer inside while a reader is (entering after it, or before).
        for mut overlapping in [
            vec![shared(0, 10, 30), grant(1, 0, 20, 25)],
            vec![grant(1, 0, 10, 25), shared(0, 20, 30)],
        ] {
            let problems = problems_with(&mut overlapping, 1, Some(1), "exclusion violated");
            assert_eq!(problems.len(), 1, "{problems:?}");
        }
        // The counter counts the writers only.
        let mut lost = vec![grant(1, 0, 1, 5), shared(0, 10, 30), grant(1, 0, 31, 35)];
        problems_with(&mut lost, 1, Some(1), "1 increments lost");
        // Readers granted together may enter out of token order; a reader
        // after a writer may not have a lower token than the writer's.
        let mut together = vec![shared(0, 10, 30), shared(1, 11, 31), grant(2, 0, 40, 45)];
        together[0].token = Some(2);
        together[1].token = Some(1);
        together[2].token = Some(3);
        assert!(check_grants(&mut together, 1, None).is_empty());
        together[2].token = Some(2);
        problems_with(&mut together, 1, None, "did not increase");
        let mut stale_reader = vec![grant(2, 0, 1, 5), shared(0, 10, 30)];
        stale_reader[0].token = Some(4);
        stale_reader[1].token = Some(3);
        problems_with(&mut stale_reader, 1, None, "did not increase");
    }

    /// A record written before the shared flag existed reads as exclusive.
    #[test]
    fn a_grant_without_the_flag_is_exclusive() {
        let old = r#"{"process":1,"asked_ns":2,"entered_ns":3,"left_ns":4,"token":5}"#;
        let grant: Grant = serde_json::from_str(old).expect("old record");
        assert!(!grant.shared);
        assert_eq!(grant.token, Some(5));
    }

    #[test]
    fn disjoint_grants_with_a_matching_counter_pass() {
        let mut grants = vec![
            grant(1, 0, 20, 25),
            grant(0, 0, 10, 15),
            grant(0, 16, 30, 35),
        ];
        assert!(check_grants(&mut grants, 1, Some(3)).is_empty());
        assert_eq!(grants[0].entered_ns, 10, "sorted by entry");
    }

    /// The negative controls: each broken input is found.
    #[test]
    fn overlaps_lost_increments_and_tokens_out_of_order_are_found() {
        let mut overlapping = vec![grant(0, 0, 10, 30), grant(1, 0, 20, 40)];
        let problems = problems_with(&mut overlapping, 1, None, "exclusion violated");
        assert_eq!(problems.len(), 1, "{problems:?}");
        // Two holders are within a two-permit rule; three are not.
        let mut three = vec![
            grant(0, 0, 10, 50),
            grant(1, 0, 20, 50),
            grant(2, 0, 30, 50),
        ];
        assert!(check_grants(&mut three.clone(), 2, None)
            .iter()
            .any(|p| p.contains("more than 2")));
        assert!(check_grants(&mut three[..2], 2, None).is_empty());

        let mut lost = vec![grant(0, 0, 10, 15), grant(1, 0, 20, 25)];
        problems_with(&mut lost, 1, Some(1), "1 increments lost");

        let mut stale = vec![grant(0, 0, 10, 15), grant(1, 0, 20, 25)];
        stale[1].token = Some(3);
        stale[0].token = Some(7);
        problems_with(&mut stale, 1, None, "did not increase");
    }

    #[test]
    fn duplicate_ids_are_found() {
        assert_eq!(check_ids(vec![(1, 10), (11, 20), (21, 21)]), None);
        let found = check_ids(vec![(11, 20), (1, 12), (20, 20)]).expect("duplicates");
        assert!(found.starts_with("3 ids"), "{found}");
    }

    #[test]
    fn the_journal_keeps_runs_of_ids_and_increments_the_counter() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("counter");
        create_counter(&path).expect("create");
        let journal = Journal::new(3, Some(&path)).expect("journal");
        for id in [1, 2, 3, 7, 8] {
            journal.id(id);
        }
        assert_eq!(journal.ids(), [(1, 3), (7, 8)]);
        journal
            .critical_section(monotonic_ns(), Some(1))
            .expect("inside");
        journal
            .critical_section(monotonic_ns(), None)
            .expect("inside");
        assert_eq!(read_counter(&path).expect("read"), 2);
        // A reader reads the counter, and leaves it as it is.
        journal
            .shared_section(monotonic_ns(), Some(3))
            .expect("inside");
        assert_eq!(read_counter(&path).expect("read"), 2);
        assert_eq!(journal.process(), 3);
        let grants = journal.grants();
        assert_eq!(grants.len(), 3);
        assert!(grants[2].shared && !grants[0].shared);
        assert!(grants
            .iter()
            .all(|g| g.process == 3 && g.entered_ns <= g.left_ns));
    }

    #[test]
    fn runs_count_only_while_another_process_asks() {
        // Process 0 alone three times, then twice more while 1 waits
        // (asked at 35, granted at 60): a run of three (the grant before
        // it asked, and two ahead of it).
        let grants = vec![
            grant(0, 0, 10, 11),
            grant(0, 12, 20, 21),
            grant(0, 22, 30, 31),
            grant(0, 32, 40, 41),
            grant(0, 42, 50, 51),
            grant(1, 35, 60, 61),
        ];
        assert_eq!(longest_run(&grants), 3);
        let handoffs = handoffs(&grants).expect("histogram").expect("one hand-off");
        assert_eq!(handoffs.summary().p50_ns, 9);
    }
}
