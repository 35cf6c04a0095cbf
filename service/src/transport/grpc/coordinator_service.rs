//! The server end of regions' coordinator links, on the node that hosts the
//! coordinator: each stream becomes a link to the local coordinator.
//!
//! The stream ends when the region ends it, when the coordinator drops the
//! link (it terminated the region), or when the region has sent nothing for
//! `region_timeout` (a connection left half-open). Whether a region is gone
//! is the coordinator's decision, from the region's heartbeats.

use super::convert;
use super::GrpcSettings;
use crate::coordinator::hosting::{CoordinatorHosting, CoordinatorLocation};
use crate::protocol::{CoordinatorLink, RegionToCoordinator};
use crate::tasks::TaskSet;
use crate::transport::tls::{check_node, ConnectionInfo};
use colo_proto::v1 as pb;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Frames waiting to be written to one region. The coordinator's own link
/// channel is bounded too; this only decouples the socket from it.
const DOWN_CAPACITY: usize = 1024;

type Down = mpsc::Sender<Result<pb::CoordinatorMessage, Status>>;

/// The `colo.v1.Coordinator` service.
pub struct CoordinatorService {
    hosting: Arc<dyn CoordinatorHosting>,
    settings: GrpcSettings,
    tasks: Arc<TaskSet>,
}

impl std::fmt::Debug for CoordinatorService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorService").finish_non_exhaustive()
    }
}

impl CoordinatorService {
    pub(crate) fn new(
        hosting: Arc<dyn CoordinatorHosting>,
        settings: GrpcSettings,
        tasks: Arc<TaskSet>,
    ) -> Self {
        Self {
            hosting,
            settings,
            tasks,
        }
    }
}

#[tonic::async_trait]
impl pb::coordinator_server::Coordinator for CoordinatorService {
    type LinkStream = ReceiverStream<Result<pb::CoordinatorMessage, Status>>;

    async fn link(
        &self,
        request: Request<Streaming<pb::RegionMessage>>,
    ) -> Result<Response<Self::LinkStream>, Status> {
        let (down, rx) = mpsc::channel(DOWN_CAPACITY);
        let session = Session {
            hosting: self.hosting.clone(),
            settings: self.settings.clone(),
            down,
            connection: request.extensions().get::<ConnectionInfo>().cloned(),
        };
        // Answer the call at once: the region sends Register only once it
        // has the stream, so waiting for it here would stall both ends.
        self.tasks.spawn(session.run(request.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

struct Session {
    hosting: Arc<dyn CoordinatorHosting>,
    settings: GrpcSettings,
    down: Down,
    /// What the TLS handshake proved of the region's node, if it was TLS.
    connection: Option<ConnectionInfo>,
}

impl Session {
    async fn fail(&self, status: Status) {
        let _ = self.down.send(Err(status)).await;
    }

    async fn run(self, mut frames: Streaming<pb::RegionMessage>) {
        let first = loop {
            let frame =
                match tokio::time::timeout(self.settings.region_timeout, frames.message()).await {
                    Ok(Ok(Some(frame))) => frame,
                    Ok(Ok(None)) | Ok(Err(_)) => return,
                    Err(_) => {
                        return self
                            .fail(Status::deadline_exceeded(
                                "no register within the region timeout",
                            ))
                            .await
                    }
                };
            // A heartbeat may overtake the region's Register; it says
            // nothing yet.
            let heartbeat = matches!(
                frame.message,
                Some(pb::region_message::Message::Heartbeat(_))
            );
            if !heartbeat {
                break frame;
            }
        };
        let entity_type = first.entity_type.clone();
        let register = match convert::region_message_from_pb(first) {
            Ok(m @ RegionToCoordinator::Register { .. }) => m,
            Ok(_) => {
                return self
                    .fail(Status::invalid_argument(
                        "the first message must be register",
                    ))
                    .await
            }
            Err(e) => return self.fail(Status::invalid_argument(e.to_string())).await,
        };
        let RegionToCoordinator::Register { region, .. } = &register else {
            return;
        };
        let region = region.clone();
        if let Err(refusal) = check_node(self.connection.as_ref(), region.as_str()) {
            return self.fail(refusal).await;
        }
        let (handle, epoch) = match self.hosting.locate(&entity_type) {
            CoordinatorLocation::Local { handle, epoch } => (handle, epoch),
            _ => {
                let reason = format!("this node does not host the coordinator of {entity_type:?}");
                return self.fail(Status::failed_precondition(reason)).await;
            }
        };
        let Ok(link) = handle.connect(region.clone()).await else {
            return self
                .fail(Status::unavailable("coordinator has stopped"))
                .await;
        };
        let CoordinatorLink {
            to_coordinator,
            from_coordinator,
        } = link;
        if to_coordinator.send(register).is_err() {
            return self
                .fail(Status::unavailable("coordinator has stopped"))
                .await;
        }
        let up = self.pump_up(&entity_type, &region, frames, &to_coordinator);
        tokio::pin!(up);
        let silent = tokio::select! {
            silent = &mut up => silent,
            ended = pump_down(from_coordinator, self.down.clone(), epoch) => match ended {
                // The coordinator dropped the link (it terminated the
                // region): ending the stream tells the region.
                DownEnded::Coordinator => false,
                // The region left the link: what it sent before it left
                // (its last ShardStopped, say) is still read, up to the
                // end of its stream.
                DownEnded::Region => up.await,
            },
        };
        if silent {
            tracing::info!(%region, %entity_type, timeout = ?self.settings.region_timeout, "region stream silent; closing it");
        }
        // Dropping `to_coordinator` here ends the link.
    }

    /// Region to coordinator until the stream ends; `true` when it ended by
    /// silence.
    async fn pump_up(
        &self,
        entity_type: &str,
        region: &colo_allocation::RegionId,
        mut frames: Streaming<pb::RegionMessage>,
        to_coordinator: &mpsc::UnboundedSender<RegionToCoordinator>,
    ) -> bool {
        loop {
            let frame =
                match tokio::time::timeout(self.settings.region_timeout, frames.message()).await {
                    Err(_) => return true,
                    Ok(Ok(Some(frame))) => frame,
                    Ok(Ok(None)) | Ok(Err(_)) => return false,
                };
            if frame.entity_type != entity_type {
                let reason = format!(
                    "entity_type {:?} on a link for {entity_type:?}",
                    frame.entity_type
                );
                self.fail(Status::invalid_argument(reason)).await;
                return false;
            }
            match convert::region_message_from_pb(frame) {
                Ok(message) => {
                    if to_coordinator.send(message).is_err() {
                        return false;
                    }
                }
                Err(e) => {
                    tracing::warn!(%region, error = %e, "malformed message from region");
                    self.fail(Status::invalid_argument(e.to_string())).await;
                    return false;
                }
            }
        }
    }
}

/// Which end stopped the coordinator-to-region half of a link.
enum DownEnded {
    Coordinator,
    Region,
}

/// Coordinator to region, stamped with the epoch. Ends when the
/// coordinator drops the link or the region's stream is gone.
async fn pump_down(
    mut from_coordinator: mpsc::UnboundedReceiver<crate::protocol::CoordinatorToRegion>,
    down: Down,
    epoch: u64,
) -> DownEnded {
    while let Some(message) = from_coordinator.recv().await {
        let frame = convert::coordinator_message_to_pb(epoch, message);
        if down.send(Ok(frame)).await.is_err() {
            return DownEnded::Region;
        }
    }
    DownEnded::Coordinator
}
