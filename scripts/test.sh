#!/usr/bin/env bash
# Installs what the tests need (idempotently) and runs all of them:
# formatting, lints, unit tests, the in-process cluster scenarios, the
# end-to-end tests that start `colo run` processes, doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- what the tests need -----------------------------------------------------
# The Rust toolchain comes with the machine; make sure its lint and format
# components are there (a no-op when they are).
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
# The test runner: every test in a process of its own, under the deadline
# set in .config/nextest.toml.
if ! cargo nextest --version >/dev/null 2>&1; then
  cargo install cargo-nextest --locked
fi

# The operations tests (and the TLS tests' certificates): a real Prometheus (and promtool) scraping test
# nodes, docker-compose to resolve and validate the compose file (its
# `config` needs no Docker engine), and headless Chromium for the cluster
# map page. Debian's packages, installed once.
missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# scripts/certs.sh makes the TLS tests' CA and certificates with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# Apache Kafka, the broker the Kafka tests and benchmarks start on loopback,
# runs on Java 17 and comes from Maven Central through Maven.
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
# kcat, the command-line client, with its default partitioner (not murmur2)
# (tests/tests/partitioners.rs).
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# ip (iproute2): the seeded fault schedules put each node in a network
# namespace of its own and cut its link
# (tests/tests/exactly_once_under_faults.rs); that needs root.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
  sudo_if_needed=()
  [ "$(id -u)" -eq 0 ] || sudo_if_needed=(sudo)
  "${sudo_if_needed[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_if_needed[@]}" apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

# Apache Kafka's server and a logging backend (tests/kafka/pom.xml), copied
# from Maven's repository into target/kafka/lib; once.
bash tests/kafka/fetch.sh

# A Kafka client no one here wrote, with its default partitioner (not
# murmur2): confluent-kafka for Python, from PyPI, in a virtual environment
# of its own under target/ (tests/tests/partitioners.rs).
if ! target/python/bin/python3 -c 'import confluent_kafka' >/dev/null 2>&1; then
  python3 -m venv target/python
  target/python/bin/pip install --quiet --disable-pip-version-check confluent-kafka==2.16.1
fi

# librdkafka's TLS needs OpenSSL: the system's where its headers are
# (Debian's libssl-dev), rather than one built from source for each build
# profile (DEVELOPERS.md, "What the build needs").
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl; then
  export OPENSSL_NO_VENDOR=1
fi

# --- the tests -----------------------------------------------------------------
# One build from a clean tree: incremental state would only add disk (several
# gigabytes over the test binaries) and time.
export CARGO_INCREMENTAL=0
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# README's cluster runs the release binary (tests/tests/readme/ runs that
# block as written); built here, so no test spends its deadline on it.
cargo build --release -p colo --locked
# The release binary's own commands run next, before a benchmark build
# (whose dev-dependencies' features differ) replaces the binary and a
# `cargo run --release` would build it again.
# README's first command, the Kafka demo, as shown: it checks itself and
# fails unless every record was handled.
grep -qF "    cargo run --release -p colo -- demo" README.md
cargo run --release --locked -p colo -- demo | tail -n 8
# README's simulate command, as shown (it reads the traces in ../shared).
simulate=$(awk '/^    cargo run --release -p colo -- simulate/ {on = 1}
  on {sub(/^    /, ""); print; if (!/\\$/) exit}' README.md)
test -n "$simulate"
bash -c "set -euo pipefail; $simulate" | tail -n 3
# One Apache Kafka broker for the tests to share (each uses topics and
# groups of its own; a test that restarts or measures its broker, or needs
# one with compaction or credentials, starts its own): a broker takes
# seconds of both cores to start. Stopped by its PID when this script
# ends.
cargo build --locked -p colo-tests --bin shared-broker
shared_file=$(mktemp)
target/debug/shared-broker "$shared_file" &
shared_pid=$!
trap 'kill "$shared_pid" 2>/dev/null || true; wait "$shared_pid" 2>/dev/null || true; rm -f "$shared_file"' EXIT
for _ in $(seq 1 120); do
  if [ -s "$shared_file" ]; then break; fi
  kill -0 "$shared_pid"
  sleep 1
done
COLO_TEST_BROKER=$(cat "$shared_file")
test -n "$COLO_TEST_BROKER"
export COLO_TEST_BROKER
# A failing test's panic line, not a backtrace, is what ends the log
# (.config/nextest.toml prints failures again after the summary).
export RUST_BACKTRACE=0
cargo nextest run --workspace --locked
# The tests of rebalances, hand-offs, durable state and the election once
# more with the consumer group protocol (KIP-848): the broker assigns.
COLO_TEST_GROUP_PROTOCOL=consumer cargo nextest run -p colo-tests --locked \
  --test kafka_nodes --test durable_state --test coordinator_election \
  -E 'test(joins_stops) | test(graceful_changes) | test(session_expiry) | test(totals_are_exact_through) | test(three_nodes) | test(killed_under_load)'
kill "$shared_pid"
wait "$shared_pid" || true
unset COLO_TEST_BROKER
# Doc tests (the runner above does not run them).
cargo test --workspace --locked --doc
# Every benchmark README shows, as shown: it must run for a new user (its
# figures go to BENCHMARKS.md from quiet runs, not from here). Built in one
# go first, so that they compile side by side rather than one by one.
cargo bench --workspace --locked --no-run
for bench in routing passivation remote_ask io_entities restore memory memory_budget durable_ask coordinator_recovery timers; do
  grep -qF "cargo bench -p colo --bench $bench" README.md
  # Each bench smaller than its README run where it has a knob for it:
  # the suite checks that it runs, and stays within its time.
  case "$bench" in
    # The coordinator's history at a fifth of its default: the write goes
    # at the test broker's pace (one record at a time, awaited).
    coordinator_recovery) small=(COLO_BENCH_EVENTS=4000) ;;
    # One round of each replacement policy rather than the median of three.
    passivation) small=(COLO_BENCH_ROUNDS=1) ;;
    # A tenth of the entities.
    memory) small=(COLO_BENCH_ENTITIES=200000 COLO_BENCH_ACTIVE=20000) ;;
    restore) small=(COLO_BENCH_ENTITIES=50000) ;;
    memory_budget) small=(COLO_BENCH_ENTITIES=20000 COLO_BENCH_MESSAGES=100000 COLO_BENCH_BUDGET_MIB=4) ;;
    timers) small=(COLO_BENCH_DUE=20000) ;;
    *) small=() ;;
  esac
  env "${small[@]}" cargo bench -p colo --locked --bench "$bench" | tail -n 3
done
grep -qF "cargo bench -p colo-state --bench store" README.md
cargo bench -p colo-state --locked --bench store | tail -n 4
grep -qF "cargo bench -p colo-tests --bench kafka" README.md
# One throughput run of 200,000 records and one join-and-leave cycle
# instead of three runs of 1,000,000 and five cycles: the suite checks that
# it runs, and stays within its time.
COLO_BENCH_RUNS=1 COLO_BENCH_RECORDS=200000 COLO_BENCH_CYCLES=1 cargo bench -p colo-tests --locked --bench kafka | tail -n 6
grep -qF "cargo bench -p colo-tests --bench failover" README.md
# One cluster of each kind, with fewer shards to place.
COLO_BENCH_RUNS=1 COLO_BENCH_SHARDS=100 cargo bench -p colo-tests --locked --bench failover | tail -n 4
grep -qF "cargo bench -p colo-tests --bench scale" README.md
# Three nodes, 64 shards and 5,000 users rather than ten nodes, 1,024
# shards and ten million.
COLO_BENCH_NODES=3 COLO_BENCH_SHARDS=64 COLO_BENCH_ENTITIES=5000 COLO_BENCH_ACTIVE=1000 \
  cargo bench -p colo-tests --locked --bench scale | tail -n 5
grep -qF "cargo bench -p colo-tests --bench broker" README.md
COLO_BENCH_RUNS=1 COLO_BENCH_CLUSTER_RUNS=1 cargo bench -p colo-tests --locked --bench broker | tail -n 5
grep -qF "cargo bench -p colo-tests --bench outputs" README.md
# One run of each program, 20,000 records of 2,000 users instead of three
# of 200,000.
COLO_BENCH_RUNS=1 COLO_BENCH_RECORDS=20000 COLO_BENCH_USERS=2000 \
  cargo bench -p colo-tests --locked --bench outputs | tail -n 4
grep -qF "cargo bench -p colo-tests --bench partitioners" README.md
# One run of each partitioner, 20,000 records instead of two of 100,000.
COLO_BENCH_RUNS=1 COLO_BENCH_RECORDS=20000 COLO_BENCH_USERS=2000 \
  cargo bench -p colo-tests --locked --bench partitioners | tail -n 4
grep -qF "cargo bench -p colo-tests --bench peers" README.md
# colo beside Kafka Streams and Pekko (built with Maven from peers/, their
# dependencies from Maven Central once): one run of each part, 20,000
# records of 500 users, 1,000 records/s, a 6 s session (the least the
# broker allows), one join and leave (a join that moves nothing waited for
# 20 s, not 60), instead of three runs of 2,000,000, 20,000/s and three
# cycles; a restore of 2,000 users rather than 1,000,000; durable colo,
# Kafka Streams (exactly_once_v2) and Pekko, not the two variants of the
# same programs (colo in memory, Kafka Streams at_least_once). The kill -9
# of the flow part without Pekko: its shards came back on the survivor
# only after about a minute whatever the session timeout (6 s, 12 s and
# 20 s measured), most of this run's time; the other parts run it.
small_peers=(COLO_BENCH_RUNS=1 COLO_BENCH_RESTORE_USERS=2000
  COLO_BENCH_RECORDS=20000 COLO_BENCH_USERS=500 COLO_BENCH_RATE=1000
  COLO_BENCH_WARM_S=2 COLO_BENCH_MEASURE_S=3 COLO_BENCH_SESSION_TIMEOUT_MS=6000
  COLO_BENCH_CYCLES=1 COLO_BENCH_HOLD_S=2 COLO_BENCH_JOIN_WAIT_S=20)
env "${small_peers[@]}" COLO_BENCH_SYSTEMS=colo,eos,pekko \
  cargo bench -p colo-tests --locked --bench peers -- throughput moves restore | tail -n 22
env "${small_peers[@]}" COLO_BENCH_SYSTEMS=colo,eos \
  cargo bench -p colo-tests --locked --bench peers -- flow | tail -n 5
