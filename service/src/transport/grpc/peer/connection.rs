//! One open stream of a Link: opened with Hello and answered with Welcome,
//! or refused, definitely (nothing listens, the node refuses) or maybe (slow,
//! cut off).

use super::super::GrpcSettings;
use super::Local;
use colo_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

/// Why a connection could not be opened.
pub(super) enum Refusal {
    /// The node is not there (nothing listens, or it refuses the Link): it
    /// stopped, or restarts as another incarnation.
    Definite(String),
    /// It may be slow or cut off: worth trying again.
    Maybe(String),
}

/// One open stream.
pub(super) struct Connection {
    pub(super) frames: mpsc::UnboundedSender<pb::LinkFrame>,
    pub(super) answers: tonic::Streaming<pb::LinkAnswer>,
}

impl Connection {
    pub(super) async fn open(
        local: &Local,
        address: &str,
        settings: &GrpcSettings,
    ) -> Result<(Self, pb::Welcome), Refusal> {
        let channel = super::super::connect_link(address, settings)
            .await
            .map_err(|e| match e {
                super::super::ConnectError::Refused(e) => Refusal::Definite(e),
                super::super::ConnectError::Other(e) => Refusal::Maybe(e),
            })?;
        let mut client = pb::node_client::NodeClient::new(channel);
        // Frames are bounded by the credit window (batches) and by the
        // asks in flight (replies); unbounded here so that writing never
        // waits while acks must be read.
        let (frames, rx) = mpsc::unbounded_channel();
        let hello = pb::link_frame::Frame::Hello(pb::Hello {
            node: local.node.to_string(),
            incarnation: local.incarnation,
        });
        let _ = frames.send(pb::LinkFrame { frame: Some(hello) });
        let opened = tokio::time::timeout(
            settings.connect_timeout,
            client.link(UnboundedReceiverStream::new(rx)),
        )
        .await
        .map_err(|_| Refusal::Maybe("no answer in time".into()))?;
        let mut answers = match opened {
            Ok(response) => response.into_inner(),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                return Err(Refusal::Definite(status.message().to_string()))
            }
            Err(status) => return Err(Refusal::Maybe(status.message().to_string())),
        };
        let first = tokio::time::timeout(settings.connect_timeout, answers.message())
            .await
            .map_err(|_| Refusal::Maybe("no welcome in time".into()))?;
        match first {
            Ok(Some(pb::LinkAnswer {
                answer: Some(pb::link_answer::Answer::Welcome(welcome)),
            })) => Ok((Self { frames, answers }, welcome)),
            Ok(_) => Err(Refusal::Maybe("no welcome".into())),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                Err(Refusal::Definite(status.message().to_string()))
            }
            Err(status) => Err(Refusal::Maybe(status.message().to_string())),
        }
    }

    pub(super) fn send(&mut self, frame: pb::link_frame::Frame) {
        let _ = self.frames.send(pb::LinkFrame { frame: Some(frame) });
    }

    pub(super) fn send_batch(&mut self, first: u64, envelopes: Vec<pb::Envelope>) {
        self.send(pb::link_frame::Frame::Batch(pb::Batch {
            first_sequence: first,
            envelopes,
        }));
    }
}
