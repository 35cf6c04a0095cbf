#!/usr/bin/env bash
# Installs what the tests need (idempotently) and runs all of them:
# formatting, lints, unit tests, the in-process cluster scenarios, doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- what the tests need -----------------------------------------------------
# The Rust toolchain comes with the machine; make sure its lint and format
# components are there (a no-op when they are).
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

# --- the tests -----------------------------------------------------------------
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
# One closing line for the whole run (cargo's own last line is the last
# crate's doc tests, often 0 of them).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
