//! Helpers shared by the root integration tests.

use std::path::Path;
use std::process::Command;

/// Run `scripts/backends.sh ACTION NAME` (start, stop, restart, kill a
/// server the project's script manages) and panic with its stderr if it
/// fails.
pub fn backends(action: &str, name: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/backends.sh");
    let out = Command::new(&script)
        .args([action, name])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "backends.sh {action} {name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
