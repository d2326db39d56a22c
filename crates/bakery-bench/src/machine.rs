//! The machine a run measured on, so every report says what its numbers
//! mean: CPU, cores, memory, OS. Read from `/proc` and `/etc/os-release` on
//! Linux; fields that cannot be read are `None` (shown as "unknown").

use serde::Serialize;

/// What the benchmark ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu_model: Option<String>,
    /// CPUs this process may run on (what the async runtime uses).
    pub logical_cpus: usize,
    /// Physical cores (distinct `physical id`/`core id` pairs).
    pub physical_cores: Option<usize>,
    /// Total memory in bytes (`/proc/meminfo`).
    pub memory_bytes: Option<u64>,
    /// The OS release (`PRETTY_NAME` of `/etc/os-release`), or the OS family.
    pub os: String,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: Option<String>,
    /// CPU architecture (`x86_64`, `aarch64`, …).
    pub arch: &'static str,
}

impl Machine {
    /// Look at this machine.
    pub fn detect() -> Machine {
        let cpuinfo = read("/proc/cpuinfo");
        Machine {
            cpu_model: cpuinfo.as_deref().and_then(cpu_model),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            physical_cores: cpuinfo.as_deref().and_then(physical_cores),
            memory_bytes: read("/proc/meminfo").as_deref().and_then(memory_bytes),
            os: read("/etc/os-release")
                .as_deref()
                .and_then(pretty_name)
                .unwrap_or_else(|| std::env::consts::OS.to_string()),
            kernel: read("/proc/sys/kernel/osrelease").map(|k| k.trim().to_string()),
            arch: std::env::consts::ARCH,
        }
    }

    /// One line: `Intel(R) Xeon(R) …, 2 CPUs (2 cores), 23.4 GiB, Debian GNU/Linux 12, Linux 6.1.0`.
    pub fn one_line(&self) -> String {
        let cores = match self.physical_cores {
            Some(cores) => format!("{} CPUs ({cores} cores)", self.logical_cpus),
            None => format!("{} CPUs", self.logical_cpus),
        };
        let memory = self
            .memory_bytes
            .map_or_else(|| "memory unknown".to_string(), gibibytes);
        let kernel = self
            .kernel
            .as_deref()
            .map_or_else(String::new, |k| format!(", kernel {k}"));
        format!(
            "{}, {cores}, {memory}, {}{kernel}, {}",
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            self.os,
            self.arch
        )
    }

    /// The rows of a two-column Markdown table: CPU, cores, memory, OS, each
    /// ending in a newline (the table's header is the caller's).
    ///
    /// ```
    /// let rows = bakery_bench::machine::Machine::detect().table_rows();
    /// assert!(rows.starts_with("| CPU | ") && rows.lines().count() == 4);
    /// ```
    pub fn table_rows(&self) -> String {
        format!(
            "| CPU | {} |\n| cores | {} logical CPUs{} |\n| memory | {} |\n| OS | {}{} ({}) |\n",
            self.cpu_model.as_deref().unwrap_or("unknown"),
            self.logical_cpus,
            self.physical_cores
                .map_or_else(String::new, |c| format!(", {c} physical cores")),
            self.memory_bytes
                .map_or_else(|| "unknown".to_string(), gibibytes),
            self.os,
            self.kernel
                .as_deref()
                .map_or_else(String::new, |k| format!(", kernel {k}")),
            self.arch
        )
    }
}

/// `12.3 GiB`.
pub fn gibibytes(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (key, value) = line.split_once(':')?;
    (key.trim() == name).then(|| value.trim())
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|line| field(line, "model name").or_else(|| field(line, "Model")))
        .map(str::to_string)
}

fn physical_cores(cpuinfo: &str) -> Option<usize> {
    let mut cores = std::collections::BTreeSet::new();
    let mut package = None;
    for line in cpuinfo.lines() {
        if let Some(id) = field(line, "physical id") {
            package = Some(id.to_string());
        } else if let Some(core) = field(line, "core id") {
            cores.insert((package.clone(), core.to_string()));
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

fn memory_bytes(meminfo: &str) -> Option<u64> {
    let kib = meminfo
        .lines()
        .find_map(|line| field(line, "MemTotal"))?
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kib.checked_mul(1024)
}

fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?;
        Some(value.trim().trim_matches('"').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Test CPU @ 2GHz\nphysical id\t: 0\ncore id\t: 0\n\n\
                       processor\t: 1\nmodel name\t: Test CPU @ 2GHz\nphysical id\t: 0\ncore id\t: 1\n\n\
                       processor\t: 2\nmodel name\t: Test CPU @ 2GHz\nphysical id\t: 0\ncore id\t: 1\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("Test CPU @ 2GHz"));
        assert_eq!(physical_cores(cpuinfo), Some(2));
        assert_eq!(
            memory_bytes("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(
            pretty_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(memory_bytes("nothing"), None);
    }
}
