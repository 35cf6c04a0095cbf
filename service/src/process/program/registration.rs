//! The entity types a node program registers, their Rust types erased:
//! what the program asks of each (its name, settings, role, whether it is
//! durable or driven by records) and how it starts one on the node.

use super::ProgramError;
use crate::entity::{Entity, EntityType, RegistrationError};
use crate::kafka::{KafkaIngest, RecordDecoder};
use crate::node::Node;
use crate::settings::ShardingSettings;

/// An entity type registered with a program, its Rust type erased.
pub(super) trait Registration: Send {
    fn name(&self) -> &str;
    fn settings(&self) -> &ShardingSettings;
    /// Whether records can drive it (it was registered with a decoder).
    fn reads_records(&self) -> bool;
    /// Whether its state is durable (it needs the node's state store).
    fn is_durable(&self) -> bool;
    /// The topics its entities emit records to.
    fn outputs(&self) -> &[String];
    /// The role a node must have to host its shards.
    fn role(&self) -> Option<&str>;
    /// Gives it the role `[roles]` names for it.
    fn set_role(&mut self, role: String);
    /// Its shards follow Kafka's partitions: Kafka's murmur2 partitioner
    /// places its entities, so a record's shard is its partition.
    fn follow_partitions(&mut self);
    /// Starts its region (a proxy: routing only), and the ingest of its
    /// records when `ingest` says how.
    fn start(
        self: Box<Self>,
        node: &Node,
        proxy: bool,
        ingest: Option<crate::kafka::IngestSettings>,
    ) -> Result<Option<Started>, ProgramError>;
}

/// What a registration started that must be stopped before the node.
pub(super) type Started = tokio::task::JoinHandle<Result<KafkaIngest, crate::kafka::IngestError>>;

/// An entity type and, if records drive it, how they become messages.
pub(super) struct Registered<E: Entity> {
    pub(super) entity_type: EntityType<E>,
    pub(super) records: Option<RecordDecoder<E::Message>>,
}

impl<E: Entity> Registration for Registered<E> {
    fn name(&self) -> &str {
        self.entity_type.name()
    }

    fn settings(&self) -> &ShardingSettings {
        &self.entity_type.settings
    }

    fn reads_records(&self) -> bool {
        self.records.is_some()
    }

    fn is_durable(&self) -> bool {
        self.entity_type.is_durable()
    }

    fn outputs(&self) -> &[String] {
        self.entity_type.outputs()
    }

    fn role(&self) -> Option<&str> {
        self.entity_type.role()
    }

    fn set_role(&mut self, role: String) {
        self.entity_type.role = Some(role);
    }

    fn follow_partitions(&mut self) {
        let shards = self.entity_type.settings.number_of_shards;
        if let Ok(extractor) = colo_allocation::KafkaMurmur2Extractor::new(shards) {
            self.entity_type = self.entity_type.clone().with_extractor(extractor);
        }
    }

    fn start(
        self: Box<Self>,
        node: &Node,
        proxy: bool,
        ingest: Option<crate::kafka::IngestSettings>,
    ) -> Result<Option<Started>, ProgramError> {
        let name = self.entity_type.name().to_string();
        let mut this = self;
        if !this.entity_type.is_durable() && this.entity_type.settings.remember_entities.is_some() {
            // `[sharding]` applies to every entity type of the node.
            tracing::warn!(entity_type = %name, "sharding.remember_entities applies to durable entity types only; not to this one");
            this.entity_type.settings.remember_entities = None;
        }
        let refused =
            |e: RegistrationError| ProgramError::Settings(format!("entity type {name:?}: {e}"));
        if proxy || !node.has_role(this.entity_type.role()) {
            node.start_proxy(this.entity_type).map_err(refused)?;
            return Ok(None);
        }
        let region = node.start_region(this.entity_type).map_err(refused)?;
        match (ingest, this.records) {
            (Some(settings), Some(decode)) => Ok(Some(tokio::task::spawn_blocking(move || {
                KafkaIngest::start(region, settings, decode)
            }))),
            _ => Ok(None),
        }
    }
}
