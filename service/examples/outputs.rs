//! README's output records: an account emits an alert to the topic
//! `alerts` when its balance first passes 1,000; the alert is kept with
//! the account's state and sent once that change is durable, with its
//! deterministic id in a header. Against librdkafka's in-process mock
//! cluster; read back at the end as a downstream reader would.
//!
//! `cargo run -p colo --example outputs`

use colo::allocation::LeastShardAllocationStrategy;
use colo::kafka::OutputProducer;
use colo::{
    CoordinatorHandle, Entity, EntityContext, EntityError, EntityType, InMemoryNetwork,
    InMemoryStore, Node, NodeStore, ShardingSettings, StateSettings, OUTPUT_ID_HEADER,
};
use colo_connectors::{read_outputs, MockGroupTimings, MockKafka};
use serde::{Deserialize, Serialize};
use std::{sync::Arc, time::Duration};

const LIMIT: i64 = 1_000;

#[derive(Default, Serialize, Deserialize)]
struct Account {
    balance: i64,
}

#[derive(Serialize, Deserialize)]
enum AccountMsg {
    Deposit(i64),
}

impl Entity for Account {
    type Message = AccountMsg;
    type Reply = i64;

    async fn handle(&mut self, ctx: &EntityContext, msg: AccountMsg) -> Result<i64, EntityError> {
        let AccountMsg::Deposit(amount) = msg;
        let before = self.balance;
        self.balance += amount;
        if before <= LIMIT && self.balance > LIMIT {
            let alert = format!("balance passed {LIMIT}: {}", self.balance);
            ctx.emit("alerts", ctx.entity_id().as_bytes(), alert.as_bytes())
                .map_err(|e| EntityError::new(e.to_string()))?;
        }
        Ok(self.balance)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kafka = MockKafka::start(1, MockGroupTimings::default())?;
    kafka.create_topic("alerts", 4)?;
    let bootstrap = kafka.bootstrap_servers();

    let network = InMemoryNetwork::new();
    let settings = ShardingSettings::default();
    network.host_coordinator(CoordinatorHandle::spawn(
        "account",
        settings.clone(),
        Box::new(LeastShardAllocationStrategy::default()),
        Arc::new(InMemoryStore::new()),
    )?);
    let data = tempfile::tempdir()?;
    let outputs = OutputProducer::new(&bootstrap, &[], Duration::from_secs(10))?;
    let store = NodeStore::open(data.path(), StateSettings::default())?.with_outputs(outputs);
    let node = Node::with_state_store(network.transport("node-1"), store);
    let accounts = node.start_region(
        EntityType::new("account", |_id| Account::default())
            .with_settings(settings)
            .durable(1)
            .with_outputs(["alerts"]),
    )?;

    let ask = Duration::from_secs(5);
    for (account, amount) in [("ann", 600), ("bo", 300), ("ann", 600), ("ann", 50)] {
        let balance = accounts
            .ask(account, AccountMsg::Deposit(amount), ask)
            .await?;
        println!("{account}: deposited {amount}, balance {balance}");
    }
    // Sent once its change is durable: read back until it is there (5 s
    // at most).
    let mut alerts = Vec::new();
    for _ in 0..50 {
        let read = tokio::task::spawn_blocking({
            let bootstrap = bootstrap.clone();
            move || {
                read_outputs(
                    &bootstrap,
                    &[],
                    "alerts",
                    OUTPUT_ID_HEADER,
                    Duration::from_secs(5),
                )
            }
        })
        .await??;
        if !read.is_empty() {
            alerts = read;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for alert in alerts {
        println!(
            "alerts: {} {:?} ({OUTPUT_ID_HEADER}: {})",
            String::from_utf8_lossy(&alert.key),
            String::from_utf8_lossy(&alert.value),
            alert.id.unwrap_or_default()
        );
    }
    node.shutdown().await;
    Ok(())
}
