//! Lamport's distributed mutex, twice: first simulated (a seeded, printed
//! trace with the clocks, and the checks' verdicts), then for real on tokio
//! (three processes, one task each, taking turns).
//!
//! Run with `cargo run -p bakery-recipes --example lamport_mutex [SEED]`.

use bakery_recipes::lamport::{simulate, LocalGroup, SimConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seed = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 1,
    };

    // 1. Simulated: three processes, three requests in all.
    let report = simulate(&SimConfig {
        requests: 3,
        ..SimConfig::new(3, seed)
    })?;
    for event in &report.trace {
        println!("{event}");
    }
    println!("{}\n", report.verdicts);

    // 2. For real: the same state machine, one tokio task per process.
    let group = LocalGroup::spawn(3)?;
    let workers: Vec<_> = group
        .nodes()
        .iter()
        .cloned()
        .map(|node| {
            tokio::spawn(async move {
                for _ in 0..2 {
                    let request = node.lock().await?;
                    println!("{} holds the lock with request {request}", node.id());
                    node.unlock().await?;
                }
                Ok::<_, bakery_recipes::lamport::TransportError>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    group.shutdown().await?;
    Ok(())
}
