//! The coordinator topic's records: their keys, their values' format,
//! and how the records of a partition replay to a coordinator's events,
//! reading what compaction may leave of them. The leader records of the
//! election are among them (`kafka/leader.rs`).

use crate::coordinator::ledger::CoordinatorEvent;
use serde::{Deserialize, Serialize};

/// The first byte of every value: what follows is this format's.
pub(super) const FORMAT: u8 = 1;
/// Between a key's parts: not in any entity type's name.
pub(super) const SEPARATOR: char = '\0';

/// What a record says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) enum Body {
    /// A coordinator of this epoch starts.
    Epoch,
    Event(CoordinatorEvent),
    /// The whole state, as the events that replay to it.
    Snapshot(Vec<CoordinatorEvent>),
    /// A node elected to host every coordinator of the cluster, at this
    /// gRPC address (`kafka/leader.rs`); not an entity type's.
    Leader {
        address: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Value {
    pub(super) epoch: u64,
    pub(super) body: Body,
}

/// A leader record's key: no entity type's name is empty, so it is no
/// entity type's key.
pub(crate) fn leader_key(epoch: u64) -> Vec<u8> {
    format!("{SEPARATOR}leader{SEPARATOR}{epoch:020}").into_bytes()
}

/// A leader record's value: the node at `address` hosts the coordinators
/// with `epoch`.
pub(crate) fn leader_value(epoch: u64, address: &str) -> Vec<u8> {
    encode(&Value {
        epoch,
        body: Body::Leader {
            address: address.to_string(),
        },
    })
}

/// What any record of the topic says about who leads: its epoch, and the
/// node's address if it is a leader record.
///
/// # Errors
/// The value cannot be read (another format).
pub(crate) fn epoch_of(value: &[u8]) -> Result<(u64, Option<String>), String> {
    let value = decode(value)?;
    let leader = match value.body {
        Body::Leader { address } => Some(address),
        _ => None,
    };
    Ok((value.epoch, leader))
}

pub(super) fn encode(value: &Value) -> Vec<u8> {
    let mut bytes = vec![FORMAT];
    // A value of our own types always encodes.
    bytes.extend(postcard::to_allocvec(value).unwrap_or_default());
    bytes
}

pub(super) fn decode(bytes: &[u8]) -> Result<Value, String> {
    match bytes.split_first() {
        Some((&FORMAT, rest)) => postcard::from_bytes(rest).map_err(|e| e.to_string()),
        Some((format, _)) => Err(format!(
            "record format {format}, and this program reads format {FORMAT}: a newer colo wrote it"
        )),
        None => Err("an empty record".into()),
    }
}

/// The keys of one entity type's records.
pub(super) struct Keys {
    pub(super) prefix: String,
}

impl Keys {
    pub(super) fn new(entity_type: &str) -> Self {
        Self {
            prefix: format!("{entity_type}{SEPARATOR}"),
        }
    }

    pub(super) fn epoch(&self, epoch: u64) -> Vec<u8> {
        format!("{}epoch{SEPARATOR}{epoch:020}", self.prefix).into_bytes()
    }

    /// Each snapshot under a key of its own: a deposed coordinator's
    /// snapshot, written again under the key of its last valid one, would
    /// have compaction drop the valid one and keep a record every reader
    /// ignores.
    pub(super) fn snapshot(&self, epoch: u64, number: u64) -> Vec<u8> {
        format!(
            "{}snapshot{SEPARATOR}{epoch:020}{SEPARATOR}{number:020}",
            self.prefix
        )
        .into_bytes()
    }

    pub(super) fn event(&self, epoch: u64, slot: u64) -> Vec<u8> {
        format!(
            "{}event{SEPARATOR}{epoch:020}{SEPARATOR}{slot:020}",
            self.prefix
        )
        .into_bytes()
    }
}

/// One record of this entity type, read back.
pub(super) struct Read {
    pub(super) key: Vec<u8>,
    /// `None`: a tombstone.
    pub(super) value: Option<Value>,
}

/// What the partition says, once read up to this coordinator's epoch
/// record.
#[derive(Debug, Default)]
pub(super) struct Replayed {
    /// The state's events: the last valid snapshot's, then the events
    /// after it.
    pub(super) events: Vec<CoordinatorEvent>,
    /// The keys after the last valid snapshot that are still live.
    pub(super) since_snapshot: Vec<Vec<u8>>,
    /// Every other key that may still hold a record: tombstoned after the
    /// next snapshot.
    pub(super) superseded: Vec<Vec<u8>>,
    /// The highest epoch of any record.
    pub(super) highest: u64,
    /// Records ignored: written with an epoch lower than one before them.
    pub(super) ignored: u64,
}

/// What compaction may leave of `records` (in partition order): each
/// key's last record, at its place.
pub(super) fn compacted(records: &[Read]) -> impl Iterator<Item = &Read> {
    let last: std::collections::HashMap<&[u8], usize> = records
        .iter()
        .enumerate()
        .map(|(at, read)| (read.key.as_slice(), at))
        .collect();
    records
        .iter()
        .enumerate()
        .filter(move |(at, read)| last.get(read.key.as_slice()) == Some(at))
        .map(|(_, read)| read)
}

/// Replays what compaction may leave of records in partition order. A
/// record counts only if no record before it has a higher epoch; a valid
/// snapshot replaces what came before it.
pub(super) fn replay(records: &[Read]) -> Replayed {
    let mut replayed = Replayed::default();
    let mut fence = 0;
    for read in compacted(records) {
        let Some(value) = &read.value else {
            continue;
        };
        replayed.highest = replayed.highest.max(value.epoch);
        if value.epoch < fence {
            replayed.ignored += 1;
            replayed.superseded.push(read.key.clone());
            continue;
        }
        fence = value.epoch;
        match &value.body {
            Body::Epoch => replayed.since_snapshot.push(read.key.clone()),
            // Not an entity type's record: never under its prefix.
            Body::Leader { .. } => {}
            Body::Event(event) => {
                replayed.events.push(event.clone());
                replayed.since_snapshot.push(read.key.clone());
            }
            Body::Snapshot(events) => {
                replayed.events = events.clone();
                let before = std::mem::take(&mut replayed.since_snapshot);
                replayed
                    .superseded
                    .extend(before.into_iter().filter(|k| *k != read.key));
                replayed.superseded.retain(|k| *k != read.key);
                replayed.since_snapshot.push(read.key.clone());
            }
        }
    }
    replayed
}
