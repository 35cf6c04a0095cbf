//! The key layout both engines share: per entity type one table, in it per
//! shard first its checkpoint, then its entities ordered by id. A shard is
//! one contiguous range, so a restore is one scan and clearing a shard is
//! one range delete.
//!
//! `shard (u32, big-endian) | tag (1 byte) | entity id (UTF-8)`, with tag 0
//! for the checkpoint (no id) and tag 1 for an entity.
//!
//! Tag 2 is the shard's index of its entities' timers, ordered by when
//! they are due: `shard | 2 | due (u64, big-endian) | id length (u32,
//! big-endian) | entity id | timer name`, the timer's message as the value.
//! A shard finds what is due with one scan from the lowest due time, and
//! stops at the first entry not due yet: the cost goes with what is due,
//! not with how many timers wait.

use crate::batch::{Checkpoint, CheckpointKind};
use colo_allocation::ShardId;

const CHECKPOINT: u8 = 0;
const ENTITY: u8 = 1;
const TIMER: u8 = 2;

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

/// The range of everything of a shard, its checkpoint and its timers
/// included.
pub fn all_of(shard: ShardId) -> ([u8; 5], [u8; 5]) {
    let [a, b, c, d] = shard.0.to_be_bytes();
    ([a, b, c, d, CHECKPOINT], [a, b, c, d, TIMER + 1])
}

/// A timer's key in its shard's index (see the module's doc).
pub fn timer_key(shard: ShardId, timer: &crate::batch::TimerKey) -> Vec<u8> {
    self::timer(shard, timer.due, &timer.entity_id, &timer.name)
}

fn timer(shard: ShardId, due: u64, entity_id: &str, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(5 + 8 + 4 + entity_id.len() + name.len());
    key.extend_from_slice(&shard.0.to_be_bytes());
    key.push(TIMER);
    key.extend_from_slice(&due.to_be_bytes());
    let length = u32::try_from(entity_id.len()).unwrap_or(u32::MAX);
    key.extend_from_slice(&length.to_be_bytes());
    key.extend_from_slice(entity_id.as_bytes());
    key.extend_from_slice(name.as_bytes());
    key
}

/// The range of a shard's timer index: `[start, end)`.
pub fn timers_of(shard: ShardId) -> ([u8; 5], [u8; 5]) {
    let [a, b, c, d] = shard.0.to_be_bytes();
    ([a, b, c, d, TIMER], [a, b, c, d, TIMER + 1])
}

/// A timer index key's due time, entity id and name.
pub fn decode_timer(key: &[u8]) -> Option<(u64, &str, &str)> {
    let due = u64::from_be_bytes(key.get(5..13)?.try_into().ok()?);
    let length = u32::from_be_bytes(key.get(13..17)?.try_into().ok()?);
    let end = 17usize.checked_add(usize::try_from(length).ok()?)?;
    let id = std::str::from_utf8(key.get(17..end)?).ok()?;
    let name = std::str::from_utf8(key.get(end..)?).ok()?;
    Some((due, id, name))
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
    fn a_shards_timers_sort_by_due_time_inside_its_range_and_read_back() {
        let shard = ShardId(7);
        let (start, end) = all_of(shard);
        let (first, last) = timers_of(shard);
        let (_, entities_end) = entities_of(shard);
        let soon = timer(shard, 5, "zed", "remind");
        let later = timer(shard, 6, "al", "a");
        let much_later = timer(shard, 256, "al", "");
        assert!(entities_end.as_slice() <= first.as_slice());
        assert!(first.as_slice() <= soon.as_slice() && soon < later && later < much_later);
        assert!(much_later.as_slice() < last.as_slice() && last.as_slice() <= end.as_slice());
        assert!(start.as_slice() <= first.as_slice());
        assert_eq!(decode_timer(&soon), Some((5, "zed", "remind")));
        assert_eq!(decode_timer(&much_later), Some((256, "al", "")));
        assert_eq!(decode_timer(&soon[..10]), None);
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
