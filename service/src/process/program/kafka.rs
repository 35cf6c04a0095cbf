//! The `[kafka]` side of a node program, the process's one room that wires
//! Kafka: which entity types Kafka drives, the brokers checked, the topics
//! created when the config asks for it, each durable type's changelog, the
//! cluster's coordinator topic, and the coordinators' election through it
//! (`kafka/candidacy.rs`). The runtime's Kafka room (`crate::kafka`) runs
//! what this wires.

pub(super) mod candidacy;

use super::coordinators::TopicStores;
use super::{ProgramError, Registration};
use crate::coordinator::store::CoordinatorStore;
use crate::kafka::KafkaCoordinatorStore;
use crate::process::config::{KafkaSection, NodeConfig};
use colo_connectors::{Changelog, NewTopicSpec, OutputProducer};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The brokers refused the node's credentials or did not answer.
pub(super) use colo_connectors::BrokerError;

/// A compacted topic's config, as colo's own changelogs and coordinator
/// topic have it.
fn compacted() -> Vec<(String, String)> {
    colo_connectors::CHANGELOG_CONFIG
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// An entity type's coordinator store on the coordinator topic `log`, for
/// the coordinator of `epoch`: where the static and the elected
/// coordinators keep their state alike.
pub(super) fn coordinator_store(
    log: &Arc<Changelog>,
    name: &str,
    epoch: u64,
) -> Arc<dyn CoordinatorStore> {
    Arc::new(KafkaCoordinatorStore::new(log.clone(), name, epoch))
}

/// How long a changelog write (every record acknowledged) or a restore's
/// wait for its next record may take before it is tried again.
const CHANGELOG_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a shard's changelog write may take: half the fencing margin
/// (`coordinator.region_timeout - fence_timeout`, 2.5 s by default), and no
/// more than [`CHANGELOG_TIMEOUT`]. A write is checked against its shard's
/// fence only when it starts, so one that took longer could land after the
/// node fenced itself and another node took the shard over (harmless to
/// the state, see `store/restore.rs`, but the next owner's restore would
/// have missed it). A write given up is tried again while the shard
/// serves.
pub(super) fn changelog_write_bound(config: &NodeConfig) -> Duration {
    let margin = config
        .coordinator
        .region_timeout
        .saturating_sub(config.coordinator.fence_timeout);
    (margin / 2).clamp(Duration::from_millis(100), CHANGELOG_TIMEOUT)
}

/// How long a send of outputs may take before it is tried again.
const OUTPUT_TIMEOUT: Duration = Duration::from_secs(30);

/// The producer of the outputs of the durable entity types this node
/// hosts, when one emits records (to `topics`): checked to exist first.
/// Blocking: call it off the runtime.
pub(super) fn outputs(
    config: &NodeConfig,
    topics: &[String],
) -> Result<Option<OutputProducer>, ProgramError> {
    if topics.is_empty() {
        return Ok(None);
    }
    let Some(kafka) = &config.kafka else {
        return Err(ProgramError::Settings(format!(
            "entity types of this node emit records to {topics:?}, but it has no [kafka] to send them to"
        )));
    };
    let producer = OutputProducer::new(
        &kafka.bootstrap_servers,
        &kafka.client_properties(),
        OUTPUT_TIMEOUT,
    )
    .and_then(|p| p.check(topics).map(|()| p))
    .map_err(|e| {
        ProgramError::Settings(format!(
            "entity types of this node emit records to {topics:?}, which cannot be used: {e}"
        ))
    })?;
    Ok(Some(producer))
}

/// A durable entity type this node hosts.
pub(super) struct DurableType {
    pub name: String,
    pub number_of_shards: u32,
    /// Whether it emits records.
    pub emits: bool,
}

/// The changelog of each durable entity type when the node has `[kafka]`:
/// checked to exist with one partition per shard (created before, when
/// `kafka.create_topics` is set), in transactions for a type that emits
/// records when `kafka.transactional_outputs` is set. Blocking: call it
/// off the runtime.
pub(super) fn changelogs(
    config: &NodeConfig,
    durable: &[DurableType],
) -> Result<Vec<(String, Changelog)>, ProgramError> {
    let Some(kafka) = &config.kafka else {
        return Ok(Vec::new());
    };
    durable
        .iter()
        .map(|DurableType { name, number_of_shards, emits }| {
            let topic = kafka.changelog_topic(name);
            let changelog = Changelog::writing_within(
                &kafka.bootstrap_servers,
                &kafka.client_properties(),
                &topic,
                CHANGELOG_TIMEOUT,
                changelog_write_bound(config),
            )
            .and_then(|c| c.check(*number_of_shards).map(|()| c))
            .map(|c| {
                if *emits && kafka.transactional_outputs {
                    c.with_transactions()
                } else {
                    c
                }
            })
            .map_err(|e| {
                ProgramError::Settings(format!(
                    "entity type {name:?} is durable, and its changelog cannot be used: {e} (kafka.create_topics = true creates it)"
                ))
            })?;
            Ok((name.clone(), changelog))
        })
        .collect()
}

/// With `[kafka]`, the cluster's coordinator topic: created if missing
/// (it is colo's own, like a stream processor's internal topics, whatever
/// `kafka.create_topics` says), then checked off the runtime.
pub(super) async fn coordinator_topic(
    config: &NodeConfig,
) -> Result<Option<Arc<Changelog>>, ProgramError> {
    let Some(kafka) = &config.kafka else {
        return Ok(None);
    };
    let name = kafka.coordinator_topic();
    let (servers, client) = (kafka.bootstrap_servers.clone(), kafka.client_properties());
    let wanted = name.clone();
    // Listed from the metadata of every topic: asking for the one topic
    // would have a broker that creates topics on demand make it with its
    // default partition count.
    let existing = tokio::task::spawn_blocking(move || {
        colo_connectors::topics_named(&servers, &client, &|t| t == wanted, CREATE_TIMEOUT)
    })
    .await
    .map_err(|e| ProgramError::Settings(format!("coordinator topic: {e}")))?
    .map_err(|e| ProgramError::Settings(format!("the brokers: {e}")))?;
    if existing.is_empty() {
        let spec = NewTopicSpec {
            name: name.clone(),
            partitions: 1,
            replication_factor: kafka.replication_factor,
            config: compacted(),
        };
        colo_connectors::create_missing_topics(
            &kafka.bootstrap_servers,
            &kafka.client_properties(),
            &[spec],
            CREATE_TIMEOUT,
        )
        .await
        .map_err(|e| {
            ProgramError::Settings(format!(
                "the coordinator topic {name:?} could not be created: {e}"
            ))
        })?;
    } else {
        // Listed by the broker asked; another node may have created it a
        // moment ago, and the check below may ask another broker.
        colo_connectors::await_listed(
            &kafka.bootstrap_servers,
            &kafka.client_properties(),
            std::slice::from_ref(&name),
            CREATE_TIMEOUT,
        )
        .await
        .map_err(|e| ProgramError::Settings(format!("the coordinator topic {name:?}: {e}")))?;
    }
    let kafka = kafka.clone();
    let log = tokio::task::spawn_blocking(move || coordinator_log(&kafka))
        .await
        .map_err(|e| ProgramError::Settings(format!("coordinator topic: {e}")))??;
    Ok(Some(Arc::new(log)))
}

/// With `[kafka]`, each entity type's coordinator store on the cluster's
/// coordinator topic (created if missing), for the coordinators this node
/// hosts because the config names it.
pub(super) async fn coordinator_stores(
    config: &NodeConfig,
) -> Result<Option<TopicStores>, ProgramError> {
    let Some(log) = coordinator_topic(config).await? else {
        return Ok(None);
    };
    Ok(Some(Box::new(move |name: &str, epoch: u64| {
        coordinator_store(&log, name, epoch)
    })))
}

/// The cluster's coordinator topic, checked to exist with one partition.
/// Blocking: call it off the runtime.
fn coordinator_log(kafka: &KafkaSection) -> Result<Changelog, ProgramError> {
    let topic = kafka.coordinator_topic();
    let unusable = |e: colo_connectors::SourceError| {
        ProgramError::Settings(format!(
            "the coordinator keeps its state in {topic:?}, which cannot be used: {e}"
        ))
    };
    let log = Changelog::unbatched(
        &kafka.bootstrap_servers,
        &kafka.client_properties(),
        &topic,
        CHANGELOG_TIMEOUT,
    )
    .map_err(unusable)?;
    // The topic was listed by every broker that answered a moment ago, but
    // a broker that did not answer then (slow at a cluster's start) may
    // answer this check before it has learnt the topic from the metadata
    // log: missing is asked again until CREATE_TIMEOUT. Blocking, as the
    // caller runs this on a blocking thread.
    let deadline = std::time::Instant::now() + CREATE_TIMEOUT;
    loop {
        match log.check(1) {
            Ok(()) => return Ok(log),
            Err(colo_connectors::SourceError::Topic(colo_connectors::TopicError::Missing {
                ..
            })) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(unusable(e)),
        }
    }
}

/// How long topic creation may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// The entity types `[kafka.topics]` names, each checked to be run here and
/// registered with a record decoder; their shards are made to follow the
/// partitions.
pub(super) fn check(
    config: &NodeConfig,
    entity_types: &mut [Box<dyn Registration>],
) -> Result<BTreeSet<String>, ProgramError> {
    let Some(kafka) = &config.kafka else {
        return Ok(BTreeSet::new());
    };
    let runs: Vec<String> = entity_types.iter().map(|t| t.name().to_string()).collect();
    let mut driven = BTreeSet::new();
    for name in kafka.topics.keys() {
        let Some(entity_type) = entity_types.iter_mut().find(|t| t.name() == name) else {
            return Err(ProgramError::Settings(format!(
                "kafka.topics.{name}: `{name}` is not an entity type this node runs (it runs: {})",
                runs.join(", ")
            )));
        };
        if !entity_type.reads_records() {
            return Err(ProgramError::Settings(format!(
                "kafka.topics.{name}: the program registers `{name}` without a record decoder (NodeProgram::entity_type_with_records)"
            )));
        }
        entity_type.follow_partitions();
        driven.insert(name.clone());
    }
    Ok(driven)
}

/// How long startup waits for the brokers' first answer before it says it
/// waits (a broker still starting, say).
const BROKERS_ANSWER: Duration = Duration::from_secs(10);

/// Refuses to start when the brokers refuse the node's credentials, or do
/// not answer within `kafka.startup_timeout`; says so at info when they do
/// not answer at once, a wait expected while a cluster starts.
pub(super) async fn check_brokers(config: &NodeConfig) -> Result<(), ProgramError> {
    let Some(kafka) = &config.kafka else {
        return Ok(());
    };
    let (client, secrets) = (kafka.client_properties(), kafka.client.secrets());
    let check = |within| {
        colo_connectors::check_brokers(&kafka.bootstrap_servers, &client, &secrets, within)
    };
    let first = BROKERS_ANSWER.min(kafka.startup_timeout);
    let colo_connectors::Reached::NoAnswer(mut last) = check(first).await? else {
        return Ok(());
    };
    let rest = kafka.startup_timeout.saturating_sub(first);
    if !rest.is_zero() {
        tracing::info!(bootstrap_servers = %kafka.bootstrap_servers, last_error = ?last, waiting = ?rest, "the kafka brokers do not answer yet; waiting for them (kafka.startup_timeout)");
        match check(rest).await? {
            colo_connectors::Reached::Answered => {
                tracing::info!(bootstrap_servers = %kafka.bootstrap_servers, "the kafka brokers answer");
                return Ok(());
            }
            colo_connectors::Reached::NoAnswer(again) => last = again.or(last),
        }
    }
    Err(colo_connectors::BrokerError::Unreachable {
        bootstrap_servers: kafka.bootstrap_servers.clone(),
        waited: kafka.startup_timeout,
        last_error: last.unwrap_or_else(|| "none".to_string()),
    }
    .into())
}

/// `kafka.create_topics` is set: their topics and output topics with
/// `number_of_shards` partitions, their dead-letter topics with one; and
/// the changelog of each durable entity type (compacted,
/// `number_of_shards` partitions).
pub(super) async fn create_topics(
    config: &NodeConfig,
    entity_types: &[Box<dyn Registration>],
) -> Result<(), ProgramError> {
    let Some(kafka) = config.kafka.as_ref().filter(|k| k.create_topics) else {
        return Ok(());
    };
    let mut specs = Vec::new();
    for entity_type in entity_types {
        let partitions = i32::try_from(entity_type.settings().number_of_shards).map_err(|_| {
            ProgramError::Settings(
                "sharding.number_of_shards: too many for Kafka partitions".into(),
            )
        })?;
        if entity_type.is_durable() {
            specs.push(NewTopicSpec {
                name: kafka.changelog_topic(entity_type.name()),
                partitions,
                replication_factor: kafka.replication_factor,
                config: compacted(),
            });
        }
        let Some(topics) = kafka.topics.get(entity_type.name()) else {
            continue;
        };
        for topic in topics {
            specs.push(NewTopicSpec {
                name: topic.clone(),
                partitions,
                replication_factor: kafka.replication_factor,
                config: Vec::new(),
            });
        }
        // Its output topics, partitioned as its own: a colo entity type
        // that reads one finds each key in the same shard.
        for topic in entity_type.outputs() {
            specs.push(NewTopicSpec {
                name: topic.clone(),
                partitions,
                replication_factor: kafka.replication_factor,
                config: Vec::new(),
            });
        }
        specs.push(NewTopicSpec {
            name: kafka.dead_letter_topic(entity_type.name()),
            partitions: 1,
            replication_factor: kafka.replication_factor,
            config: Vec::new(),
        });
    }
    // A topic one type reads and another emits to is made once, as the
    // first names it.
    let mut named = BTreeSet::new();
    specs.retain(|spec| named.insert(spec.name.clone()));
    let created = colo_connectors::create_missing_topics(
        &kafka.bootstrap_servers,
        &kafka.client_properties(),
        &specs,
        CREATE_TIMEOUT,
    )
    .await
    .map_err(|e| ProgramError::Settings(format!("kafka.create_topics: {e}")))?;
    if !created.is_empty() {
        tracing::info!(topics = ?created, "created kafka topics");
    }
    Ok(())
}
