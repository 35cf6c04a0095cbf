//! The handle on a running coordinator: how it is started, how a region
//! opens its link to it, and how it is stopped.

use super::store::CoordinatorStore;
use super::{Coordinator, CoordinatorState, Input, INBOX_CAPACITY};
use crate::protocol::CoordinatorLink;
use crate::settings::{SettingsError, ShardingSettings};
use crate::tasks::TaskSet;
use colo_allocation::{AllocationStrategy, RegionId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A running coordinator. Dropping the handle does not stop it; `stop` does.
#[derive(Debug, Clone)]
pub struct CoordinatorHandle {
    entity_type: Arc<str>,
    inbox: mpsc::Sender<Input>,
    next_link: Arc<std::sync::atomic::AtomicU64>,
    task: Arc<parking_lot::Mutex<Option<JoinHandle<()>>>>,
    tasks: Arc<TaskSet>,
}

impl CoordinatorHandle {
    /// Starts a coordinator for `entity_type`: replays `store`, then serves.
    /// With `settings.standbys`, the strategy is told which regions keep a
    /// copy of a shard it places ([`AllocationStrategy::allocate_warm`]).
    ///
    /// # Errors
    /// A setting cannot work.
    pub fn spawn(
        entity_type: &str,
        settings: ShardingSettings,
        strategy: Box<dyn AllocationStrategy>,
        store: Arc<dyn CoordinatorStore>,
    ) -> Result<Self, SettingsError> {
        settings.validate()?;
        let (inbox, rx) = mpsc::channel(INBOX_CAPACITY);
        let tasks = Arc::new(TaskSet::default());
        let coordinator = Coordinator {
            entity_type: entity_type.to_string(),
            settings,
            strategy,
            store,
            state: CoordinatorState::default(),
            links: HashMap::new(),
            in_progress: BTreeMap::new(),
            graceful_shutdown: BTreeSet::new(),
            unacked_host: HashMap::new(),
            stats_requests: HashMap::new(),
            next_request: 0,
            last_heard: HashMap::new(),
            extractor: None,
            adoption_grace: None,
            inbox: inbox.clone(),
            tasks: tasks.clone(),
            placements: Default::default(),
        };
        let task = tokio::spawn(coordinator.run(rx));
        Ok(Self {
            entity_type: Arc::from(entity_type),
            inbox,
            next_link: Arc::default(),
            task: Arc::new(parking_lot::Mutex::new(Some(task))),
            tasks,
        })
    }

    /// The entity type this coordinator decides for.
    pub fn entity_type(&self) -> &str {
        &self.entity_type
    }

    /// Opens a link for `region`. The coordinator learns that the region is
    /// gone when the region drops its end.
    ///
    /// # Errors
    /// The coordinator has stopped.
    pub async fn connect(&self, region: RegionId) -> Result<CoordinatorLink, CoordinatorStopped> {
        let link = self
            .next_link
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (to_region, from_coordinator) = mpsc::unbounded_channel();
        let (to_coordinator, mut from_region) = mpsc::unbounded_channel();
        self.inbox
            .send(Input::Connected {
                region: region.clone(),
                link,
                to_region,
            })
            .await
            .map_err(|_| CoordinatorStopped)?;
        let inbox = self.inbox.clone();
        self.tasks.spawn(async move {
            while let Some(message) = from_region.recv().await {
                let input = Input::FromRegion {
                    region: region.clone(),
                    link,
                    message,
                };
                if inbox.send(input).await.is_err() {
                    return;
                }
            }
            let _ = inbox.send(Input::Disconnected { region, link }).await;
        });
        Ok(CoordinatorLink {
            to_coordinator,
            from_coordinator,
        })
    }

    /// Stops the coordinator; links close and regions keep what they know.
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
        self.tasks.abort_now();
    }
}

/// The coordinator is not running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("coordinator has stopped")]
pub struct CoordinatorStopped;
