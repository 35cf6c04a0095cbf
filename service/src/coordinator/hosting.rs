//! Where the coordinator of an entity type runs, as a node sees it.
//!
//! Regions do not care how the choice is made: they ask [`CoordinatorHosting`]
//! every time they (re)connect. One node hosts every coordinator, chosen by
//! configuration ([`StaticHosting`]) or elected through Kafka
//! (`kafka/leader.rs`); the protocol is the same, because every coordinator
//! message carries the epoch of the coordinator that sent it, and a region
//! drops a link whose coordinator is older than the one elected.

use super::CoordinatorHandle;
use parking_lot::RwLock;
use std::collections::HashMap;

/// The answer to "where is the coordinator of this entity type?".
#[derive(Debug, Clone)]
pub enum CoordinatorLocation {
    /// This node hosts it.
    Local {
        /// The running coordinator.
        handle: CoordinatorHandle,
        /// Its epoch: higher than any coordinator before it.
        epoch: u64,
    },
    /// Another node hosts it, at this gRPC address.
    Remote {
        /// The hosting node's advertised address.
        address: String,
        /// Its epoch, where the hosting knows it (0 when it does not): a
        /// coordinator answering there with a lower one has been deposed.
        epoch: u64,
    },
    /// No coordinator is known yet; regions retry.
    Unknown,
}

/// Decides, or learns, which node hosts each coordinator.
pub trait CoordinatorHosting: Send + Sync + 'static {
    /// Where the coordinator of `entity_type` is now.
    fn locate(&self, entity_type: &str) -> CoordinatorLocation;

    /// The lowest epoch a coordinator of `entity_type` may have and still
    /// be followed: a message from a lower one comes from a deposed
    /// coordinator. 0: no such bound is known.
    fn floor(&self, _entity_type: &str) -> u64 {
        0
    }
}

#[derive(Debug, Clone)]
struct Hosted {
    handle: CoordinatorHandle,
    epoch: u64,
}

/// One node, named by configuration, hosts every coordinator; the others
/// are told its address.
#[derive(Debug)]
pub struct StaticHosting {
    address: String,
    local: RwLock<HashMap<String, Hosted>>,
}

impl StaticHosting {
    /// Coordinators live on the node advertised as `address`.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            local: RwLock::default(),
        }
    }

    /// The hosting node's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Makes a coordinator started on this node reachable.
    pub fn host(&self, handle: CoordinatorHandle, epoch: u64) {
        let entity_type = handle.entity_type().to_string();
        let hosted = Hosted { handle, epoch };
        self.local.write().insert(entity_type, hosted);
    }
}

impl CoordinatorHosting for StaticHosting {
    fn locate(&self, entity_type: &str) -> CoordinatorLocation {
        if let Some(hosted) = self.local.read().get(entity_type).cloned() {
            return CoordinatorLocation::Local {
                handle: hosted.handle,
                epoch: hosted.epoch,
            };
        }
        CoordinatorLocation::Remote {
            address: self.address.clone(),
            epoch: 0,
        }
    }
}
