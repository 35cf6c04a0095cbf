//! What colo decodes from outside the process, fed arbitrary input: Kafka
//! records (any producer can write to a topic) and the client API's
//! payloads and content types (any client can call). Each decoder must
//! answer with the value or a reason a person can act on; a panic would
//! take down the task consuming a partition, or the node serving a call.
//!
//! Node-to-node frames are checked where their conversions live, in
//! `transport::grpc`'s `prop_tests` (they are private to the transport).

use colo::codec::{self, ContentType};
use colo::process::samples::counter::CounterMsg;
// What a program's own decoder needs comes from colo alone.
use colo::kafka::{json_events, json_records, Ack, Record, RecordDecoder};
use colo::process::samples::purchases::{purchase_records, UserMsg};
use colo_proto::v1::PurchaseEvent;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use prost::Message as _;

/// At most 256 cases a property, and no regression files written into the
/// checkout: a failing input found here is kept as a named test instead.
fn config() -> Config {
    Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    }
}

fn record(key: Option<Vec<u8>>, payload: Option<Vec<u8>>) -> Record {
    Record {
        topic: "t".into(),
        partition: 0,
        offset: 0,
        timestamp: None,
        key,
        payload,
        ack: Ack::detached(),
    }
}

/// Bytes of every kind: random, UTF-8 text, and empty.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        any::<String>().prop_map(String::into_bytes),
        Just(Vec::new()),
    ]
}

/// Text close enough to a JSON `CounterMsg` to reach serde's checks past
/// the syntax: the right shapes with wrong types, numbers out of range,
/// unknown variants, and nesting deep enough to hit the recursion limit.
fn json_like() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        any::<i64>().prop_map(|n| format!(r#"{{"Add":{n}}}"#)),
        Just(r#""Get""#.to_string()),
        Just(r#"{"Add":1e400}"#.to_string()),
        Just(r#"{"Add":18446744073709551616}"#.to_string()),
        any::<String>().prop_map(|s| format!(r#"{{"Add":{}}}"#, serde_json::json!(s))),
        any::<String>().prop_map(|s| serde_json::json!(s).to_string()),
        "[\\[\\]{}\":,0-9a-zA-Z .eE+-]{0,32}",
        (1usize..4096).prop_map(|depth| "[".repeat(depth)),
        (1usize..4096).prop_map(|depth| r#"{"Add":"#.repeat(depth)),
    ];
    text.prop_map(String::into_bytes)
}

/// A valid encoding with a few bytes overwritten and perhaps cut short, so
/// that decoding gets past the first byte.
fn garbled(encoded: Vec<u8>, flips: Vec<(Index, u8)>, cut: Option<Index>) -> Vec<u8> {
    let mut bytes = encoded;
    if bytes.is_empty() {
        return bytes;
    }
    for (at, byte) in flips {
        let i = at.index(bytes.len());
        bytes[i] = byte;
    }
    if let Some(cut) = cut {
        bytes.truncate(cut.index(bytes.len()));
    }
    bytes
}

fn purchase_event() -> impl Strategy<Value = PurchaseEvent> {
    let text = || prop_oneof![Just(String::new()), any::<String>(), "u-[0-9]{1,4}"];
    (
        text(),
        text(),
        prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()],
        prop_oneof![Just(i64::MIN), Just(-1i64), Just(0i64), any::<i64>()],
        prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
    )
        .prop_map(
            |(user_id, product, quantity, price, sequence)| PurchaseEvent {
                user_id,
                product,
                quantity,
                price,
                sequence,
            },
        )
}

/// A record payload a purchase producer might have written, or not.
fn purchase_payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        bytes(),
        purchase_event().prop_map(|e| e.encode_to_vec()),
        (
            purchase_event(),
            prop::collection::vec((any::<Index>(), any::<u8>()), 0..4),
            any::<Option<Index>>(),
        )
            .prop_map(|(e, flips, cut)| garbled(e.encode_to_vec(), flips, cut)),
    ]
}

/// A content type a client might send: random text, or one of ours with
/// its case changed, spaces around it and parameters after it.
fn content_type_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z/;=+ -]{0,32}",
        (
            prop::sample::select(ContentType::ALL.to_vec()),
            any::<bool>(),
            "[ \t]{0,2}",
            prop_oneof![Just(String::new()), "; ?[a-z]{1,8}=[a-zA-Z0-9-]{0,8}"],
        )
            .prop_map(|(t, upper, pad, params)| {
                let name = if upper {
                    t.as_str().to_ascii_uppercase()
                } else {
                    t.as_str().to_string()
                };
                format!("{pad}{name}{pad}{params}")
            }),
    ]
}

fn counter_msg() -> impl Strategy<Value = CounterMsg> {
    prop_oneof![
        any::<i64>().prop_map(CounterMsg::Add),
        Just(CounterMsg::Get)
    ]
}

/// Asserts what every decoder of colo's promises its caller: a value, or a
/// reason that is not empty.
fn a_value_or_a_reason<T, E: std::fmt::Display>(
    result: &Result<T, E>,
) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        prop_assert!(!e.to_string().is_empty(), "an error without a reason");
    }
    Ok(())
}

/// A plain event, as a topic carries it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Reading {
    celsius: f64,
    #[serde(default)]
    sensor: String,
}

/// An entity's messages: the event, and a query no producer writes.
#[derive(Debug, Clone, PartialEq)]
enum ThermometerMsg {
    Reading(Reading),
    #[expect(dead_code, reason = "a query: no record decodes to it")]
    Average,
}

fn readings_by_key() -> RecordDecoder<ThermometerMsg> {
    json_events::<Reading>().into_messages(ThermometerMsg::Reading)
}

fn readings_by_sensor() -> RecordDecoder<ThermometerMsg> {
    json_events::<Reading>()
        .id_from_event(|reading| reading.sensor.clone())
        .into_messages(ThermometerMsg::Reading)
}

/// Text close enough to a JSON `Reading` to reach serde's checks.
fn reading_like() -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![
        any::<f64>().prop_map(|c| format!(r#"{{"celsius":{c}}}"#)),
        (any::<i32>(), "[a-z0-9-]{0,8}")
            .prop_map(|(c, s)| format!(r#"{{"celsius":{c},"sensor":"{s}"}}"#)),
        Just(r#"{"celsius":"warm"}"#.to_string()),
        Just(r#"{"sensor":"s-1"}"#.to_string()),
        Just(r#""Average""#.to_string()),
        "[\\[\\]{}\":,0-9a-z .eE+-]{0,32}",
    ];
    text.prop_map(String::into_bytes)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_records_become_a_reading_of_a_non_empty_id_or_a_reason_never_a_panic(
        key in proptest::option::of(bytes()),
        payload in proptest::option::of(prop_oneof![bytes(), reading_like()]),
    ) {
        let record = record(key.clone(), payload.clone());
        for (decode, by_key) in [(readings_by_key(), true), (readings_by_sensor(), false)] {
            let decoded = decode(&record);
            a_value_or_a_reason(&decoded)?;
            if let Ok((id, ThermometerMsg::Reading(reading))) = decoded {
                prop_assert!(!id.is_empty(), "an entity without an id");
                if by_key {
                    prop_assert_eq!(Some(id.into_bytes()), key.clone());
                } else {
                    prop_assert_eq!(id, reading.sensor.clone());
                }
                let payload = payload.clone().expect("a reading needs a payload");
                prop_assert_eq!(serde_json::from_slice::<Reading>(&payload).ok(), Some(reading));
            } else if let Ok(other) = decoded {
                prop_assert!(false, "a record decoded to {other:?}, not a reading");
            }
        }
    }

    #[test]
    fn arbitrary_kafka_records_become_a_counter_message_or_a_reason_never_a_panic(
        key in proptest::option::of(bytes()),
        payload in proptest::option::of(prop_oneof![bytes(), json_like()]),
    ) {
        let decoded = json_records::<CounterMsg>()(&record(key.clone(), payload.clone()));
        a_value_or_a_reason(&decoded)?;
        if let Ok((id, message)) = decoded {
            // The entity id is the key, exactly; the message is the payload.
            prop_assert_eq!(Some(id.into_bytes()), key);
            let payload = payload.expect("a message needs a payload");
            prop_assert_eq!(serde_json::from_slice::<CounterMsg>(&payload).ok(), Some(message));
        }
    }

    #[test]
    fn arbitrary_purchase_records_become_a_purchase_or_a_reason_never_a_panic(
        key in proptest::option::of(bytes()),
        payload in proptest::option::of(purchase_payload()),
    ) {
        let decoded = purchase_records()(&record(key, payload));
        a_value_or_a_reason(&decoded)?;
        if let Ok((user, UserMsg::Purchase(purchase))) = &decoded {
            // What a user entity counts on: someone bought at least one
            // item at a price that is not negative.
            prop_assert!(!user.is_empty());
            prop_assert!(purchase.quantity > 0);
            prop_assert!(purchase.price >= 0);
        } else if let Ok(other) = decoded {
            prop_assert!(false, "a record decoded to {other:?}, not a purchase");
        }
    }

    #[test]
    fn arbitrary_content_types_are_parsed_or_refused_naming_what_was_given(
        given in content_type_string(),
    ) {
        match given.parse::<ContentType>() {
            Ok(parsed) => {
                let essence = given.split(';').next().unwrap_or_default().trim();
                prop_assert!(parsed.as_str().eq_ignore_ascii_case(essence));
            }
            Err(e) => {
                prop_assert_eq!(&e.given, &given);
                let shown = e.to_string();
                prop_assert!(shown.contains("application/json"), "{}", shown);
                prop_assert!(shown.contains("application/x-postcard"), "{}", shown);
            }
        }
    }

    #[test]
    fn arbitrary_client_payloads_become_a_message_or_a_reason_never_a_panic(
        data in prop_oneof![bytes(), json_like()],
    ) {
        for content_type in ContentType::ALL {
            a_value_or_a_reason(&content_type.decode::<CounterMsg>(&data))?;
            a_value_or_a_reason(&content_type.decode::<UserMsg>(&data))?;
        }
        a_value_or_a_reason(&codec::decode::<CounterMsg>(&data))?;
    }

    #[test]
    fn every_counter_message_survives_every_content_type(message in counter_msg()) {
        for content_type in ContentType::ALL {
            let bytes = content_type.encode(&message).map_err(|e| TestCaseError::fail(e.0))?;
            prop_assert_eq!(content_type.decode::<CounterMsg>(&bytes), Ok(message));
        }
    }
}

/// The issue's case: a topic of plain readings feeds an entity whose
/// messages also include a query.
#[test]
fn a_plain_event_becomes_the_entitys_message_with_the_key_as_its_id() {
    let decoded = readings_by_key()(&record(
        Some(b"sensor-1".to_vec()),
        Some(br#"{"celsius": 21.5}"#.to_vec()),
    ));
    assert_eq!(
        decoded,
        Ok((
            "sensor-1".to_string(),
            ThermometerMsg::Reading(Reading {
                celsius: 21.5,
                sensor: String::new()
            })
        ))
    );
}

#[test]
fn the_id_can_come_from_the_event_whatever_the_key() {
    let payload = br#"{"celsius": -3.25, "sensor": "roof"}"#.to_vec();
    for key in [None, Some(b"other".to_vec()), Some(Vec::new())] {
        let (id, message) =
            readings_by_sensor()(&record(key.clone(), Some(payload.clone()))).expect("decoded");
        assert_eq!(id, "roof", "{key:?}");
        assert_eq!(
            message,
            ThermometerMsg::Reading(Reading {
                celsius: -3.25,
                sensor: "roof".into()
            })
        );
    }
    // id_from_key goes back to the key.
    let by_key = json_events::<Reading>()
        .id_from_event(|reading| reading.sensor.clone())
        .id_from_key()
        .into_messages(ThermometerMsg::Reading);
    let (id, _) = by_key(&record(Some(b"k".to_vec()), Some(payload))).expect("decoded");
    assert_eq!(id, "k");
}

/// An entity needs an id: an empty one goes to the dead-letter topic with
/// the reason, rather than to an entity nobody can ask.
#[test]
fn records_without_an_id_or_an_event_are_refused_with_the_reason() {
    let reading = || Some(br#"{"celsius": 1.0}"#.to_vec());
    let cases: [(RecordDecoder<ThermometerMsg>, Record, &str); 7] = [
        (
            readings_by_key(),
            record(Some(Vec::new()), reading()),
            "the record's key is empty: it must be the entity id",
        ),
        (
            readings_by_key(),
            record(None, reading()),
            "the record has no key (the entity id)",
        ),
        (
            readings_by_key(),
            record(Some(vec![0xff]), reading()),
            "the key is not UTF-8",
        ),
        (
            readings_by_sensor(),
            record(Some(b"k".to_vec()), reading()),
            "the Reading's entity id is empty: an entity needs an id",
        ),
        (
            readings_by_key(),
            record(Some(b"k".to_vec()), None),
            "the record has no payload",
        ),
        (
            readings_by_key(),
            record(
                Some(b"k".to_vec()),
                Some(br#"{"celsius": "warm"}"#.to_vec()),
            ),
            "the payload is not a Reading: at celsius: invalid type: string \"warm\", expected f64",
        ),
        (
            readings_by_key(),
            record(Some(b"k".to_vec()), Some(br#""Average""#.to_vec())),
            "the payload is not a Reading: invalid type: string \"Average\"",
        ),
    ];
    for (decode, record, reason) in cases {
        let err = decode(&record).expect_err("refused");
        assert!(err.starts_with(reason), "{record:?}: {err}");
    }
    let err = json_records::<CounterMsg>()(&record(Some(Vec::new()), Some(br#""Get""#.to_vec())))
        .expect_err("refused");
    assert_eq!(err, "the record's key is empty: it must be the entity id");
}

/// A stack overflow aborts the process, which proptest cannot catch and
/// would show as a crash of the whole test binary: deep nesting is tried
/// once here, far past anything the generated cases reach.
#[test]
fn a_kafka_payload_nested_a_hundred_thousand_deep_is_a_value_or_a_reason() {
    for payload in ["[".repeat(100_000), r#"{"Add":"#.repeat(100_000)] {
        let err = json_records::<CounterMsg>()(&record(Some(b"a".to_vec()), Some(payload.into())))
            .expect_err("refused");
        assert!(err.starts_with("the payload is not a CounterMsg"), "{err}");
    }
}

/// A length prefix far beyond the bytes that follow is refused before
/// anything that large is allocated.
#[test]
fn a_client_payload_claiming_a_huge_string_is_a_value_or_a_reason() {
    // UserMsg::Purchase, then a product name of length u64::MAX (varint).
    let mut data = vec![0u8];
    data.extend([0xff; 9]);
    data.push(0x01);
    let err = ContentType::Postcard
        .decode::<UserMsg>(&data)
        .expect_err("refused");
    assert!(!err.0.is_empty());
}
