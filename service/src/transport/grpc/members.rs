//! The nodes this node deals with over gRPC: those its coordinators list as
//! registered, per entity type.
//!
//! A Link from any other node is refused: a stranger claiming a member's
//! name with another incarnation would otherwise reset what this node
//! remembers of that member (its sequence numbers, its credit). So is a
//! reply address naming one: this node would open a Link to wherever it
//! points. A node that just registered may open a Link before this node has
//! heard of it; it is refused for now and tries again.

use colo_allocation::RegionId;
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};

/// Per entity type, the nodes its coordinator last listed.
#[derive(Debug, Default)]
pub struct Members {
    by_entity_type: RwLock<HashMap<String, HashSet<RegionId>>>,
}

impl Members {
    /// Replaces what the coordinator of `entity_type` lists.
    pub fn set(&self, entity_type: &str, nodes: Vec<RegionId>) {
        self.by_entity_type
            .write()
            .insert(entity_type.to_string(), nodes.into_iter().collect());
    }

    /// Whether some coordinator lists `node`.
    pub fn contains(&self, node: &RegionId) -> bool {
        self.by_entity_type
            .read()
            .values()
            .any(|nodes| nodes.contains(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_known_while_one_coordinator_lists_it() {
        let members = Members::default();
        let (a, b) = (RegionId::new("a:1"), RegionId::new("b:1"));
        assert!(!members.contains(&a));
        members.set("x", vec![a.clone(), b.clone()]);
        members.set("y", vec![b.clone()]);
        assert!(members.contains(&a) && members.contains(&b));
        members.set("x", vec![]);
        assert!(!members.contains(&a), "x no longer lists it");
        assert!(members.contains(&b), "y still does");
    }
}
