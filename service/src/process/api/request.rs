//! Checks a client's request fields before anything is sent: each failure is
//! INVALID_ARGUMENT with a message that starts with the field's name, so a
//! client can tell which of its inputs to fix.

use crate::codec::ContentType;
use crate::node::Node;
use crate::region::ErasedRegion;
use colo_proto::v1::Payload;
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// The longest timeout a request may ask for. Deadlines are computed as
/// `now + timeout`, which must not overflow; and an hour is already far past
/// anything a caller would wait for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The region of `entity_type` on this node.
pub(super) fn region(node: &Node, entity_type: &str) -> Result<Arc<dyn ErasedRegion>, Status> {
    if entity_type.is_empty() {
        return Err(Status::invalid_argument("entity_type must not be empty"));
    }
    node.region_by_name(entity_type).ok_or_else(|| {
        let known = node.entity_types();
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        Status::invalid_argument(format!(
            "entity_type {entity_type:?} is not known on this node; known: {known}"
        ))
    })
}

/// A non-empty entity id.
pub(super) fn entity_id(entity_id: &str) -> Result<&str, Status> {
    if entity_id.is_empty() {
        return Err(Status::invalid_argument("entity_id must not be empty"));
    }
    Ok(entity_id)
}

/// The payload's content type and bytes. Empty bytes are allowed: a message
/// type with nothing in it (say, `()`) is empty in postcard.
pub(super) fn payload(payload: Option<&Payload>) -> Result<(ContentType, &[u8]), Status> {
    let payload = payload.ok_or_else(|| Status::invalid_argument("payload is missing"))?;
    let content_type = payload
        .content_type
        .parse()
        .map_err(|e| Status::invalid_argument(format!("payload.content_type: {e}")))?;
    Ok((content_type, &payload.data))
}

/// The timeout a request asks for, or `default` when it has none.
pub(super) fn timeout(
    timeout: Option<prost_types::Duration>,
    default: Duration,
) -> Result<Duration, Status> {
    let Some(given) = timeout else {
        return Ok(default);
    };
    let invalid = |why: &str| {
        Status::invalid_argument(format!(
            "timeout {}s {}ns {why}",
            given.seconds, given.nanos
        ))
    };
    // Checked by hand: prost's conversion normalizes out-of-range nanos,
    // which the Duration spec calls invalid.
    let (Ok(seconds), Ok(nanos)) = (u64::try_from(given.seconds), u32::try_from(given.nanos))
    else {
        return Err(invalid("must not be negative"));
    };
    if nanos >= 1_000_000_000 {
        return Err(invalid("is invalid: nanos must be below 1e9"));
    }
    let timeout = Duration::new(seconds, nanos);
    if timeout.is_zero() {
        return Err(invalid("must be positive"));
    }
    if timeout > MAX_TIMEOUT {
        return Err(invalid(&format!(
            "must be at most {}",
            humantime::format_duration(MAX_TIMEOUT)
        )));
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
        Some(prost_types::Duration { seconds, nanos })
    }

    #[test]
    fn timeouts_default_when_absent_and_refuse_nonsense() {
        let default = Duration::from_secs(7);
        assert_eq!(timeout(None, default).unwrap(), default);
        assert_eq!(
            timeout(d(1, 500_000_000), default).unwrap(),
            Duration::from_millis(1500)
        );
        for bad in [
            d(-1, 0),
            d(0, -5),
            d(0, 0),
            d(0, 1_000_000_000),
            d(i64::MAX, 0),
        ] {
            let status = timeout(bad, default).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().starts_with("timeout"), "{status:?}");
        }
    }

    #[test]
    fn payload_needs_a_known_content_type() {
        let status = payload(None).unwrap_err();
        assert!(status.message().starts_with("payload"), "{status:?}");
        let p = Payload {
            content_type: String::new(),
            data: vec![1],
        };
        let status = payload(Some(&p)).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("content_type"), "{status:?}");
        assert!(status.message().contains("application/json"), "{status:?}");
    }
}
