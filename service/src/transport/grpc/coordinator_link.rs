//! A region's link to a coordinator on another node: the runtime's pair of
//! channels bridged to one `colo.v1.Coordinator/Link` stream, with
//! heartbeats both ways.
//!
//! The link ends (and the region registers again on its next tick) when the
//! stream breaks, or when the coordinator has sent nothing for
//! `region_timeout`. On one link, frames of an older epoch than one already
//! heard there are ignored: they come from a coordinator that has been
//! replaced.

use super::convert::{self, FromCoordinator};
use super::GrpcSettings;
use crate::protocol::{CoordinatorLink, CoordinatorToRegion, RegionToCoordinator, LINK_CAPACITY};
use crate::tasks::TaskSet;
use colo_allocation::RegionId;
use colo_proto::v1 as pb;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// Opens the stream to the coordinator at `address`.
pub async fn open(
    address: &str,
    entity_type: &str,
    _region: &RegionId,
    settings: &GrpcSettings,
    newest_epoch: Arc<AtomicU64>,
    tasks: &TaskSet,
) -> Result<CoordinatorLink, String> {
    let channel = super::connect(address, settings.connect_timeout).await?;
    let mut client = pb::coordinator_client::CoordinatorClient::new(channel);
    let (up, up_rx) = mpsc::channel(LINK_CAPACITY);
    let down = tokio::time::timeout(
        settings.connect_timeout,
        client.link(ReceiverStream::new(up_rx)),
    );
    let (to_coordinator, from_region) = mpsc::channel(LINK_CAPACITY);
    let (to_region, from_coordinator) = mpsc::channel(LINK_CAPACITY);
    tasks.spawn(pump_up(
        entity_type.to_string(),
        from_region,
        up,
        settings.heartbeat_interval,
    ));
    let down = down
        .await
        .map_err(|_| "coordinator did not answer in time".to_string())?
        .map_err(|status| status.message().to_string())?
        .into_inner();
    tasks.spawn(pump_down(
        down,
        to_region,
        settings.region_timeout,
        newest_epoch,
    ));
    Ok(CoordinatorLink {
        to_coordinator,
        from_coordinator,
    })
}

/// Region to coordinator, with a heartbeat every interval. Ends when the
/// region drops its sender (it lost or left the link): that closes the
/// stream, which the coordinator sees as the region leaving.
async fn pump_up(
    entity_type: String,
    mut from_region: mpsc::Receiver<RegionToCoordinator>,
    up: mpsc::Sender<pb::RegionMessage>,
    heartbeat_interval: std::time::Duration,
) {
    // The first tick waits a full interval: the region's Register must be
    // the stream's first message.
    let mut heartbeat = tokio::time::interval_at(
        tokio::time::Instant::now() + heartbeat_interval,
        heartbeat_interval,
    );
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let frame = tokio::select! {
            biased;
            message = from_region.recv() => match message {
                Some(message) => convert::region_message_to_pb(&entity_type, message),
                None => return,
            },
            _ = heartbeat.tick() => convert::heartbeat_to_coordinator(&entity_type),
        };
        if up.send(frame).await.is_err() {
            return;
        }
    }
}

/// Coordinator to region. Ends when the stream breaks, the coordinator is
/// silent for `region_timeout`, or the region dropped its receiver; dropping
/// `to_region` then tells the region that the link is lost.
async fn pump_down(
    mut down: tonic::Streaming<pb::CoordinatorMessage>,
    to_region: mpsc::Sender<CoordinatorToRegion>,
    region_timeout: std::time::Duration,
    newest_epoch: Arc<AtomicU64>,
) {
    let mut link_epoch: Option<u64> = None;
    loop {
        let frame = match tokio::time::timeout(region_timeout, down.message()).await {
            Err(_) => {
                tracing::warn!(timeout = ?region_timeout, "coordinator silent; dropping the link");
                return;
            }
            Ok(Err(status)) => {
                tracing::debug!(%status, "coordinator link broke");
                return;
            }
            Ok(Ok(None)) => return,
            Ok(Ok(Some(frame))) => frame,
        };
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
            Ok(FromCoordinator::Protocol(message)) => {
                if to_region.send(message).await.is_err() {
                    return;
                }
            }
            Ok(FromCoordinator::Heartbeat) => {}
            Ok(FromCoordinator::Refused(reason)) => {
                tracing::warn!(%reason, "coordinator refused a message");
            }
            Err(e) => {
                tracing::warn!(error = %e, "malformed coordinator message; dropping the link");
                return;
            }
        }
    }
}
