//! A node program of one's own: an `account` entity type (a balance with
//! deposits and withdrawals) run as a cluster of processes, with the same
//! config, servers, metrics, health and graceful shutdown as `colo run`.
//!
//! ```text
//! cargo build -p colo --example accounts
//! target/debug/examples/accounts --listen 127.0.0.1:7101 --admin-listen 127.0.0.1:9101 --coordinator 127.0.0.1:7101 &
//! target/debug/colo ask --addr 127.0.0.1:7101 --type account --id alice '{"Deposit":10}'
//! ```

use colo::{Entity, EntityContext, EntityError, EntityType, NodeProgram};
use serde::{Deserialize, Serialize};
use std::process::ExitCode;

/// What an account is told or asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum AccountMsg {
    Deposit(u64),
    Withdraw(u64),
    Balance,
}

/// What an account answers: a refusal is an answer, not a failure, so the
/// account stays as it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum AccountReply {
    Balance(u64),
    Refused(String),
}

/// A balance, in memory: it starts again from 0 after passivation, a move
/// or a restart (`examples/inventory` shows a durable entity type).
#[derive(Debug, Default)]
struct Account {
    balance: u64,
}

impl Entity for Account {
    type Message = AccountMsg;
    type Reply = AccountReply;

    async fn handle(
        &mut self,
        _ctx: &EntityContext,
        message: AccountMsg,
    ) -> Result<AccountReply, EntityError> {
        match message {
            AccountMsg::Deposit(amount) => match self.balance.checked_add(amount) {
                Some(balance) => self.balance = balance,
                None => return Ok(AccountReply::Refused("balance would overflow".into())),
            },
            AccountMsg::Withdraw(amount) => match self.balance.checked_sub(amount) {
                Some(balance) => self.balance = balance,
                None => {
                    return Ok(AccountReply::Refused(format!(
                        "insufficient funds: {} available",
                        self.balance
                    )))
                }
            },
            AccountMsg::Balance => {}
        }
        Ok(AccountReply::Balance(self.balance))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let program = match NodeProgram::from_args() {
        Ok(program) => program,
        Err(e) => {
            eprintln!("accounts: {e}");
            return ExitCode::FAILURE;
        }
    };
    let program = program.entity_type(|settings| {
        EntityType::new("account", |_| Account::default()).with_settings(settings)
    });
    match program.run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("accounts: {e}");
            ExitCode::FAILURE
        }
    }
}
