//! A durable entity type's changelog on a Kafka topic: the state side's
//! [`EntityChangelog`] over `colo_connectors`' compacted topic, one
//! partition per shard.

use crate::store::{ChangelogError, ChangelogRecord, ChangelogWrite, EntityChangelog};
use colo_connectors::Changelog;
use futures::future::BoxFuture;
use futures::FutureExt;
use std::ops::ControlFlow;

impl EntityChangelog for Changelog {
    fn write<'a>(
        &'a self,
        partition: i32,
        records: &'a [ChangelogWrite<'a>],
    ) -> BoxFuture<'a, Result<Vec<i64>, ChangelogError>> {
        async move {
            let records: Vec<colo_connectors::ChangelogWrite<'_>> = records
                .iter()
                .map(|r| colo_connectors::ChangelogWrite {
                    key: r.key,
                    value: r.value,
                    tag: r.tag,
                })
                .collect();
            self.write_or_delete(partition, &records)
                .await
                .map_err(|e| ChangelogError(Box::new(e)))
        }
        .boxed()
    }

    fn read(
        &self,
        partition: i32,
        from: Option<i64>,
        until: i64,
        visit: &mut dyn FnMut(ChangelogRecord<'_>) -> ControlFlow<()>,
    ) -> Result<u64, ChangelogError> {
        Changelog::read(self, partition, from, until, &mut |r| {
            visit(ChangelogRecord {
                offset: r.offset,
                key: r.key,
                value: r.value,
                tag: r.tag,
            })
        })
        .map_err(|e| ChangelogError(Box::new(e)))
    }
}
