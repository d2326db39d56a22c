#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script).
# Formatting, lints, docs, then every test: unit tests, doctests, the CLI's
# multi-process tests and the conformance suite on every configured backend.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "test.sh: cargo not found; install Rust with rustup first" >&2
    exit 1
fi
# rustfmt and clippy come with rustup's default profile; add them if missing.
if command -v rustup >/dev/null 2>&1; then
    for component in rustfmt clippy; do
        rustup component list --installed 2>/dev/null | grep -q "^$component" ||
            rustup component add "$component"
    done
fi

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo doc (broken links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --quiet

step "cargo test (unit, doc, CLI and conformance tests)"
cargo test --workspace --all-features
