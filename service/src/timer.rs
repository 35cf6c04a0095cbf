//! Durable timers as a handler asks for them: `EntityContext::schedule`
//! and `cancel` note what the handler wants, and its shard applies that
//! with the change the handler made, in the same write, once the handler
//! has succeeded. A handler that fails schedules and cancels nothing, as
//! it changes nothing.
//!
//! A timer is the entity's: kept in its state record, so it survives
//! passivation, a hand-off, a restart and a crash exactly as the state
//! does, and its shard's index orders the shard's timers by due time. A
//! due timer brings its message to its entity like a record: applied once
//! in effect, as its firing removes it in the write of the change it made.

use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// The longest timer name, in bytes: a name is in every index key of its
/// timer.
pub const MAX_TIMER_NAME: usize = 256;

/// Why a timer was not scheduled or cancelled. Nothing of the handler's is
/// lost: it may go on, and what it scheduled before still stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// Only a durable entity type keeps timers: they live in the state
    /// record.
    #[error("this entity type is not durable: timers are kept with the entity's state (EntityType::durable)")]
    NotDurable,
    /// The name is empty or too long.
    #[error("timer name {name:?}: it must be 1 to {MAX_TIMER_NAME} bytes, it is {len}")]
    InvalidName { name: String, len: usize },
    /// The message does not encode as the entity type's own message.
    #[error("timer {name:?}: its message is not a message of this entity type: {reason}")]
    InvalidMessage { name: String, reason: String },
}

/// What a handler asked of its timers, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TimerRequest {
    Schedule {
        name: String,
        /// Milliseconds since the Unix epoch.
        due: u64,
        message: Vec<u8>,
    },
    Cancel {
        name: String,
    },
}

/// Checks that an encoded message is one of the entity type's messages.
pub(crate) type MessageCheck = fn(&[u8]) -> Result<(), String>;

/// The timer requests of one handler run, kept in its context.
#[derive(Debug, Default)]
pub(crate) struct TimerRequests {
    /// `None`: the entity type is not durable.
    check: Option<MessageCheck>,
    requests: parking_lot::Mutex<Vec<TimerRequest>>,
    /// The timer whose firing this run handles.
    firing: Option<String>,
}

impl TimerRequests {
    pub fn new(check: Option<MessageCheck>, firing: Option<String>) -> Self {
        Self {
            check,
            requests: parking_lot::Mutex::new(Vec::new()),
            firing,
        }
    }

    pub fn schedule<M: Serialize>(
        &self,
        name: &str,
        at_or_after: SystemTime,
        message: &M,
    ) -> Result<(), TimerError> {
        let check = self.usable(name)?;
        let invalid = |reason: String| TimerError::InvalidMessage {
            name: name.to_string(),
            reason,
        };
        let message = postcard::to_allocvec(message).map_err(|e| invalid(e.to_string()))?;
        check(&message).map_err(invalid)?;
        let due = at_or_after
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.requests.lock().push(TimerRequest::Schedule {
            name: name.to_string(),
            due,
            message,
        });
        Ok(())
    }

    pub fn cancel(&self, name: &str) -> Result<(), TimerError> {
        self.usable(name)?;
        self.requests.lock().push(TimerRequest::Cancel {
            name: name.to_string(),
        });
        Ok(())
    }

    fn usable(&self, name: &str) -> Result<MessageCheck, TimerError> {
        let check = self.check.ok_or(TimerError::NotDurable)?;
        if name.is_empty() || name.len() > MAX_TIMER_NAME {
            return Err(TimerError::InvalidName {
                name: name.chars().take(64).collect(),
                len: name.len(),
            });
        }
        Ok(check)
    }

    pub fn firing(&self) -> Option<&str> {
        self.firing.as_deref()
    }

    /// What the run asked, for its shard to apply.
    pub fn take(&self) -> Vec<TimerRequest> {
        std::mem::take(&mut *self.requests.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn any(_: &[u8]) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn a_timer_needs_a_durable_type_a_name_and_a_message_of_the_type() {
        let kept = TimerRequests::new(None, None);
        let err = kept
            .schedule("t", SystemTime::now(), &1u64)
            .expect_err("not durable");
        assert_eq!(err, TimerError::NotDurable);
        let refuse: MessageCheck = |_| Err("not a u64".into());
        let kept = TimerRequests::new(Some(refuse), None);
        let err = kept
            .schedule("t", SystemTime::now(), &1u64)
            .expect_err("bad message");
        assert!(err.to_string().contains("not a u64"), "{err}");
        let kept = TimerRequests::new(Some(any), None);
        let long = "x".repeat(MAX_TIMER_NAME + 1);
        let err = kept
            .schedule(&long, SystemTime::now(), &1u64)
            .expect_err("long");
        assert!(err.to_string().contains("it is 257"), "{err}");
        assert!(kept.cancel("").is_err(), "empty");
        kept.schedule("a", UNIX_EPOCH + Duration::from_millis(5), &7u64)
            .expect("scheduled");
        kept.cancel("b").expect("cancelled");
        assert_eq!(
            kept.take(),
            vec![
                TimerRequest::Schedule {
                    name: "a".into(),
                    due: 5,
                    message: vec![7]
                },
                TimerRequest::Cancel { name: "b".into() }
            ]
        );
        assert!(kept.take().is_empty());
    }
}
