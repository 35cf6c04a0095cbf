//! Broker faults under load: three `colo run` nodes of the sample's user
//! entity type (durable: totals in each node's store and the changelog)
//! on a cluster of three Kafka brokers, every topic replicated on all
//! three with two in sync required for a write. One broker is killed
//! (SIGKILL) while purchases flow, and started again: its leaderships move
//! to the other two, and colo's consumers, changelog writers and elected
//! coordinator follow them. What counts: every partition keeps being
//! handled while the broker is down, every purchase is handled, every
//! user's totals are exact, and no user was live on two nodes at once.

use colo_allocation::{KafkaMurmur2Extractor, MessageExtractor};
use colo_connectors::{
    create_missing_topics, KeyedProducer, NewTopicSpec, Partitioning, ProducerSettings,
};
use colo_tests::broker_cluster::{offsets_partition, BrokerCluster, BROKER_IDS};
use colo_tests::lifecycle::Lifecycle;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{handled, verify, Producer};
use colo_tests::rdkafka::consumer::{BaseConsumer, Consumer};
use colo_tests::rdkafka::ClientConfig;
use colo_tests::user_nodes::*;
use colo_tests::wait;
use std::collections::BTreeSet;
use std::time::Duration;

/// The sample's shards, one per partition of every topic colo creates.
const SHARDS: u32 = 12;

/// How long the records of every shard may wait for their partitions'
/// new leaders once a broker is killed: the controller fences it 4 s
/// after its last heartbeat, and the clients find the new leaders.
const FAILED_OVER: Duration = Duration::from_secs(60);

/// The nodes' `--set`s on `brokers`: topics created replicated three times.
fn sets_on(brokers: &BrokerCluster, topic: &str, cluster: &str, elected: bool) -> Vec<String> {
    let mut sets = if elected {
        elected_sets(brokers.bootstrap(), topic, cluster)
    } else {
        kafka_sets(brokers.bootstrap(), topic, cluster)
    };
    sets.push("kafka.replication_factor=3".to_string());
    sets
}

/// The shards none of whose users named `<prefix>n` had a purchase
/// handled yet.
fn shards_waiting(nodes: &[&NodeProcess], prefix: &str) -> BTreeSet<u32> {
    let extractor = KafkaMurmur2Extractor::new(SHARDS).expect("shards");
    let mut waiting: BTreeSet<u32> = (0..SHARDS).collect();
    for (user, list) in handled(nodes) {
        if user.starts_with(prefix) && !list.is_empty() {
            waiting.remove(&extractor.shard_id(&user).0);
        }
    }
    waiting
}

fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// Prints what the test reached and when (in the nodes' logs' clock): a
/// failing or slow run's timeline.
fn step(what: &str) {
    eprintln!("[{}] {what}", now());
}

/// Users of `colo produce --user-prefix <prefix>` whose keys land on
/// every shard, for a load that every shard must keep handling: the
/// first `users` ids of the first prefix `<phase>-<n>-user-` that covers
/// all twelve (36 users cover them about half the time).
fn prefix_on_every_shard(phase: &str, users: u64) -> String {
    let extractor = KafkaMurmur2Extractor::new(SHARDS).expect("shards");
    (0..100)
        .map(|n| format!("{phase}-{n}-user-"))
        .find(|prefix| {
            let shards: BTreeSet<u32> = (0..users)
                .map(|u| extractor.shard_id(&format!("{prefix}{u}")).0)
                .collect();
            shards.len() == SHARDS as usize
        })
        .expect("a prefix whose users cover every shard")
}

/// The users and purchases of the load started once a broker is killed:
/// 15 s of purchases at 200 a second, for every shard.
const LOAD_USERS: u64 = 36;
const LOAD_PURCHASES: u64 = 3000;

/// Kills broker `id`, starts a load of purchases for every shard (its
/// producer bootstraps from a cluster with a dead broker), waits until
/// every shard handled purchases of that load (its partitions have new
/// leaders, its changelog partitions too, its groups a new coordinator),
/// starts the broker again and waits until it caught up. The load is
/// written after the kill, so a shard progresses only through the
/// failover, however long the steps before took: a load that had all
/// been handled before the kill (the broker started again earlier took
/// long) once left every shard looking stalled.
async fn kill_and_start_again(
    brokers: &mut BrokerCluster,
    id: i32,
    nodes: &[&NodeProcess],
    dir: &std::path::Path,
    topic: &str,
) -> Producer {
    let killed_at = now();
    brokers.kill(id);
    eprintln!("[{killed_at}] broker {id} killed");
    let prefix = prefix_on_every_shard(&format!("after-{id}"), LOAD_USERS);
    let load = Producer::start_for(
        &prefix,
        dir,
        brokers.bootstrap(),
        topic,
        LOAD_USERS,
        LOAD_PURCHASES,
        Some(200),
    );
    let progressed = wait::held_within(FAILED_OVER, || {
        std::future::ready(shards_waiting(nodes, &prefix).is_empty())
    })
    .await;
    if !progressed {
        panic!(
            "with broker {id} killed at {killed_at}, shards {:?} handled none of the purchases written since within {FAILED_OVER:?}\n{}\n{}",
            shards_waiting(nodes, &prefix),
            kafka_logs(nodes),
            brokers.log()
        );
    }
    step("every shard progressed");
    tokio::task::block_in_place(|| {
        brokers.start_again(id);
        step(&format!("broker {id} started again"));
        brokers.await_in_sync();
    });
    step("every replica in sync");
    load
}

/// Three nodes on `sets`, ready and hosting shards: the first one started
/// alone (it creates the topics and, with `coordinator`, runs the
/// coordinator of the others).
async fn three_nodes(sets: &[String], coordinator: bool) -> Vec<NodeProcess> {
    let first = start(None, sets);
    first.await_ready(READY).await;
    let address = coordinator.then(|| first.grpc.clone());
    let mut nodes = vec![first];
    for _ in 0..2 {
        nodes.push(start(address.as_deref(), sets));
    }
    for node in &nodes {
        node.await_ready(READY).await;
    }
    nodes
}

/// Three nodes on `brokers` (their coordinator `elected` through Kafka, or
/// on the first node), hosting shards, with purchases flowing: 1,200 of
/// 36 users, 600 of them handled already.
async fn loaded(
    brokers: &BrokerCluster,
    dir: &std::path::Path,
    topic: &str,
    cluster: &str,
    elected: bool,
) -> (Vec<NodeProcess>, Producer) {
    let sets = sets_on(brokers, topic, cluster, elected);
    let nodes = three_nodes(&sets, !elected).await;
    step("nodes ready");
    let producer = Producer::start(dir, brokers.bootstrap(), topic, 36, 1200, Some(200));
    let refs: Vec<&NodeProcess> = nodes.iter().collect();
    for node in &refs {
        await_hosting(node).await;
    }
    until_handled(&refs, 600).await;
    step("600 purchases handled");
    (nodes, producer)
}

/// Waits for the producers and for every purchase to be handled, then
/// checks every user's totals and that no user was live on two nodes.
async fn all_exact(producers: Vec<Producer>, nodes: &[&NodeProcess], brokers: &BrokerCluster) {
    let mut expected = std::collections::BTreeMap::new();
    let mut files = Vec::new();
    for producer in producers {
        files.push(producer.expected_file());
        expected.extend(producer.finished(Duration::from_secs(90)).await);
    }
    step("the producers finished");
    await_all_handled(nodes, &expected).await;
    step("every purchase handled");
    for file in &files {
        if let Err(mismatch) = verify(file, &nodes[0].grpc).await {
            panic!(
                "totals differ from the purchases produced: {mismatch}\n{}\n{}",
                kafka_logs(nodes),
                brokers.log()
            );
        }
    }
    let overlaps = Lifecycle::read(nodes, "user").overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
}

/// The broker leading most partitions whose shard's source partition and
/// changelog partition it leads both, and those partitions; with none
/// such (the two topics' leaders placed apart), the broker leading most
/// partitions of either.
fn leader_of_shards_and_changelogs(
    brokers: &BrokerCluster,
    topic: &str,
    changelog: &str,
) -> (i32, Vec<usize>) {
    let sources = brokers.leaders(topic);
    let changelogs = brokers.leaders(changelog);
    let both = |id: i32| -> Vec<usize> {
        (0..sources.len())
            .filter(|&p| sources[p] == id && changelogs.get(p) == Some(&id))
            .collect()
    };
    let led = |id: i32| {
        sources
            .iter()
            .chain(&changelogs)
            .filter(|&&l| l == id)
            .count()
    };
    let id = BROKER_IDS
        .into_iter()
        .max_by_key(|&id| (both(id).len(), led(id)))
        .expect("three brokers");
    eprintln!("killing broker {id}: leaders of {topic} {sources:?}, of {changelog} {changelogs:?}");
    (id, both(id))
}

/// (a) The broker leading shards' partitions and their changelog
/// partitions is killed mid-load and started again: the partitions fail
/// over to the other two, the nodes' consumers and changelog writers
/// follow, and nothing is lost or counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_of_shards_and_their_changelog_killed_under_load_loses_nothing() {
    let mut brokers = BrokerCluster::start();
    step(&format!("brokers ready in {:?}", brokers.started_in()));
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("leader-killed");
    let (nodes, producer) = loaded(&brokers, dir.path(), &topic, &cluster, false).await;
    let refs: Vec<&NodeProcess> = nodes.iter().collect();

    let changelog = format!("{cluster}.user.changelog");
    let (victim, partitions) = tokio::task::block_in_place(|| {
        leader_of_shards_and_changelogs(&brokers, &topic, &changelog)
    });
    eprintln!("broker {victim} leads both for partitions {partitions:?}");
    let load = kill_and_start_again(&mut brokers, victim, &refs, dir.path(), &topic).await;
    all_exact(vec![producer, load], &refs, &brokers).await;
}

/// A cluster name whose two groups, the user entity type's
/// (`<cluster>.user`) and the coordinator election's
/// (`<cluster>.coordinator`), share a `__consumer_offsets` partition: one
/// broker coordinates both.
/// About one name in ten qualifies.
fn cluster_with_one_group_coordinator(test: &str) -> (String, String) {
    (0..1000)
        .map(|_| unique(test))
        .find(|(_, cluster)| {
            offsets_partition(&format!("{cluster}.user"))
                == offsets_partition(&format!("{cluster}.coordinator"))
        })
        .expect("a cluster name whose two groups share a __consumer_offsets partition")
}

/// (b) With the coordinator elected through Kafka: the broker that
/// coordinates the consumer groups (the entity type's and the election's)
/// is killed mid-load and started again; then, if another broker leads
/// the coordinator topic's partition, that one too. The groups move to
/// another coordinator, the coordinator topic to another leader, and
/// nothing is lost or counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_coordinator_and_coordinator_topic_leader_killed_under_load_lose_nothing() {
    let mut brokers = BrokerCluster::start();
    step(&format!("brokers ready in {:?}", brokers.started_in()));
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = cluster_with_one_group_coordinator("group-coordinator-killed");
    let (nodes, producer) = loaded(&brokers, dir.path(), &topic, &cluster, true).await;
    let refs: Vec<&NodeProcess> = nodes.iter().collect();

    let (groups, coordinator_topic) = tokio::task::block_in_place(|| {
        (
            brokers.group_coordinator(&format!("{cluster}.user")),
            brokers.leader_of(&format!("{cluster}.coordinator"), 0),
        )
    });
    eprintln!(
        "broker {groups} coordinates both groups, broker {coordinator_topic} leads the coordinator topic"
    );
    let mut producers = vec![producer];
    producers.push(kill_and_start_again(&mut brokers, groups, &refs, dir.path(), &topic).await);
    if coordinator_topic != groups {
        producers.push(
            kill_and_start_again(&mut brokers, coordinator_topic, &refs, dir.path(), &topic).await,
        );
    }
    all_exact(producers, &refs, &brokers).await;
    wait::until("exactly one node hosts the coordinator", READY, || async {
        hosting_coordinator(&refs).await.len() == 1
    })
    .await;
}

/// The producer of `colo produce` writes a record once when the answer
/// to its write comes too late: one follower of the partition frozen, the
/// leader writes the record and holds its answer (acks=all) until the
/// controller fences the follower, 4 s on; the producer gives up on the
/// request after `socket.timeout.ms` (1 s here) and sends the record
/// again. Without idempotence the leader writes the second copy too, as
/// when a leader is killed between writing and answering: the leader-kill
/// tests above saw users' purchases counted twice, each a record the
/// topic held twice while `colo produce --expected` counted it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_sent_again_after_its_answer_was_held_is_written_once() {
    let brokers = BrokerCluster::start();
    let (topic, _) = unique("answer-held");
    let spec = NewTopicSpec {
        name: topic.clone(),
        partitions: 1,
        replication_factor: 3,
        config: Vec::new(),
    };
    create_missing_topics(brokers.bootstrap(), &[], &[spec], Duration::from_secs(30))
        .await
        .expect("topic created");
    let client = [
        ("socket.timeout.ms", "1000"),
        ("message.timeout.ms", "60000"),
    ];
    let mut producer = KeyedProducer::new(&ProducerSettings {
        bootstrap_servers: brokers.bootstrap().to_string(),
        topic: topic.clone(),
        client: client
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        rate: None,
        partitioning: Partitioning::Shards,
    })
    .expect("producer");
    tokio::task::block_in_place(|| {
        producer.send(b"k", b"1").expect("sent");
        producer.flush().expect("the first record acknowledged");
        let follower = brokers.replicas_of(&topic, 0)[1];
        brokers.pause(follower);
        producer.send(b"k", b"2").expect("sent");
        let held = producer.flush();
        brokers.resume(follower);
        held.expect("the second record acknowledged once the follower was fenced");
    });
    assert_eq!(producer.finish().expect("every record acknowledged"), 2);
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers.bootstrap())
        .create()
        .expect("reader");
    let (low, high) = reader
        .fetch_watermarks(&topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    assert_eq!(high - low, 2, "two records sent, {} written", high - low);
}
