//! A durable entity type of one's own, fed by Kafka: one `item` per SKU
//! keeps its stock level from the topic's stock events
//! (`{"delta": -2}`, keyed by SKU), and answers `Level`, a query no
//! producer writes. Its state is durable: it survives passivation, moves
//! between nodes and restarts, and each event counts once.
//!
//! README's "A program of one's own" runs it; `colo verify --type item`
//! checks every SKU's level against a file of expected replies.

use colo::kafka::json_events;
use colo::{Entity, EntityContext, EntityError, EntityType, NodeProgram};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

/// What the topic carries: a change of stock, positive when goods arrive.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StockEvent {
    delta: i64,
}

/// What an item is told (stock events, from Kafka) or asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum ItemMsg {
    Stock(StockEvent),
    Level,
}

/// An item's answer: its level, and how many events made it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Level {
    on_hand: i64,
    events: u64,
}

/// The entity's value is its durable state: what `durable(1)` keeps.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Item {
    on_hand: i64,
    events: u64,
}

impl Entity for Item {
    type Message = ItemMsg;
    type Reply = Level;

    async fn handle(
        &mut self,
        _ctx: &EntityContext,
        message: ItemMsg,
    ) -> Result<Level, EntityError> {
        if let ItemMsg::Stock(event) = message {
            // A failed handler changes nothing; the record is delivered
            // again, and after its retries goes to the dead-letter topic
            // with this reason.
            self.on_hand = self
                .on_hand
                .checked_add(event.delta)
                .ok_or_else(|| EntityError::new("the stock level would overflow"))?;
            self.events += 1;
        }
        Ok(Level {
            on_hand: self.on_hand,
            events: self.events,
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let program = match NodeProgram::from_args() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("inventory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let program = program.entity_type_with_records(
        |settings| {
            EntityType::new("item", |_| Item::default())
                .with_settings(settings)
                .durable(1)
        },
        json_events::<StockEvent>().into_messages(ItemMsg::Stock),
    );
    match program.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inventory: {e}");
            ExitCode::FAILURE
        }
    }
}
