//! The key layout both engines share: per entity type one table, in it per
//! shard first its checkpoint, then its entities ordered by id. A shard is
//! one contiguous range, so a restore is one scan and clearing a shard is
//! one range delete.
//!
//! `shard (u32, big-endian) | tag (1 byte) | entity id (UTF-8)`, with tag 0
//! for the checkpoint (no id) and tag 1 for an entity.

use crate::batch::{Checkpoint, CheckpointKind};
use colo_allocation::ShardId;

const CHECKPOINT: u8 = 0;
const ENTITY: u8 = 1;

pub fn entity(shard: ShardId, entity_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(5 + entity_id.len());
    key.extend_from_slice(&shard.0.to_be_bytes());
    key.push(ENTITY);
    key.extend_from_slice(entity_id.as_bytes());
    key
}

pub fn checkpoint(shard: ShardId) -> [u8; 5] {
    let [a, b, c, d] = shard.0.to_be_bytes();
    [a, b, c, d, CHECKPOINT]
}

/// The range of a shard's entities: `[start, end)`.
pub fn entities_of(shard: ShardId) -> ([u8; 5], [u8; 5]) {
    let [a, b, c, d] = shard.0.to_be_bytes();
    ([a, b, c, d, ENTITY], [a, b, c, d, ENTITY + 1])
}

/// The range of everything of a shard, its checkpoint included.
pub fn all_of(shard: ShardId) -> ([u8; 5], [u8; 5]) {
    let [a, b, c, d] = shard.0.to_be_bytes();
    ([a, b, c, d, CHECKPOINT], [a, b, c, d, ENTITY + 1])
}

/// The entity id of a key inside a shard's entity range.
pub fn entity_id(key: &[u8]) -> Option<&str> {
    key.get(5..).and_then(|id| std::str::from_utf8(id).ok())
}

/// A standby's checkpoint ends with this byte.
const STANDBY: u8 = 1;

/// A checkpoint's value: its offset, its epoch and its marker's
/// fingerprint, each big-endian; a standby's has one byte more, which a
/// build from before standbys reads as no checkpoint (it then reads the
/// whole partition: slower, never wrong).
pub fn encode_checkpoint(checkpoint: Checkpoint) -> Vec<u8> {
    let mut value = Vec::with_capacity(25);
    value.extend_from_slice(&checkpoint.offset.to_be_bytes());
    value.extend_from_slice(&checkpoint.epoch.to_be_bytes());
    value.extend_from_slice(&checkpoint.marker.to_be_bytes());
    if checkpoint.kind == CheckpointKind::Standby {
        value.push(STANDBY);
    }
    value
}

/// A checkpoint read back; one of 16 bytes, written before checkpoints
/// had their marker's fingerprint, has none (0).
pub fn decode_checkpoint(value: &[u8]) -> Option<Checkpoint> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_be_bytes(value.get(at..at + 8)?.try_into().ok()?))
    };
    let (marker, kind) = match (value.len(), value.get(24)) {
        (16, _) => (0, CheckpointKind::Start),
        (24, _) => (word(16)?, CheckpointKind::Start),
        (25, Some(&STANDBY)) => (word(16)?, CheckpointKind::Standby),
        _ => return None,
    };
    Some(Checkpoint {
        offset: word(0)?,
        epoch: word(8)?,
        marker,
        kind,
    })
}

/// Refuses an entity type name that cannot name a table (see
/// [`valid_entity_type`]).
pub fn check_entity_type(name: &str) -> Result<(), crate::error::StoreError> {
    if valid_entity_type(name) {
        Ok(())
    } else {
        Err(crate::error::StoreError::EntityTypeName(name.to_string()))
    }
}

/// Entity type names become table names: only characters that cannot
/// collide with the store's own names or escape a path.
pub fn valid_entity_type(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_checkpoint_and_entities_sort_inside_its_range_and_nowhere_else() {
        let shard = ShardId(7);
        let (start, end) = all_of(shard);
        let (first, last) = entities_of(shard);
        let cp = checkpoint(shard);
        let e = entity(shard, "user-\u{e9}");
        assert!(start.as_slice() <= cp.as_slice() && cp.as_slice() < first.as_slice());
        assert!(first.as_slice() <= e.as_slice() && e.as_slice() < last.as_slice());
        assert!(last.as_slice() <= end.as_slice());
        let next = entity(ShardId(8), "");
        assert!(end.as_slice() <= next.as_slice());
        assert_eq!(entity_id(&e), Some("user-\u{e9}"));
    }

    #[test]
    fn a_checkpoint_reads_back_and_one_from_before_markers_has_none() {
        let checkpoint = Checkpoint {
            offset: 42,
            epoch: 7,
            marker: 0xfeed,
            kind: CheckpointKind::Start,
        };
        assert_eq!(
            decode_checkpoint(&encode_checkpoint(checkpoint)),
            Some(checkpoint)
        );
        let before = &encode_checkpoint(checkpoint)[..16];
        assert_eq!(
            decode_checkpoint(before),
            Some(Checkpoint {
                marker: 0,
                ..checkpoint
            })
        );
        assert_eq!(decode_checkpoint(&[0; 9]), None);
        let standby = Checkpoint {
            kind: CheckpointKind::Standby,
            ..checkpoint
        };
        assert_eq!(encode_checkpoint(standby).len(), 25);
        assert_eq!(
            decode_checkpoint(&encode_checkpoint(standby)),
            Some(standby)
        );
        let mut unknown = encode_checkpoint(standby);
        unknown[24] = 9;
        assert_eq!(decode_checkpoint(&unknown), None, "a kind of a later build");
    }

    #[test]
    fn entity_type_names_that_could_collide_or_escape_are_refused() {
        assert!(valid_entity_type("user"));
        assert!(valid_entity_type("device-v2.agg_1"));
        for bad in ["", "a/b", "a b", "..\u{0}", "caf\u{e9}"] {
            assert!(!valid_entity_type(bad), "{bad:?}");
        }
    }
}
