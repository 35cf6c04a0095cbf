//! The broker the test command starts once for the Kafka tests to share
//! (a broker takes seconds of both cores to start; the tests use topics
//! and groups of their own): `shared-broker FILE` starts it, writes
//! `BOOTSTRAP=DIR` to FILE for `COLO_TEST_BROKER`, and stops it (by its
//! PID) at SIGTERM or SIGINT.

use colo_tests::broker::Broker;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let Some(file) = std::env::args().nth(1) else {
        eprintln!("usage: shared-broker FILE");
        std::process::exit(2);
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let broker = Broker::start_own();
    let shared = format!("{}={}", broker.bootstrap(), broker.dir().display());
    std::fs::write(&file, &shared).expect("write the shared broker's address");
    println!("shared broker: {shared}");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(broker);
}
