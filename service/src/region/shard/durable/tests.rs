use super::answers::waits_for_write;
use crate::envelope::{Cause, Origin, Reply};
use crate::error::AskError;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A Kafka record sent to its shard's node as an ask, and found applied
/// already there (a copy sent again): its partition acks it on the
/// answer, so the answer must wait for the write of the state the skip
/// rests on, like an answer to a change.
#[test]
fn a_copy_skipped_as_applied_waits_for_the_write_of_the_state_it_rests_on() {
    let origin = Box::new(Cause::Record(Origin {
        source: Arc::from("events/3"),
        offset: 10,
        previous: None,
    }));
    let (tx, _rx) = oneshot::channel::<Result<u32, AskError>>();
    let ask = Reply::Local(tx, Some(origin));
    let skipped: Result<u32, AskError> = Err(AskError::AlreadyApplied);
    assert!(waits_for_write(&ask, &skipped, || true));
    assert!(
        !waits_for_write(&ask, &skipped, || false),
        "written: at once"
    );
    assert!(waits_for_write(&ask, &Ok(1), || true));
    let failed: Result<u32, AskError> = Err(AskError::EntityFailed("no".into()));
    assert!(
        !waits_for_write(&ask, &failed, || true),
        "nothing to wait for"
    );
    assert!(!waits_for_write(&Reply::<u32>::None, &Ok(1), || true));
}

/// Counts its wakes.
#[derive(Default)]
struct Wakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A deleted entity is removed once the group's committed offsets pass
/// what it applied. The commit that does comes after the deletion was
/// written, when its shard may have nothing else to write: the commit must
/// wake the shard all the same. Before, a shard that found nothing to
/// write did not ask to be woken, and slept on until something else woke
/// it (in the Kafka suite, a minute later).
#[tokio::test]
async fn a_commit_past_a_deleted_entity_wakes_its_shard_with_nothing_else_to_write() {
    use super::deletions::Deleted;
    use super::DurableShard;
    use crate::entity::Tally;
    use crate::entity::{EntityId, EntityType};
    use crate::store::{DurableShards, NodeStore, StateSettings};
    use colo_allocation::ShardId;
    use std::task::{Context, Waker};

    let dir = tempfile::tempdir().expect("dir");
    let store = NodeStore::open(dir.path(), StateSettings::default()).expect("store");
    let codec = EntityType::new("tally", |_| Tally::default())
        .durable(1)
        .state
        .expect("durable");
    let shards = Arc::new(DurableShards::default());
    let shard = ShardId(3);
    let mut durable: DurableShard<Tally> = DurableShard::new(
        codec,
        Arc::new(store),
        "tally",
        shard,
        &shards,
        "a",
        &crate::settings::ShardingSettings::default(),
    );
    let id = EntityId::from("gone");
    durable.deletions.deleted(
        &id,
        Deleted {
            applied: [(Arc::from("events"), 10)].into_iter().collect(),
            start: 0,
            keys: smallvec::smallvec![0],
        },
    );
    let written = durable.deletions.take_unwritten();
    durable.deletions.written(written);

    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(
        !durable.write_if_due(&mut cx, false, true),
        "nothing to write before the commit"
    );
    shards.offset_committed("events", 3, 11);
    assert_eq!(
        wakes.0.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the commit woke the shard"
    );
    assert!(
        durable.write_if_due(&mut cx, false, true),
        "woken, the shard writes the removal"
    );
}
