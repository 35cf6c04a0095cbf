//! A node program of one's own whose entities keep durable timers, fed by
//! Kafka: one `customer` per key schedules a follow-up for each visit event
//! (`{"follow_up": "call-back", "after_ms": 60000}`), and counts the
//! follow-ups that came. A follow-up comes once, after its time, on
//! whichever node hosts the customer then, through moves and crashes.
//!
//! ```text
//! cargo build -p colo --example follow_ups
//! target/debug/examples/follow_ups --listen 127.0.0.1:7401 --admin-listen 127.0.0.1:9401 \
//!     --coordinator 127.0.0.1:7401 --set kafka.bootstrap_servers=127.0.0.1:9092 \
//!     --set 'kafka.topics.customer=["visits"]' --set kafka.create_topics=true &
//! target/debug/colo ask --addr 127.0.0.1:7401 --type customer --id ann Report
//! ```

use colo::kafka::json_events;
use colo::{Entity, EntityContext, EntityError, EntityType, NodeProgram};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

/// What the topic carries: a visit, and the follow-up it asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Visit {
    follow_up: String,
    after_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum CustomerMsg {
    Visit(Visit),
    /// What a follow-up's timer brings.
    FollowUp(String),
    Report,
}

/// How many follow-ups were scheduled and came; `twice`: those that came
/// again (none should).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    scheduled: u64,
    followed_up: u64,
    twice: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Customer {
    scheduled: u64,
    followed_up: BTreeSet<String>,
    twice: u64,
}

impl Entity for Customer {
    type Message = CustomerMsg;
    type Reply = Report;

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        msg: CustomerMsg,
    ) -> Result<Report, EntityError> {
        match msg {
            CustomerMsg::Visit(visit) => {
                let after = Duration::from_millis(visit.after_ms);
                let follow_up = CustomerMsg::FollowUp(visit.follow_up.clone());
                // A bad name fails the handler: the record is retried,
                // then dead-lettered with the reason.
                ctx.schedule_after(&visit.follow_up, after, &follow_up)
                    .map_err(|e| EntityError::new(e.to_string()))?;
                self.scheduled += 1;
            }
            CustomerMsg::FollowUp(name) => {
                if !self.followed_up.insert(name) {
                    self.twice += 1;
                }
            }
            CustomerMsg::Report => {}
        }
        Ok(Report {
            scheduled: self.scheduled,
            followed_up: self.followed_up.len() as u64,
            twice: self.twice,
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let program = match NodeProgram::from_args() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("follow_ups: {e}");
            return ExitCode::FAILURE;
        }
    };
    let program = program.entity_type_with_records(
        |settings| {
            EntityType::new("customer", |_| Customer::default())
                .with_settings(settings)
                .durable(1)
        },
        json_events::<Visit>().into_messages(CustomerMsg::Visit),
    );
    match program.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("follow_ups: {e}");
            ExitCode::FAILURE
        }
    }
}
