//! The bench's options (`cargo bench -p bakery-serve --bench serve -- …`).

use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: cargo bench -p bakery-serve --bench serve -- [OPTIONS]

  --duration D        timed part of every cell (default 5s)
  --warmup D          untimed part before it (default 1s)
  --uri URI           a store to serve (repeatable); default: a SQLite file in
                      a temporary directory, memory://, and $BAKERY_POSTGRES_URI
                      when it is set
  --bakery PATH       the `bakery` binary, built with the serve feature
                      (default: target/release/bakery beside this bench)
  --connections N     keep-alive connections of the single-id cells (default 64)
  --rounds N          rounds of every cell, each on a fresh server; every cell is
                      shown by its median round (default 3)
  --lock-clients LIST lock clients, comma-separated (default 1,4,16)
  --block-sizes LIST  ids per /reserve of the thin client (default 100000,1000)
  --client-threads N  worker threads of the load generator's runtime (default 2)
  --client NAME=CMD   also run a client's bench (repeatable): CMD, run by sh from
                      the repository root with BAKERY_URL (the server) and
                      BAKERY_BENCH_SECONDS set, prints one JSON line with
                      ids_per_s, block and lock_ops_per_s (clients/README.md)
  --out FILE          also write the Markdown section to FILE
";

/// What to measure, and where to write it.
#[derive(Debug, Clone)]
pub struct Args {
    pub duration: Duration,
    pub warmup: Duration,
    pub uris: Vec<String>,
    pub bakery: Option<PathBuf>,
    pub connections: usize,
    pub rounds: usize,
    pub lock_clients: Vec<usize>,
    pub block_sizes: Vec<u64>,
    pub client_threads: usize,
    /// Client benches: (name, shell command).
    pub clients: Vec<(String, String)>,
    pub out: Option<PathBuf>,
    /// Run by `cargo bench` (it passes `--bench`); `cargo test
    /// --all-targets` runs the binary without it, and then it only says so.
    pub bench: bool,
    pub help: bool,
    /// The options as given (without `--bench`, `--bakery` and `--out`),
    /// for the report.
    pub given: Vec<String>,
}

impl Default for Args {
    fn default() -> Args {
        Args {
            duration: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            uris: Vec::new(),
            bakery: None,
            connections: 64,
            rounds: 3,
            lock_clients: vec![1, 4, 16],
            block_sizes: vec![100_000, 1_000],
            client_threads: 2,
            clients: Vec::new(),
            out: None,
            bench: false,
            help: false,
            given: Vec::new(),
        }
    }
}

impl Args {
    /// The connection counts of the single-id cells: 1 (a round trip with
    /// nothing else in flight) and `--connections`.
    pub fn connection_counts(&self) -> Vec<usize> {
        let mut counts = vec![1, self.connections];
        counts.dedup();
        counts
    }

    /// Parse the arguments after the program name. `--name value` and
    /// `--name=value` both work.
    pub fn parse(raw: impl IntoIterator<Item = String>) -> Result<Args, String> {
        let mut args = Args::default();
        let mut raw = raw.into_iter();
        while let Some(arg) = raw.next() {
            if arg == "--bench" {
                args.bench = true;
                continue;
            }
            if arg == "--help" || arg == "-h" {
                args.help = true;
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) => (name.to_string(), Some(value.to_string())),
                None => (arg.clone(), None),
            };
            let value = match inline {
                Some(value) => value,
                None => raw
                    .next()
                    .ok_or_else(|| format!("{name} needs a value\n\n{USAGE}"))?,
            };
            // Where the binary and the output are does not change a figure
            // (nor how a client is started: its name is enough).
            if name == "--client" {
                let client = value
                    .split_once('=')
                    .map_or(value.as_str(), |(name, _)| name);
                args.given.push(format!("{name} {}", quoted(client)));
            } else if name != "--bakery" && name != "--out" {
                args.given.push(format!("{name} {}", quoted(&value)));
            }
            match name.as_str() {
                "--duration" => args.duration = duration(&name, &value)?,
                "--warmup" => args.warmup = duration(&name, &value)?,
                "--uri" => args.uris.push(value),
                "--bakery" => args.bakery = Some(PathBuf::from(value)),
                "--connections" => args.connections = positive(&name, &value)?,
                "--rounds" => args.rounds = positive(&name, &value)?,
                "--lock-clients" => args.lock_clients = list(&name, &value)?,
                "--block-sizes" => args.block_sizes = list(&name, &value)?,
                "--client-threads" => args.client_threads = positive(&name, &value)?,
                "--client" => {
                    let (client, command) = value
                        .split_once('=')
                        .filter(|(client, command)| !client.is_empty() && !command.is_empty())
                        .ok_or_else(|| format!("{name} {value:?}: expected NAME=COMMAND"))?;
                    args.clients.push((client.to_owned(), command.to_owned()));
                }
                "--out" => args.out = Some(PathBuf::from(value)),
                _ => return Err(format!("unknown option {name}\n\n{USAGE}")),
            }
        }
        if args.duration.is_zero() {
            return Err("--duration must be more than 0".into());
        }
        Ok(args)
    }
}

fn duration(name: &str, value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value).map_err(|err| format!("{name} {value:?}: {err}"))
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(
    name: &str,
    value: &str,
) -> Result<T, String> {
    match value.trim().parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err(format!("{name} {value:?}: expected a number above 0")),
    }
}

fn list<T: std::str::FromStr + PartialOrd + Default>(
    name: &str,
    value: &str,
) -> Result<Vec<T>, String> {
    value.split(',').map(|item| positive(name, item)).collect()
}

/// `value` as a shell word.
fn quoted(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/:._-,@=+".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}
