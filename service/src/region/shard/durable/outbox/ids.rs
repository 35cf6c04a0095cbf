//! The deterministic ids of a shard's outputs: the same message handled
//! again emits the same ids, so a reader tells a copy by its id.

use super::ShardOutbox;
use crate::entity::EntityId;
use crate::envelope::Cause;
use colo_allocation::ShardId;

impl ShardOutbox {
    /// Each output's id: the entity type, and what caused it (a record's
    /// topic, partition and offset, a timer's due time and name, a tell's
    /// idempotency key; else the shard, this start and a count), then its
    /// place among the message's outputs. The same message handled again
    /// emits the same ids.
    pub(super) fn ids(
        &mut self,
        (entity_type, shard): (&str, ShardId),
        id: &EntityId,
        cause: Option<&Cause>,
        n: usize,
    ) -> Vec<String> {
        let base = match cause {
            Some(Cause::Record(origin)) => {
                let (topic, partition) =
                    crate::envelope::Origin::partition_of(&origin.source, shard);
                format!("{entity_type}/{topic}/{partition}/{}", origin.offset)
            }
            Some(Cause::Timer(key)) => {
                format!("{entity_type}/timer/{id}/{}/{}", key.due, key.name)
            }
            Some(Cause::Keyed(key)) => format!("{entity_type}/tell/{id}/{key}"),
            None => {
                self.next += 1;
                format!(
                    "{entity_type}/{}/{:016x}/{}",
                    shard.0, self.start, self.next
                )
            }
        };
        (0..n).map(|i| format!("{base}/{i}")).collect()
    }
}
