//! A built-in entity type, usable without Kafka or any code of one's own:
//! a counter per id. It is what the demo runs, and what a cluster can be
//! tried with by hand.

use crate::entity::{Entity, EntityContext, EntityError};
use serde::{Deserialize, Serialize};

/// The entity type name under which nodes register the counter.
pub const COUNTER: &str = "counter";

/// What a counter is told or asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CounterMsg {
    /// Adds to the value; answers the new value.
    Add(i64),
    /// Answers the value.
    Get,
}

/// A counter. Its value is in memory only until the state store lands:
/// after a hand-off it starts again from zero.
#[derive(Debug, Default, Clone)]
pub struct Counter {
    value: i64,
}

impl Entity for Counter {
    type Message = CounterMsg;
    type Reply = i64;

    async fn handle(
        &mut self,
        _ctx: &EntityContext,
        message: CounterMsg,
    ) -> Result<i64, EntityError> {
        match message {
            CounterMsg::Add(n) => {
                self.value = self
                    .value
                    .checked_add(n)
                    .ok_or_else(|| EntityError::new("counter overflow"))?;
            }
            CounterMsg::Get => {}
        }
        Ok(self.value)
    }
}
