//! The sample's `user` entity type kept in memory only, as `colo run`
//! registered it before durable state: the baseline the Kafka benchmark
//! measures durable state's cost against (`cargo bench -p colo-tests
//! --bench kafka`). Takes `colo run`'s flags.
//!
//! ```text
//! cargo build --release -p colo --example users_in_memory
//! ```

use colo::process::samples::purchases::{purchase_records, User, USER};
use colo::{EntityType, NodeProgram};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let program = match NodeProgram::from_args() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("users_in_memory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let program = program.entity_type_with_records(
        |settings| EntityType::new(USER, |_| User::default()).with_settings(settings),
        purchase_records(),
    );
    match program.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("users_in_memory: {e}");
            ExitCode::FAILURE
        }
    }
}
