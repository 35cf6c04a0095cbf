//! A durable entity type's changelog on a Kafka topic: the state side's
//! [`EntityChangelog`] over `colo_connectors`' compacted topic, one
//! partition per shard; with transactions, each start of a shard writes
//! its partition and its outputs through a producer of its own.

use super::outputs::output_write;
use crate::store::{
    ChangelogError, ChangelogRecord, ChangelogWrite, EntityChangelog, OutputRecord,
    ShardTransactions,
};
use colo_connectors::{Changelog, OutputWrite};
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
            let records: Vec<colo_connectors::ChangelogWrite<'_>> =
                records.iter().map(connector_write).collect();
            self.write_or_delete(partition, &records)
                .await
                .map_err(|e| ChangelogError(Box::new(e)))
        }
        .boxed()
    }

    fn transactions(
        &self,
        partition: i32,
    ) -> Option<BoxFuture<'_, Result<Box<dyn ShardTransactions>, ChangelogError>>> {
        if !self.is_transactional() {
            return None;
        }
        Some(
            async move {
                let opened = Changelog::transactions(self, partition)
                    .await
                    .map_err(|e| ChangelogError(Box::new(e)))?;
                Ok(Box::new(opened) as Box<dyn ShardTransactions>)
            }
            .boxed(),
        )
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

impl ShardTransactions for colo_connectors::ShardTransactions {
    fn write<'a>(
        &'a self,
        records: &'a [ChangelogWrite<'a>],
        outputs: &'a [OutputRecord<'a>],
    ) -> BoxFuture<'a, Result<Vec<i64>, ChangelogError>> {
        async move {
            let records: Vec<colo_connectors::ChangelogWrite<'_>> =
                records.iter().map(connector_write).collect();
            let outputs: Vec<OutputWrite<'_>> = outputs.iter().map(output_write).collect();
            colo_connectors::ShardTransactions::write(self, &records, &outputs)
                .await
                .map_err(|e| ChangelogError(Box::new(e)))
        }
        .boxed()
    }
}

fn connector_write<'a>(r: &ChangelogWrite<'a>) -> colo_connectors::ChangelogWrite<'a> {
    colo_connectors::ChangelogWrite {
        key: r.key,
        value: r.value,
        tag: r.tag,
    }
}
