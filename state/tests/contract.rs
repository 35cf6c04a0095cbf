//! What the runtime relies on from either engine, run against both.

use colo_allocation::ShardId;
use colo_state::{open, Checkpoint, CheckpointKind, Engine, StoreError, WriteBatch};
use std::ops::ControlFlow;

fn scan_all(
    store: &dyn colo_state::StateStore,
    ty: &str,
    shard: ShardId,
) -> Vec<(String, Vec<u8>)> {
    let mut seen = Vec::new();
    store
        .scan(ty, shard, &mut |id, value| {
            seen.push((id.to_string(), value.to_vec()));
            ControlFlow::Continue(())
        })
        .expect("scan");
    seen
}

#[test]
fn a_written_batch_is_loaded_scanned_by_shard_and_checkpointed_after_a_reopen() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = open(dir.path(), engine).expect("open");
            let mut batch = WriteBatch::new("user");
            batch.put(ShardId(1), "alice", b"a1".to_vec());
            batch.put(ShardId(1), "bob", b"b1".to_vec());
            batch.put(ShardId(2), "carol", b"c1".to_vec());
            batch.checkpoint(
                ShardId(1),
                Checkpoint {
                    offset: 42,
                    epoch: 7,
                    marker: 9,
                    kind: CheckpointKind::Start,
                },
            );
            store.write(&batch).expect("write");
            let mut other = WriteBatch::new("device");
            other.put(ShardId(1), "alice", b"not a user".to_vec());
            store.write(&other).expect("write another type");
        }
        let store = open(dir.path(), engine).expect("reopen");
        assert_eq!(store.engine(), engine);
        assert_eq!(
            store.load("user", ShardId(1), "alice").expect("load"),
            Some(b"a1".to_vec()),
            "{engine}"
        );
        assert_eq!(store.load("user", ShardId(2), "alice").expect("load"), None);
        assert_eq!(
            store.load("order", ShardId(1), "alice").expect("load"),
            None
        );
        assert_eq!(
            scan_all(store.as_ref(), "user", ShardId(1)),
            vec![
                ("alice".to_string(), b"a1".to_vec()),
                ("bob".to_string(), b"b1".to_vec())
            ],
            "{engine}: a shard's scan sees its entities only, in id order, not its checkpoint"
        );
        assert_eq!(
            store.checkpoint("user", ShardId(1)).expect("cp"),
            Some(Checkpoint {
                offset: 42,
                epoch: 7,
                marker: 9,
                kind: CheckpointKind::Start,
            })
        );
        assert_eq!(store.checkpoint("user", ShardId(2)).expect("cp"), None);
        assert_eq!(store.checkpoint("order", ShardId(2)).expect("cp"), None);
    }
}

#[test]
fn batches_of_several_shards_and_types_written_together_are_all_there_after_a_reopen() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = open(dir.path(), engine).expect("open");
            let mut first = WriteBatch::new("user");
            first.put(ShardId(1), "alice", b"a1".to_vec());
            first.checkpoint(
                ShardId(1),
                Checkpoint {
                    offset: 3,
                    epoch: 1,
                    marker: 9,
                    kind: CheckpointKind::Start,
                },
            );
            let mut second = WriteBatch::new("user");
            second.put(ShardId(2), "bob", b"b1".to_vec());
            second.delete(ShardId(2), "gone");
            let mut third = WriteBatch::new("device");
            third.put(ShardId(1), "d", b"d1".to_vec());
            store
                .write_all(&[first, second, third])
                .expect("one commit");
        }
        let store = open(dir.path(), engine).expect("reopen");
        assert_eq!(
            store.load("user", ShardId(1), "alice").expect("load"),
            Some(b"a1".to_vec()),
            "{engine}"
        );
        assert_eq!(
            store.load("user", ShardId(2), "bob").expect("load"),
            Some(b"b1".to_vec()),
            "{engine}"
        );
        assert_eq!(
            store.load("device", ShardId(1), "d").expect("load"),
            Some(b"d1".to_vec()),
            "{engine}"
        );
        assert_eq!(
            store.checkpoint("user", ShardId(1)).expect("cp"),
            Some(Checkpoint {
                offset: 3,
                epoch: 1,
                marker: 9,
                kind: CheckpointKind::Start,
            })
        );
    }
}

#[test]
fn deletes_and_a_cleared_shard_are_gone_and_other_shards_stay() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path(), engine).expect("open");
        let mut batch = WriteBatch::new("user");
        for shard in 0..3 {
            for id in ["a", "b", "c"] {
                batch.put(ShardId(shard), id, vec![shard as u8]);
            }
            batch.checkpoint(
                ShardId(shard),
                Checkpoint {
                    offset: 10,
                    epoch: 1,
                    marker: 9,
                    kind: CheckpointKind::Start,
                },
            );
        }
        store.write(&batch).expect("write");
        let mut batch = WriteBatch::new("user");
        batch.delete(ShardId(0), "b");
        batch.clear_shard(ShardId(1));
        // A put after the clear in the same batch stays.
        batch.put(ShardId(1), "z", vec![9]);
        store.write(&batch).expect("write");
        let ids = |shard| {
            scan_all(store.as_ref(), "user", ShardId(shard))
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(0), ["a", "c"], "{engine}");
        assert_eq!(ids(1), ["z"], "{engine}");
        assert_eq!(ids(2), ["a", "b", "c"], "{engine}");
        assert_eq!(store.checkpoint("user", ShardId(1)).expect("cp"), None);
        assert_eq!(
            store.checkpoint("user", ShardId(2)).expect("cp"),
            Some(Checkpoint {
                offset: 10,
                epoch: 1,
                marker: 9,
                kind: CheckpointKind::Start,
            })
        );
    }
}

#[test]
fn a_scan_stops_when_its_visitor_breaks() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path(), engine).expect("open");
        let mut batch = WriteBatch::new("user");
        for i in 0..100 {
            batch.put(ShardId(0), format!("{i:03}"), vec![]);
        }
        store.write(&batch).expect("write");
        let mut seen = 0;
        store
            .scan("user", ShardId(0), &mut |_, _| {
                seen += 1;
                if seen == 10 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .expect("scan");
        assert_eq!(seen, 10, "{engine}");
    }
}

#[test]
fn a_data_dir_of_the_other_engine_is_refused_with_the_setting_to_change() {
    let dir = tempfile::tempdir().expect("temp dir");
    drop(open(dir.path(), Engine::Sled).expect("open sled"));
    let err = open(dir.path(), Engine::Fjall).expect_err("fjall over a sled store");
    let message = err.to_string();
    assert!(
        matches!(err, StoreError::DataDir { .. })
            && message.contains("holds a sled store")
            && message.contains("state.engine = \"sled\""),
        "{message}"
    );
}

#[test]
fn an_entity_type_name_that_cannot_name_a_table_is_refused_and_nothing_is_written() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path(), engine).expect("open");
        let mut batch = WriteBatch::new("../user");
        batch.put(ShardId(0), "a", vec![1]);
        let err = store.write(&batch).expect_err("bad name");
        assert!(
            matches!(err, StoreError::EntityTypeName(_)),
            "{engine}: {err}"
        );
        assert!(err.to_string().contains("\"../user\""), "{err}");
    }
}

#[test]
fn a_corrupt_database_file_is_refused_naming_its_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    // fjall keeps a directory: a file in its place is not its store.
    std::fs::write(dir.path().join("state.fjall"), b"this is not a database").expect("write");
    let err = open(dir.path(), Engine::Fjall).expect_err("corrupt store");
    assert!(
        err.to_string().contains("state.fjall") && matches!(err, StoreError::Open { .. }),
        "{err}"
    );
}

#[test]
fn a_store_another_node_has_open_is_refused_rather_than_shared() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let _first = open(dir.path(), engine).expect("open");
        let err = open(dir.path(), engine).expect_err("second open of one data dir");
        assert!(matches!(err, StoreError::Open { .. }), "{engine}: {err}");
    }
}

/// A standby's copy is written without waiting for the disk: it reads
/// back at once, its checkpoint with it, and a later synced write (the
/// start that takes the copy over) keeps it across a reopen.
#[test]
fn an_unsynced_write_reads_back_with_its_standby_checkpoint_and_lasts_past_a_synced_one() {
    for engine in Engine::ALL {
        let dir = tempfile::tempdir().expect("temp dir");
        let copy = Checkpoint {
            offset: 10,
            epoch: 3,
            marker: 5,
            kind: CheckpointKind::Standby,
        };
        {
            let store = open(dir.path(), engine).expect("open");
            let mut batch = WriteBatch::new("user");
            batch.put(ShardId(4), "dave", b"d1".to_vec());
            batch.checkpoint(ShardId(4), copy);
            store.write_unsynced(&batch).expect("write");
            assert_eq!(
                store.load("user", ShardId(4), "dave").expect("load"),
                Some(b"d1".to_vec()),
                "{engine}"
            );
            assert_eq!(
                store.checkpoint("user", ShardId(4)).expect("cp"),
                Some(copy)
            );
            let mut synced = WriteBatch::new("user");
            synced.put(ShardId(5), "erin", b"e1".to_vec());
            store.write(&synced).expect("write");
        }
        let store = open(dir.path(), engine).expect("reopen");
        assert_eq!(
            store.load("user", ShardId(4), "dave").expect("load"),
            Some(b"d1".to_vec()),
            "{engine}"
        );
        assert_eq!(
            store.checkpoint("user", ShardId(4)).expect("cp"),
            Some(copy)
        );
    }
}
