//! Purchase events as Kafka records: protobuf payloads keyed by user id.

use super::{Purchase, UserMsg};
use crate::kafka::Record;
use crate::kafka::RecordDecoder;
use colo_proto::v1::PurchaseEvent;
use prost::Message as _;
use std::sync::Arc;

/// The record decoder of the `user` entity type. The entity id is read
/// from the decoded event's `user_id`, not from the key, so a producer
/// that keys by something else still reaches the right user (only not
/// locally: the key decides the partition).
pub fn purchase_records() -> RecordDecoder<UserMsg> {
    Arc::new(|record: &Record| {
        let payload = record
            .payload
            .as_deref()
            .ok_or("the record has no payload")?;
        let event = PurchaseEvent::decode(payload)
            .map_err(|e| format!("the payload is not a PurchaseEvent: {e}"))?;
        if event.user_id.is_empty() {
            return Err("the PurchaseEvent has no user_id".to_string());
        }
        if event.quantity == 0 {
            return Err("the PurchaseEvent has no quantity".to_string());
        }
        if event.price < 0 {
            return Err(format!(
                "the PurchaseEvent has a negative price ({})",
                event.price
            ));
        }
        let message = UserMsg::Purchase(Purchase {
            product: event.product,
            quantity: event.quantity,
            price: event.price,
            sequence: event.sequence,
        });
        Ok((event.user_id, message))
    })
}

/// A purchase of `user` as a record payload.
pub fn encode_event(user: &str, purchase: &Purchase) -> Vec<u8> {
    PurchaseEvent {
        user_id: user.to_string(),
        product: purchase.product.clone(),
        quantity: purchase.quantity,
        price: purchase.price,
        sequence: purchase.sequence,
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::Ack;

    fn record(payload: Option<Vec<u8>>) -> Record {
        Record {
            topic: "user-events".into(),
            partition: 0,
            offset: 0,
            timestamp: None,
            key: Some(b"u-1".to_vec()),
            payload,
            ack: Ack::detached(),
        }
    }

    #[test]
    fn an_event_decodes_to_its_user_and_purchase() {
        let purchase = Purchase {
            product: "tea".into(),
            quantity: 2,
            price: 350,
            sequence: 9,
        };
        let decoded = purchase_records()(&record(Some(encode_event("u-1", &purchase))));
        assert_eq!(
            decoded,
            Ok(("u-1".to_string(), UserMsg::Purchase(purchase)))
        );
    }

    #[test]
    fn records_that_are_no_purchase_are_refused_with_the_reason() {
        let decode = purchase_records();
        let cases: [(Option<Vec<u8>>, &str); 4] = [
            (None, "no payload"),
            (Some(b"\xff\xff\xff".to_vec()), "not a PurchaseEvent"),
            (Some(Vec::new()), "no user_id"),
            (
                Some(
                    PurchaseEvent {
                        user_id: "u".into(),
                        quantity: 0,
                        ..PurchaseEvent::default()
                    }
                    .encode_to_vec(),
                ),
                "no quantity",
            ),
        ];
        for (payload, reason) in cases {
            let err = decode(&record(payload)).expect_err("refused");
            assert!(err.contains(reason), "{err}");
        }
    }
}
