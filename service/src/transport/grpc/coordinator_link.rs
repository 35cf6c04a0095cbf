//! A region's link to a coordinator on another node: the runtime's pair of
//! channels bridged to one `colo.v1.Coordinator/Link` stream.
//!
//! Liveness is the protocol's (heartbeats and their answers), not the
//! transport's: the link ends when the stream breaks or the region drops
//! it. On one link, frames of an older epoch than one already heard there
//! are ignored: they come from a coordinator that has been replaced. A
//! frame below the hosting's floor (the elected coordinator's epoch) ends
//! the link: its coordinator was deposed, and the region looks for the
//! elected one.

use super::convert;
use super::GrpcSettings;
use crate::coordinator::hosting::CoordinatorHosting;
use crate::protocol::{CoordinatorLink, CoordinatorToRegion};
use crate::tasks::TaskSet;
use colo_allocation::RegionId;
use colo_proto::v1 as pb;
use futures::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// What a link knows of coordinator epochs.
pub struct Epochs {
    /// The newest epoch the node's links to this entity type's
    /// coordinator heard.
    pub newest: Arc<AtomicU64>,
    /// Where the elected coordinator's epoch, the floor, is known.
    pub hosting: Arc<dyn CoordinatorHosting>,
}

/// Opens the stream to the coordinator at `address`.
pub async fn open(
    address: &str,
    entity_type: &str,
    _region: &RegionId,
    settings: &GrpcSettings,
    epochs: Epochs,
    tasks: &TaskSet,
) -> Result<CoordinatorLink, String> {
    let channel = super::connect(address, settings).await?;
    let mut client = pb::coordinator_client::CoordinatorClient::new(channel);
    let (to_coordinator, from_region) = mpsc::unbounded_channel();
    let (to_region, from_coordinator) = mpsc::unbounded_channel();
    // The region's messages go out as they come; when the region drops its
    // sender (it left the link) the stream ends, and the coordinator sees.
    let name = entity_type.to_string();
    let up = UnboundedReceiverStream::new(from_region)
        .map(move |message| convert::region_message_to_pb(&name, message));
    let down = tokio::time::timeout(settings.connect_timeout, client.link(up))
        .await
        .map_err(|_| "coordinator did not answer in time".to_string())?
        .map_err(|status| status.message().to_string())?
        .into_inner();
    tasks.spawn(pump_down(down, to_region, entity_type.to_string(), epochs));
    Ok(CoordinatorLink {
        to_coordinator,
        from_coordinator,
    })
}

/// Coordinator to region. Ends when the stream breaks or ends, or the
/// region dropped its receiver; dropping `to_region` then tells the region
/// that the link is lost.
async fn pump_down(
    mut down: tonic::Streaming<pb::CoordinatorMessage>,
    to_region: mpsc::UnboundedSender<CoordinatorToRegion>,
    entity_type: String,
    epochs: Epochs,
) {
    let Epochs {
        newest: newest_epoch,
        hosting,
    } = epochs;
    let mut link_epoch: Option<u64> = None;
    loop {
        let frame = tokio::select! {
            frame = down.message() => frame,
            // The region left the link: stop reading, which ends the stream.
            _ = to_region.closed() => return,
        };
        let frame = match frame {
            Err(status) => {
                tracing::debug!(%status, "coordinator link broke");
                return;
            }
            Ok(None) => return,
            Ok(Some(frame)) => frame,
        };
        let floor = hosting.floor(&entity_type);
        if frame.epoch < floor {
            tracing::info!(
                epoch = frame.epoch,
                elected = floor,
                %entity_type,
                "a deposed coordinator's message; link dropped"
            );
            return;
        }
        match link_epoch {
            // The coordinator this link reached is the one the hosting
            // names now: follow it even if its epoch is lower than one
            // heard before (a clock stepped back), rather than ignore it
            // for ever.
            None => {
                let newest = newest_epoch.swap(frame.epoch, Ordering::AcqRel);
                if frame.epoch < newest {
                    tracing::warn!(
                        epoch = frame.epoch,
                        newest,
                        "coordinator epoch went back; following the current coordinator"
                    );
                }
                link_epoch = Some(frame.epoch);
            }
            Some(epoch) if frame.epoch < epoch => {
                tracing::debug!(
                    epoch = frame.epoch,
                    newest = epoch,
                    "message from an older coordinator ignored"
                );
                continue;
            }
            Some(_) => {
                link_epoch = Some(frame.epoch);
                newest_epoch.fetch_max(frame.epoch, Ordering::AcqRel);
            }
        }
        let Some(message) = frame.message else {
            continue;
        };
        match convert::coordinator_message_from_pb(message) {
            Ok(message) => {
                if to_region.send(message).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "malformed coordinator message; dropping the link");
                return;
            }
        }
    }
}
