//! Identifiers shared by the allocation logic and the runtime.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// A shard: the unit of placement and hand-off.
///
/// A number rather than a string because in colo's main mode a shard *is* a
/// Kafka partition, and because regions index their routing table by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ShardId(pub u32);

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A region, named after the node that runs it.
///
/// There is one region per node and entity type, and each entity type has its
/// own coordinator, so inside one coordinator the node name is unique.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RegionId(Arc<str>);

impl RegionId {
    /// A region id from a node name.
    pub fn new(name: impl AsRef<str>) -> Self {
        Self(Arc::from(name.as_ref()))
    }

    /// The node name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for RegionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for RegionId {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}
