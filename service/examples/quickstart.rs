//! The README's example: one node, the built-in counter, a tell and an ask.
//!
//! `cargo run -p colo --example quickstart`

use colo::allocation::LeastShardAllocationStrategy;
use colo::process::samples::counter::{Counter, CounterMsg};
use colo::{CoordinatorHandle, EntityType, InMemoryNetwork, InMemoryStore, Node, ShardingSettings};
use std::{sync::Arc, time::Duration};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let network = InMemoryNetwork::new();
    let settings = ShardingSettings::default(); // Akka's defaults
    network.host_coordinator(CoordinatorHandle::spawn(
        "counter",
        settings.clone(),
        Box::new(LeastShardAllocationStrategy::default()),
        Arc::new(InMemoryStore::new()),
    )?);
    let node = Node::new(network.transport("node-1"));
    let counters = node.start_region(
        EntityType::new("counter", |_id| Counter::default()).with_settings(settings),
    )?;
    counters.tell("user-42", CounterMsg::Add(5)).await?;
    let value = counters
        .ask("user-42", CounterMsg::Get, Duration::from_secs(1))
        .await?;
    println!("user-42 = {value}");
    assert_eq!(value, 5);
    node.shutdown().await;
    Ok(())
}
