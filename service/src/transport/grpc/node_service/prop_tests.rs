//! Batches off a Link, fed arbitrary input: bytes as prost decodes them,
//! sequence numbers anywhere (zero, past what was accepted, at `u64::MAX`),
//! envelopes that are malformed or name an unknown reply address, and a
//! node that refuses part of what it is handed. Taking a batch runs under
//! the sender's lock on the task serving its Link; a panic there would
//! poison nothing (parking_lot) but end the Link with the batch unacked,
//! and its sender would resend it for ever.

use super::super::prop_tests::{config, decoded, envelope, number, wire};
use super::{deliver, Epoch, SenderState};
use crate::credits::{Credits, WINDOW};
use crate::envelope::{WireEnvelope, WireReply};
use crate::transport::{Recipient, Sender};
use colo_allocation::RegionId;
use colo_proto::v1 as pb;
use parking_lot::Mutex;
use proptest::prelude::*;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// A node that takes envelopes until the one at `refuse_at` (its region
/// stopped), returning the credit of the rest as the node does.
struct Node {
    refuse_at: Option<usize>,
    taken: Mutex<Vec<WireEnvelope>>,
}

impl Recipient for Node {
    fn credits(&self, _from: &Sender) -> Arc<Credits> {
        Credits::new(WINDOW)
    }

    fn deliver(
        &self,
        _from: &Sender,
        batch: Vec<WireEnvelope>,
        credits: &Arc<Credits>,
    ) -> Result<(), usize> {
        match self.refuse_at {
            Some(n) if n < batch.len() => {
                credits.release((batch.len() - n) as u64);
                self.taken.lock().extend(batch.into_iter().take(n));
                Err(n)
            }
            _ => {
                self.taken.lock().extend(batch);
                Ok(())
            }
        }
    }

    fn reply(&self, _reply: WireReply) {}
}

/// The name of a node no coordinator lists: a reply address naming it is
/// refused.
const STRANGER: &str = "stranger";

/// A batch built from fields: mostly well-formed envelopes, so that the
/// skipping and refusing are reached, with some malformed among them.
fn batch() -> impl Strategy<Value = pb::Batch> {
    let well_formed = ("[a-z]{1,4}", "[a-z0-9]{1,4}", any::<bool>()).prop_map(
        |(entity_type, entity_id, stranger)| pb::Envelope {
            entity_type,
            entity_id,
            reply_to: Some(pb::ReplyTo {
                node: if stranger { STRANGER } else { "member" }.to_string(),
                ..pb::ReplyTo::default()
            }),
            ..pb::Envelope::default()
        },
    );
    let env = prop_oneof![4 => well_formed, 1 => envelope()];
    (number(), prop::collection::vec(env, 0..12)).prop_map(|(first_sequence, envelopes)| {
        pb::Batch {
            first_sequence,
            envelopes,
        }
    })
}

/// How many envelopes of a batch from `first` are numbered at or below
/// `accepted_through`, counted one by one without the code's arithmetic.
fn already_accepted(first: u64, count: usize, accepted_through: u64) -> usize {
    (0..count)
        .filter(|&i| u128::from(first) + i as u128 <= u128::from(accepted_through))
        .count()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_batches_are_acked_for_what_was_taken_never_a_panic(
        bytes in wire(batch),
        accepted_through in prop_oneof![number(), 0u64..64],
        refuse_at in proptest::option::of(0usize..12),
        epoch_ended in prop::bool::weighted(0.1),
    ) {
        let Some(batch) = decoded::<pb::Batch>(&bytes) else { return Ok(()) };
        let (first, count) = (batch.first_sequence, batch.envelopes.len());
        let state = SenderState {
            sender: Sender { node: RegionId::new("member"), incarnation: 1 },
            accepted_through: Mutex::new(accepted_through),
        };
        let epoch = Epoch { current: Arc::new(AtomicU64::new(1 + u64::from(epoch_ended))), served: 1 };
        let node = Arc::new(Node { refuse_at, taken: Mutex::default() });
        let inbound: Arc<dyn Recipient> = node.clone();
        let credits = Credits::new(WINDOW);
        let knows = |n: &RegionId| n.as_str() != STRANGER;

        let delivered = deliver(&state, &epoch, knows, &inbound, &credits, batch);

        let taken = node.taken.lock().len();
        let through = *state.accepted_through.lock();
        let Some(delivered) = delivered else {
            // A batch of an ended epoch is not taken, and not acked.
            prop_assert!(epoch_ended);
            prop_assert_eq!((taken, credits.released(), through), (0, 0, accepted_through));
            return Ok(());
        };
        prop_assert!(!epoch_ended, "a batch of an ended epoch was taken");
        let accepted = delivered.ack.accepted as usize;
        prop_assert_eq!(delivered.ack.first_sequence, first);
        prop_assert!(accepted <= count, "acked {} of {}", accepted, count);
        prop_assert_eq!(delivered.refused, accepted < count);
        // Every envelope the node did not keep returned its credit: the
        // sender's window never shrinks for good on a bad batch. (Sequence
        // number zero is never sent; with it the count below is off by one
        // and only the absence of a panic is checked.)
        if first > 0 {
            let seen = already_accepted(first, count, accepted_through);
            prop_assert_eq!(credits.released() as usize + taken, count - seen);
            // A resent batch is acked again for what was taken before.
            prop_assert!(accepted >= seen, "acked {} of {} already taken", accepted, seen);
        }
        prop_assert!(through >= accepted_through, "what was accepted went back");
        if accepted > 0 {
            let last = first.saturating_add(accepted as u64 - 1);
            prop_assert_eq!(through, accepted_through.max(last));
        } else {
            prop_assert_eq!(through, accepted_through);
        }
    }
}
