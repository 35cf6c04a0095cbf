//! The sample's users, durable, each purchase also emitting a receipt to
//! `<cluster>.user.receipts` (an output record, sent once the purchase's
//! change is durable): what the outputs benchmark measures the cost of an
//! output per record with (`cargo bench -p colo-tests --bench outputs`),
//! against the same program with `COLO_RECEIPTS=0`, which declares no
//! output and emits none. Takes `colo run`'s flags.
//!
//! ```text
//! cargo build --release -p colo --example users_with_receipts
//! ```

use colo::process::samples::purchases::{purchase_records, UserMsg, UserStats, USER};
use colo::{Entity, EntityContext, EntityError, EntityType, NodeProgram};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

/// A user's totals; a receipt per purchase when its type has an output.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ReceiptUser {
    stats: UserStats,
}

impl Entity for ReceiptUser {
    type Message = UserMsg;
    type Reply = UserStats;

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        msg: UserMsg,
    ) -> Result<UserStats, EntityError> {
        if let UserMsg::Purchase(purchase) = &msg {
            self.stats.add(purchase)?;
            if let Some(topic) = ctx.output_topics().first() {
                let receipt = format!(
                    "{} bought {} x {} at {}",
                    ctx.entity_id(),
                    purchase.quantity,
                    purchase.product,
                    purchase.price
                );
                ctx.emit(topic, ctx.entity_id().as_bytes(), receipt.as_bytes())
                    .map_err(|e| EntityError::new(e.to_string()))?;
            }
        }
        Ok(self.stats.clone())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let program = match NodeProgram::from_args() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("users_with_receipts: {e}");
            return ExitCode::FAILURE;
        }
    };
    let emit = std::env::var("COLO_RECEIPTS").map_or(true, |v| v != "0");
    let receipts = program
        .config()
        .kafka
        .as_ref()
        .filter(|_| emit)
        .map(|kafka| format!("{}.{USER}.receipts", kafka.cluster));
    let program = program.entity_type_with_records(
        |settings| {
            EntityType::new(USER, |_| ReceiptUser::default())
                .with_settings(settings)
                .durable(1)
                .with_outputs(receipts.clone())
        },
        purchase_records(),
    );
    match program.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("users_with_receipts: {e}");
            ExitCode::FAILURE
        }
    }
}
