//! The coordinators' home as an elected node sees it: what the coordinator
//! topic's leader records say, and which coordinators this node runs.
//!
//! A node elected by the cluster's election group (the member holding the
//! coordinator topic's partition) writes a leader record, `\0leader\0
//! <epoch>` naming its address, before it starts any coordinator. Every
//! node follows the topic: the highest epoch of any leader record read
//! names the coordinators' home, and its epoch is the floor below which a
//! coordinator's messages come from a deposed one. Regions connect to that
//! address; a node that reads a leader record above its own stops its
//! coordinators at once (`program/kafka/candidacy.rs` drives this).

use super::coordinator_store::epoch_of;
pub(crate) use super::coordinator_store::{leader_key, leader_value};
use crate::coordinator::hosting::{CoordinatorHosting, CoordinatorLocation};
use crate::coordinator::CoordinatorHandle;
use parking_lot::RwLock;
use std::collections::HashMap;

/// The node the topic names, and its epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub epoch: u64,
    pub address: String,
}

/// What a record of the coordinator topic changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// A leader record above every one before it.
    NewLeader(Leader),
    /// Anything else (a lower leader record, an entity type's record, a
    /// tombstone).
    Other,
}

#[derive(Debug, Default)]
struct View {
    /// The leader record with the highest epoch read.
    leader: Option<Leader>,
    /// The highest epoch of any record read, leader or entity type's.
    highest: u64,
    /// The leader records read, by epoch: tombstoned by the next leader.
    leader_epochs: Vec<u64>,
    /// The coordinators this node runs, with their epoch.
    local: HashMap<String, (CoordinatorHandle, u64)>,
}

/// Where the coordinators are, learned from the coordinator topic.
#[derive(Debug)]
pub struct ElectedHosting {
    /// This node's advertised address.
    address: String,
    view: RwLock<View>,
}

impl ElectedHosting {
    /// The hosting of the node advertised at `address`.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            view: RwLock::default(),
        }
    }

    /// This node's address, as leader records name it.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Takes in one record of the topic, in offset order.
    ///
    /// # Errors
    /// The value cannot be read (a newer format): the record is skipped.
    pub fn read(&self, value: Option<&[u8]>) -> Result<Read, String> {
        let Some(value) = value else {
            return Ok(Read::Other);
        };
        let (epoch, address) = epoch_of(value)?;
        let mut view = self.view.write();
        view.highest = view.highest.max(epoch);
        let Some(address) = address else {
            return Ok(Read::Other);
        };
        view.leader_epochs.push(epoch);
        if view.leader.as_ref().is_some_and(|l| l.epoch >= epoch) {
            return Ok(Read::Other);
        }
        let leader = Leader { epoch, address };
        view.leader = Some(leader.clone());
        Ok(Read::NewLeader(leader))
    }

    /// The leader the topic names now.
    pub fn leader(&self) -> Option<Leader> {
        self.view.read().leader.clone()
    }

    /// The highest epoch read in any record.
    pub fn highest(&self) -> u64 {
        self.view.read().highest
    }

    /// The leader records read below `epoch`: a new leader tombstones them.
    pub fn leader_epochs_below(&self, epoch: u64) -> Vec<u64> {
        let mut view = self.view.write();
        let (below, rest): (Vec<u64>, Vec<u64>) =
            view.leader_epochs.iter().partition(|&&e| e < epoch);
        view.leader_epochs = rest;
        below
    }

    /// Makes a coordinator started here reachable.
    pub fn host(&self, handle: CoordinatorHandle, epoch: u64) {
        let entity_type = handle.entity_type().to_string();
        self.view.write().local.insert(entity_type, (handle, epoch));
    }

    /// Stops every coordinator this node runs: it is no longer elected.
    /// Their regions' links close; the regions look for the new home.
    pub fn step_down(&self) -> usize {
        let local = std::mem::take(&mut self.view.write().local);
        for (handle, _) in local.values() {
            handle.stop();
        }
        local.len()
    }
}

impl CoordinatorHosting for ElectedHosting {
    fn locate(&self, entity_type: &str) -> CoordinatorLocation {
        let view = self.view.read();
        if let Some((handle, epoch)) = view.local.get(entity_type) {
            return CoordinatorLocation::Local {
                handle: handle.clone(),
                epoch: *epoch,
            };
        }
        match &view.leader {
            // This node's own record, while its coordinators start (or
            // from before it restarted): nowhere to go yet.
            Some(leader) if leader.address != self.address => CoordinatorLocation::Remote {
                address: leader.address.clone(),
                epoch: leader.epoch,
            },
            _ => CoordinatorLocation::Unknown,
        }
    }

    fn floor(&self, _entity_type: &str) -> u64 {
        self.view.read().leader.as_ref().map_or(0, |l| l.epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(epoch: u64, address: &str) -> Vec<u8> {
        leader_value(epoch, address)
    }

    #[test]
    fn the_highest_leader_record_names_the_home_and_the_floor() {
        let hosting = ElectedHosting::new("b:1");
        assert!(matches!(hosting.locate("t"), CoordinatorLocation::Unknown));
        assert_eq!(
            hosting.read(Some(&leader(5, "a:1"))),
            Ok(Read::NewLeader(Leader {
                epoch: 5,
                address: "a:1".into()
            }))
        );
        // A deposed leader's late record changes nothing.
        assert_eq!(hosting.read(Some(&leader(4, "c:1"))), Ok(Read::Other));
        assert_eq!(hosting.read(None), Ok(Read::Other));
        match hosting.locate("t") {
            CoordinatorLocation::Remote { address, epoch } => {
                assert_eq!((address.as_str(), epoch), ("a:1", 5));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(hosting.floor("t"), 5);
        assert_eq!(hosting.leader_epochs_below(5), vec![4]);
        // Its own record: nowhere to connect until it hosts.
        hosting.read(Some(&leader(9, "b:1"))).unwrap();
        assert!(matches!(hosting.locate("t"), CoordinatorLocation::Unknown));
        assert_eq!(hosting.highest(), 9);
    }

    #[test]
    fn an_unreadable_record_is_an_error_and_changes_nothing() {
        let hosting = ElectedHosting::new("b:1");
        assert!(hosting
            .read(Some(&[9, 1, 2]))
            .unwrap_err()
            .contains("format 9"));
        assert_eq!(hosting.leader(), None);
    }
}
