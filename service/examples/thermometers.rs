//! A Kafka-driven program of one's own: a topic of plain readings
//! (`{"celsius": 21.5}`, keyed by sensor id) drives one `thermometer`
//! entity per sensor, which also answers a query no producer writes
//! (`Average`). `colo::kafka::json_events` decodes each payload as a
//! `Reading` and maps it to the entity's message; the key is the id.
//!
//! ```text
//! cargo build -p colo --example thermometers
//! target/debug/examples/thermometers --listen 127.0.0.1:7201 --admin-listen 127.0.0.1:9201 \
//!     --coordinator 127.0.0.1:7201 --set kafka.bootstrap_servers=127.0.0.1:9092 \
//!     --set 'kafka.topics.thermometer=["readings"]' --set kafka.create_topics=true &
//! printf 'sensor-1\t{"celsius": 20.4}\nsensor-1\t{"celsius": 21.1}\n' > readings.txt
//! target/debug/colo produce --topic readings --records readings.txt
//! target/debug/colo ask --addr 127.0.0.1:7201 --id sensor-1 Average
//! ```

use colo::kafka::json_events;
use colo::{Entity, EntityContext, EntityError, EntityType, NodeProgram};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

/// What the topic carries: a fact, not a command.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reading {
    celsius: f64,
}

/// What a thermometer is told (readings, from Kafka) or asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum ThermometerMsg {
    Reading(Reading),
    Average,
}

/// The readings so far; `average` is absent before the first.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Summary {
    readings: u64,
    average: Option<f64>,
}

#[derive(Debug, Default)]
struct Thermometer {
    readings: u64,
    sum: f64,
}

impl Entity for Thermometer {
    type Message = ThermometerMsg;
    type Reply = Summary;

    async fn handle(
        &mut self,
        _ctx: &EntityContext,
        message: ThermometerMsg,
    ) -> Result<Summary, EntityError> {
        if let ThermometerMsg::Reading(reading) = message {
            if !reading.celsius.is_finite() {
                return Err(EntityError::new("a reading must be a finite number"));
            }
            self.readings += 1;
            self.sum += reading.celsius;
        }
        Ok(Summary {
            readings: self.readings,
            average: (self.readings > 0).then(|| self.sum / self.readings as f64),
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let program = match NodeProgram::from_args() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("thermometers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let program = program.entity_type_with_records(
        |settings| {
            EntityType::new("thermometer", |_| Thermometer::default()).with_settings(settings)
        },
        json_events::<Reading>().into_messages(ThermometerMsg::Reading),
    );
    match program.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("thermometers: {e}");
            ExitCode::FAILURE
        }
    }
}
