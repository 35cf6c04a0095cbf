//! How a refusal becomes a gRPC status. The code tells a client what to do
//! next; the message says why, in the region's own words.
//!
//! | refusal | code | what a client does |
//! |---|---|---|
//! | payload does not decode, empty entity id | INVALID_ARGUMENT | fix the request |
//! | region buffer full, a mailbox full for a handler's tell | RESOURCE_EXHAUSTED | back off, retry |
//! | region stopped, message dropped, query unanswered | UNAVAILABLE | retry, maybe elsewhere |
//! | no reply within the timeout | DEADLINE_EXCEEDED | the message may still be handled |
//! | the entity's handler failed | ABORTED | the entity was dropped; a retry meets a new incarnation |
//! | a message or reply cannot be encoded | INTERNAL | a bug in the entity type's serde |
//!
//! An entity failure is ABORTED rather than INTERNAL: INTERNAL means the
//! service itself is broken, while a failed handler is the entity type's own
//! answer, and the operation can be retried on a fresh entity.

use crate::error::QueryError;
use crate::error::{AskError, TellError};
use crate::region::ErasedError;
use tonic::Status;

impl From<ErasedError> for Status {
    fn from(e: ErasedError) -> Self {
        match e {
            // Its text starts with the field: "payload is not a message ...".
            ErasedError::Decode { .. } => Status::invalid_argument(e.to_string()),
            ErasedError::EncodeReply { .. } => Status::internal(e.to_string()),
            ErasedError::Tell(e) => e.into(),
            ErasedError::Ask(e) => e.into(),
        }
    }
}

impl From<TellError> for Status {
    fn from(e: TellError) -> Self {
        let message = e.to_string();
        match e {
            TellError::BufferFull { .. } | TellError::MailboxFull { .. } => {
                Status::resource_exhausted(message)
            }
            TellError::EmptyEntityId => Status::invalid_argument("entity_id must not be empty"),
            TellError::InvalidIdempotencyKey(reason) => {
                Status::invalid_argument(format!("idempotency_key: {reason}"))
            }
            TellError::RegionStopped(_)
            | TellError::CoordinatorUnreachable(_)
            | TellError::NotHere(_) => Status::unavailable(message),
            TellError::Codec(_) => Status::internal(message),
        }
    }
}

impl From<AskError> for Status {
    fn from(e: AskError) -> Self {
        let message = e.to_string();
        match e {
            AskError::Tell(e) => e.into(),
            AskError::Timeout(_) => Status::deadline_exceeded(message),
            AskError::EntityFailed(_) => Status::aborted(message),
            AskError::Dropped(_) => Status::unavailable(message),
            // Like a deadline: the message may have been handled.
            AskError::Unconfirmed(_) => Status::deadline_exceeded(message),
            AskError::Codec(_) => Status::internal(message),
            AskError::AlreadyApplied => Status::already_exists(message),
            AskError::PreviousLost => Status::unavailable(message),
        }
    }
}

impl From<QueryError> for Status {
    fn from(e: QueryError) -> Self {
        // Both mean nobody answered (no coordinator, or a stopped region):
        // the same call may work later or on another node.
        Status::unavailable(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::ContentType;
    use std::time::Duration;
    use tonic::Code;

    #[test]
    fn refusals_map_to_what_a_client_should_do() {
        let cases: Vec<(Status, Code)> = vec![
            (
                TellError::BufferFull {
                    entity_type: "counter".into(),
                    limit: 3,
                }
                .into(),
                Code::ResourceExhausted,
            ),
            (TellError::EmptyEntityId.into(), Code::InvalidArgument),
            (
                TellError::RegionStopped("counter".into()).into(),
                Code::Unavailable,
            ),
            (TellError::Codec("x".into()).into(), Code::Internal),
            (
                AskError::Tell(TellError::RegionStopped("c".into())).into(),
                Code::Unavailable,
            ),
            (
                AskError::Timeout(Duration::from_secs(1)).into(),
                Code::DeadlineExceeded,
            ),
            (AskError::EntityFailed("boom".into()).into(), Code::Aborted),
            (AskError::Dropped("gone".into()).into(), Code::Unavailable),
            (
                AskError::Unconfirmed("gone".into()).into(),
                Code::DeadlineExceeded,
            ),
            (AskError::Codec("x".into()).into(), Code::Internal),
            (
                QueryError::Timeout(Duration::from_secs(1)).into(),
                Code::Unavailable,
            ),
            (QueryError::Stopped.into(), Code::Unavailable),
            (
                ErasedError::Decode {
                    entity_type: "counter".into(),
                    content_type: ContentType::Json,
                    reason: "expected value".into(),
                }
                .into(),
                Code::InvalidArgument,
            ),
            (
                ErasedError::from(AskError::Tell(TellError::BufferFull {
                    entity_type: "c".into(),
                    limit: 1,
                }))
                .into(),
                Code::ResourceExhausted,
            ),
        ];
        for (status, code) in cases {
            assert_eq!(status.code(), code, "{status:?}");
            assert!(!status.message().is_empty());
        }
    }
}
