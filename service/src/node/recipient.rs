//! What a node does with traffic from other nodes: envelopes go to its
//! regions at once (each carrying its sender's credit), replies complete
//! the asks waiting here, and replies meant for an earlier incarnation of
//! this node are dropped.

use crate::credits::{Credits, WINDOW};
use crate::envelope::{WireEnvelope, WireReply};
use crate::node_context::NodeContext;
use crate::region::{Placed, RegionRecipient};
use crate::transport::{Recipient, Sender};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;

/// Routes what the transport receives to the node's regions.
pub(super) struct NodeRecipient {
    pub context: Arc<NodeContext>,
    pub regions: RwLock<HashMap<String, Arc<dyn RegionRecipient>>>,
    /// Each sender incarnation's credit here.
    credits: Mutex<HashMap<Sender, Arc<Credits>>>,
}

impl NodeRecipient {
    pub fn new(context: Arc<NodeContext>) -> Self {
        Self {
            context,
            regions: RwLock::default(),
            credits: Mutex::default(),
        }
    }

    /// The node stops receiving: senders waiting for credit learn it.
    pub fn close(&self) {
        for (_, credits) in self.credits.lock().drain() {
            credits.close();
        }
    }
}

impl Recipient for NodeRecipient {
    fn credits(&self, from: &Sender) -> Arc<Credits> {
        let mut all = self.credits.lock();
        if let Some(credits) = all.get(from) {
            return credits.clone();
        }
        // A new incarnation of a node replaces the one before: what the old
        // one left in custody still returns its credit, to nobody.
        all.retain(|sender, credits| {
            let replaced = sender.node == from.node;
            if replaced {
                credits.close();
            }
            !replaced
        });
        let credits = Credits::new(WINDOW);
        all.insert(from.clone(), credits.clone());
        credits
    }

    fn deliver(
        &self,
        _from: &Sender,
        batch: Vec<WireEnvelope>,
        credits: &Arc<Credits>,
    ) -> Result<(), usize> {
        let count = batch.len();
        for (i, env) in batch.into_iter().enumerate() {
            let region = self.regions.read().get(&env.entity_type).cloned();
            // No region (it stopped and left) or a stopped one: refuse the
            // rest, so the sender keeps them and finds the new home.
            let placed = match region {
                Some(region) => region.deliver(env, credits.guard()),
                None => {
                    credits.release(1);
                    Placed::Refused
                }
            };
            if let Placed::Refused = placed {
                credits.release((count - i - 1) as u64);
                return Err(i);
            }
        }
        Ok(())
    }

    fn reply(&self, reply: WireReply) {
        if reply.incarnation != self.context.incarnation {
            crate::metrics::stale_reply();
            tracing::debug!(
                correlation = reply.correlation,
                "reply for an earlier incarnation of this node dropped"
            );
            return;
        }
        self.context
            .pending
            .complete(reply.correlation, reply.result);
    }
}
