//! The record format's round trips, format by format.

use super::*;

/// The record as serde's derive writes a state without help: a
/// sequence of `u8`. What colo wrote before the state was written as
/// bytes.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct AsSequence {
    epoch: u64,
    version: u32,
    applied: Vec<(String, u64)>,
    state: Option<Vec<u8>>,
}

#[test]
fn the_state_as_bytes_is_written_and_read_as_a_sequence_of_bytes_was() {
    for state in [Some(b"{\"total\":12}".to_vec()), Some(Vec::new()), None] {
        let mut record = StateRecord::new(7, 3, state.clone());
        record.mark_applied("user-events", 41);
        let before = AsSequence {
            epoch: 7,
            version: 3,
            applied: vec![("user-events".to_string(), 41)],
            state,
        };
        let mut written = vec![FORMAT];
        written.extend(postcard::to_allocvec(&before).expect("encodes"));
        assert_eq!(record.encode(), written, "the same bytes");
        assert_eq!(StateRecord::decode(&written), Ok(record), "read back");
    }
}

#[test]
fn a_record_reads_back_as_written() {
    let mut record = StateRecord::new(7, 3, Some(b"{\"total\":12}".to_vec()));
    record.mark_applied("user-events", 41);
    record.mark_applied("refunds", 2);
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record.clone()));
    record.state = None;
    assert_eq!(
        StateRecord::decode(&record.encode()),
        Ok(record.clone()),
        "a deletion keeps its applied offsets"
    );
    record.earlier = vec![3, 5];
    let encoded = record.encode();
    assert_eq!(encoded[0], FORMAT_EARLIER, "format 2 names earlier keys");
    assert_eq!(StateRecord::decode(&encoded), Ok(record));
}

/// A shard re-encodes an entity changed again before its write into
/// the buffer of its unwritten state: what was there before, longer
/// or with earlier starts, must leave nothing behind.
#[test]
fn a_record_encoded_into_a_used_buffer_is_the_record_alone() {
    let applied = [("user-events", 41u64)];
    let timers = [Timer {
        name: "remind".into(),
        due: 9,
        message: vec![1, 2],
    }];
    let mut buffer = StateRecord::encode_parts(
        6,
        3,
        &[("user-events", 40u64), ("refunds", 2)],
        Some(b"{\"total\":11,\"items\":[1,2,3]}"),
        Beside {
            earlier: &[4, 5],
            keys: &[("retry-1", 1_700_000_000_000u64)],
            timers: &timers,
            outbox: &[],
        },
    );
    let state = Some(b"{\"total\":12}".as_slice());
    let nothing = Beside::NOTHING;
    StateRecord::encode_parts_into(&mut buffer, 7, 3, &applied, state, nothing);
    assert_eq!(
        buffer,
        StateRecord::encode_parts(7, 3, &applied, state, nothing)
    );
    let decoded = StateRecord::decode(&buffer).expect("a record");
    assert_eq!((decoded.epoch, decoded.state.as_deref()), (7, state));
    let earlier = Beside {
        earlier: &[7],
        ..nothing
    };
    StateRecord::encode_parts_into(&mut buffer, 8, 3, &applied, None, earlier);
    assert_eq!(
        buffer,
        StateRecord::encode_parts(8, 3, &applied, None, earlier)
    );
}

/// Timers come back as written, with or without keys and earlier
/// starts; a record without timers is written as before (format 3 or
/// lower), so that a colo that does not know timers reads it.
#[test]
fn timers_round_trip_in_format_4_only_when_there_are_any() {
    let mut record = StateRecord::new(5, 2, Some(b"state".to_vec()));
    record.timers = vec![
        Timer {
            name: "remind".into(),
            due: 1_700_000_000_000,
            message: vec![3, 4, 5],
        },
        Timer {
            name: String::new(),
            due: 0,
            message: Vec::new(),
        },
    ];
    let encoded = record.encode();
    assert_eq!(encoded[0], FORMAT_TIMERS);
    assert_eq!(StateRecord::decode(&encoded), Ok(record.clone()));
    record.keys = vec![("order-7".into(), 1_000)];
    record.earlier = vec![2];
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record.clone()));
    record.timers.clear();
    assert_eq!(record.encode()[0], FORMAT_KEYS);
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record));
}

/// An outbox comes back as written, with or without timers, keys and
/// earlier starts; a record without one is written as before (format 4
/// or lower), so that a colo that does not know outputs reads it.
#[test]
fn an_outbox_round_trips_in_format_5_only_when_it_holds_an_output() {
    let mut record = StateRecord::new(5, 2, None);
    record.outbox = vec![Output {
        id: "users/purchases/3/17/0".into(),
        topic: "alerts".into(),
        key: b"u1".to_vec(),
        value: b"crossed".to_vec(),
        headers: vec![("kind".into(), b"threshold".to_vec())],
    }];
    let encoded = record.encode();
    assert_eq!(encoded[0], FORMAT_OUTBOX);
    assert_eq!(StateRecord::decode(&encoded), Ok(record.clone()));
    record.timers = vec![Timer {
        name: "t".into(),
        due: 9,
        message: vec![1],
    }];
    record.keys = vec![("k".into(), 1)];
    record.earlier = vec![4];
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record.clone()));
    record.outbox.clear();
    assert_eq!(record.encode()[0], FORMAT_TIMERS);
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record));
}

/// Idempotency keys come back as written, with or without earlier
/// starts' keys; a record without them is written as before (format 1
/// or 2), so that a colo that does not know keys reads it.
#[test]
fn idempotency_keys_round_trip_in_format_3_only_when_there_are_any() {
    let mut record = StateRecord::new(5, 2, Some(b"state".to_vec()));
    record.mark_applied("t", 3);
    record.keys = vec![("order-7".into(), 1_000), ("order-8".into(), 2_000)];
    let encoded = record.encode();
    assert_eq!(encoded[0], FORMAT_KEYS);
    assert_eq!(StateRecord::decode(&encoded), Ok(record.clone()));
    record.earlier = vec![2, 4];
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record.clone()));
    record.keys.clear();
    assert_eq!(record.encode()[0], FORMAT_EARLIER);
    record.earlier.clear();
    assert_eq!(record.encode()[0], FORMAT);
    assert_eq!(StateRecord::decode(&record.encode()), Ok(record));
}

#[test]
fn a_record_at_or_below_the_applied_offset_is_known_as_applied() {
    let mut record = StateRecord::new(1, 1, Some(Vec::new()));
    assert!(!record.has_applied("t", 0), "nothing applied yet");
    record.mark_applied("t", 10);
    assert!(record.has_applied("t", 9) && record.has_applied("t", 10));
    assert!(!record.has_applied("t", 11));
    assert!(!record.has_applied("other", 5), "offsets are per topic");
    record.mark_applied("t", 4);
    assert_eq!(
        record.applied("t"),
        Some(10),
        "an older offset changes nothing"
    );
}

#[test]
fn values_that_are_not_records_are_refused_with_why() {
    assert_eq!(StateRecord::decode(&[]), Err(RecordError::Empty));
    let newer = StateRecord::decode(&[9, 1, 2]).expect_err("format 9");
    assert_eq!(newer, RecordError::Format(9));
    assert!(newer.to_string().contains("newer colo"), "{newer}");
    let mut encoded = StateRecord::new(1, 1, Some(vec![1, 2, 3])).encode();
    encoded.push(0);
    assert!(matches!(
        StateRecord::decode(&encoded),
        Err(RecordError::Malformed(_))
    ));
    assert!(matches!(
        StateRecord::decode(&encoded[..3]),
        Err(RecordError::Malformed(_))
    ));
}
