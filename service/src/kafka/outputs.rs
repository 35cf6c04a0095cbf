//! Where a node's durable entity types' outputs go on Kafka: the state
//! side's [`OutputSink`] over `colo_connectors`' idempotent producer.

use crate::output::OUTPUT_ID_HEADER;
use crate::store::{OutputRecord, OutputSendError, OutputSink};
use colo_connectors::{OutputProducer, OutputWrite};
use futures::future::BoxFuture;
use futures::FutureExt;

impl OutputSink for OutputProducer {
    fn send<'a>(
        &'a self,
        records: &'a [OutputRecord<'a>],
    ) -> BoxFuture<'a, Result<(), OutputSendError>> {
        async move {
            let writes: Vec<OutputWrite<'_>> = records.iter().map(output_write).collect();
            OutputProducer::send(self, &writes)
                .await
                .map_err(|e| OutputSendError(Box::new(e)))
        }
        .boxed()
    }
}

/// An output as `colo_connectors` sends it, its id in its header.
pub(super) fn output_write<'a>(r: &OutputRecord<'a>) -> OutputWrite<'a> {
    OutputWrite {
        topic: r.topic,
        key: r.key,
        value: r.value,
        headers: r.headers,
        id: (OUTPUT_ID_HEADER, r.id),
    }
}
