//! The `[kafka]` section: the example's, what cannot work, and the elected
//! coordinator it allows.

use super::*;

/// The example's `[kafka]` section, uncommented.
fn example_with_kafka() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../colo.example.toml");
    let text = std::fs::read_to_string(path).expect("example");
    let (head, kafka) = text.split_once("#[kafka]").expect("a [kafka] section");
    let kafka: String = kafka
        .lines()
        .filter(|line| !line.starts_with("##"))
        .map(|line| line.strip_prefix('#').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n");
    format!("{head}[kafka]{kafka}\n")
}

#[test]
fn the_example_kafka_section_parses_and_names_group_and_dead_letter_topic() {
    let c = load(&example_with_kafka(), &[], &[]).unwrap();
    let ingest = c.ingest_settings("user").expect("user is driven by kafka");
    assert_eq!(ingest.source.group_id, "colo.user");
    assert_eq!(ingest.source.topics, ["user-events"]);
    assert_eq!(ingest.dead_letter_topic, "colo.user.dlq");
    assert_eq!(
        ingest.source.client,
        [("session.timeout.ms".to_string(), "10000".to_string())]
    );
    let kafka = c.kafka.as_ref().expect("[kafka]");
    assert_eq!(kafka.group_session_timeout(), Duration::from_secs(10));
    let mut unset = kafka.clone();
    unset.client = Default::default();
    assert_eq!(
        unset.group_session_timeout(),
        Duration::from_secs(45),
        "librdkafka's default"
    );
    assert_eq!(ingest.source.max_in_flight, 30_000);
    assert_eq!(ingest.source.max_in_flight_total, 200_000);
    // The rebalance callback waits for the records in flight, their
    // commit, then the hand-off: it must not be cut short.
    assert_eq!(
        ingest.source.rebalance_timeout,
        Duration::from_secs(60) + Duration::from_secs(10) + Duration::from_secs(10)
    );
    assert_eq!(ingest.source.commit_timeout, Duration::from_secs(10));
    assert!(c.ingest_settings("counter").is_none());
    assert!(
        !kafka.transactional_outputs,
        "outputs at least once, by default"
    );
    let set = load(
        &example_with_kafka(),
        &[],
        &["kafka.transactional_outputs=true"],
    )
    .unwrap();
    assert!(set.kafka.expect("[kafka]").transactional_outputs);
}

#[test]
fn kafka_fields_that_cannot_work_are_refused_with_their_name() {
    let cases: [(&str, &str); 7] = [
        ("kafka.topics.user=[]", "kafka.topics.user: names no topic"),
        (
            r#"kafka.topics.user=["user events"]"#,
            "kafka.topics.user: `user events` is not a topic name",
        ),
        (
            "kafka.max_in_flight=0",
            "kafka.max_in_flight: must be at least 1",
        ),
        (
            "kafka.max_in_flight_total=0",
            "kafka.max_in_flight_total: must be at least 1",
        ),
        (
            r#"kafka.client={"group.id"="mine"}"#,
            "kafka.client: client property \"group.id\" is set by colo",
        ),
        (
            r#"kafka.client={"max.poll.interval.ms"="30000"}"#,
            "kafka.client: max.poll.interval.ms (30s) must exceed the rebalance timeout (80s)",
        ),
        (
            r#"kafka.commit_timeout="0s""#,
            "kafka.commit_timeout: must be longer than zero",
        ),
    ];
    for (set, expected) in cases {
        let err = load(&example_with_kafka(), &[], &[set])
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{set}: {err}");
    }
}

#[test]
fn without_a_coordinator_address_the_coordinator_is_elected_which_needs_kafka() {
    let node_only = "[node]\nlisten = \"127.0.0.1:7001\"\nadmin_listen = \"127.0.0.1:9001\"\n";
    let (field, shown) = field_error(node_only, &[], &[]);
    assert_eq!(field, "coordinator.address");
    assert!(shown.contains("required without [kafka]"), "{shown}");
    let kafka = [
        "kafka.bootstrap_servers=127.0.0.1:9092",
        "kafka.cluster=shop",
    ];
    let c = load(node_only, &[], &kafka).unwrap();
    assert!(c.elects_coordinator());
    assert!(!c.hosts_coordinator());
    assert_eq!(c.coordinator.session_timeout, Duration::from_secs(6));
    assert_eq!(c.coordinator.election_timeout, Duration::from_secs(15));
    let mut zero = kafka.to_vec();
    zero.push("coordinator.election_timeout=0s");
    let (field, _) = field_error(node_only, &[], &zero);
    assert_eq!(field, "coordinator.election_timeout");
    // A rejoin before the group moved a dead node's partition delays the
    // election: not before twice the session timeout.
    let mut early = kafka.to_vec();
    early.push("coordinator.election_timeout=11s");
    let (field, shown) = field_error(node_only, &[], &early);
    assert_eq!(field, "coordinator.election_timeout");
    assert!(
        shown.contains("at least twice coordinator.session_timeout (6s)"),
        "{shown}"
    );
    let mut shorter = kafka.to_vec();
    shorter.extend([
        "coordinator.session_timeout=2s",
        "coordinator.election_timeout=4s",
    ]);
    assert!(load(node_only, &[], &shorter).unwrap().elects_coordinator());
    // A session too long to double is refused, not a panic.
    let mut endless = kafka.to_vec();
    endless.push("coordinator.session_timeout=18446744073709551615s");
    let (field, shown) = field_error(node_only, &[], &endless);
    assert_eq!(field, "coordinator.session_timeout");
    assert!(shown.contains("too long"), "{shown}");
    // A configured address pins the coordinator, Kafka or not.
    let mut pinned = kafka.to_vec();
    pinned.push("coordinator.address=127.0.0.1:7001");
    assert!(!load(node_only, &[], &pinned).unwrap().elects_coordinator());
}
