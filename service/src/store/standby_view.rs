//! The node's standby copies as the cluster map shows them: each kept
//! shard's copy, how far it has read its changelog partition, and how far
//! behind its last step found it. The standbys' metrics sum these over an
//! entity type; an operator deciding whether a node can take a shard over
//! warm needs them one by one.

use colo_allocation::ShardId;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::BTreeMap;

/// One standby copy kept on this node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StandbyView {
    pub entity_type: String,
    pub shard: u32,
    /// The changelog offset the copy reads next: it holds every record
    /// before it. `None` until its first step ended.
    pub offset: Option<u64>,
    /// Records its last step read: what a start here would have had to
    /// restore then.
    pub behind: u64,
    /// When its last step ended, in milliseconds since the Unix epoch
    /// (0: none has yet).
    pub at_ms: u64,
    /// Why its last step failed; the next one tries again.
    pub error: Option<String>,
}

/// The copies kept now, by entity type and shard.
#[derive(Debug, Default)]
pub(crate) struct StandbyCopies {
    copies: Mutex<BTreeMap<(String, u32), StandbyView>>,
}

impl StandbyCopies {
    /// `entity_type` keeps copies of `shards` now: the others are no longer
    /// kept warm here (their copy stays in the store, a tail behind).
    pub fn keep(&self, entity_type: &str, shards: &[ShardId]) {
        let mut copies = self.copies.lock();
        copies.retain(|(kept_type, shard), _| {
            kept_type != entity_type || shards.contains(&ShardId(*shard))
        });
        for shard in shards {
            copies
                .entry((entity_type.to_string(), shard.0))
                .or_insert_with(|| StandbyView {
                    entity_type: entity_type.to_string(),
                    shard: shard.0,
                    offset: None,
                    behind: 0,
                    at_ms: 0,
                    error: None,
                });
        }
    }

    /// A step of `shard`'s copy ended: read `behind` records up to
    /// `offset`, or failed.
    pub fn stepped(&self, entity_type: &str, shard: ShardId, step: Result<(u64, u64), String>) {
        let mut copies = self.copies.lock();
        let Some(copy) = copies.get_mut(&(entity_type.to_string(), shard.0)) else {
            return;
        };
        copy.at_ms = crate::clock::unix_ms();
        match step {
            Ok((behind, offset)) => {
                copy.offset = Some(offset);
                copy.behind = behind;
                copy.error = None;
            }
            Err(error) => copy.error = Some(error),
        }
    }

    /// The shards of `entity_type` kept now, ascending.
    pub fn shards(&self, entity_type: &str) -> Vec<ShardId> {
        self.copies
            .lock()
            .keys()
            .filter(|(kept_type, _)| kept_type == entity_type)
            .map(|(_, shard)| ShardId(*shard))
            .collect()
    }

    /// Every copy kept now, by entity type and shard.
    pub fn views(&self) -> Vec<StandbyView> {
        self.copies.lock().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shows_its_last_step_until_it_is_no_longer_kept() {
        let copies = StandbyCopies::default();
        copies.keep("user", &[ShardId(1), ShardId(4)]);
        copies.keep("order", &[ShardId(1)]);
        copies.stepped("user", ShardId(4), Ok((120, 5_000)));
        copies.stepped("user", ShardId(1), Err("the broker is away".into()));
        // A shard not kept is not shown, whatever its step said.
        copies.stepped("user", ShardId(7), Ok((1, 1)));
        let shown: Vec<_> = copies
            .views()
            .into_iter()
            .map(|v| (v.entity_type, v.shard, v.offset, v.behind, v.error))
            .collect();
        assert_eq!(
            shown,
            [
                ("order".to_string(), 1, None, 0, None),
                (
                    "user".to_string(),
                    1,
                    None,
                    0,
                    Some("the broker is away".to_string())
                ),
                ("user".to_string(), 4, Some(5_000), 120, None),
            ]
        );
        assert_eq!(copies.shards("user"), [ShardId(1), ShardId(4)]);
        copies.keep("user", &[ShardId(1)]);
        assert_eq!(copies.shards("user"), [ShardId(1)]);
        let kept: Vec<_> = copies
            .views()
            .into_iter()
            .map(|v| (v.entity_type, v.shard))
            .collect();
        assert_eq!(kept, [("order".to_string(), 1), ("user".to_string(), 1)]);
    }
}
