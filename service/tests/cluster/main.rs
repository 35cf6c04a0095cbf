//! The in-process cluster: several nodes, a coordinator and the in-memory
//! transport in one process, no Kafka. Each module is a group of scenarios.

mod support;

mod concurrency;
mod delivery;
mod failover;
mod failures;
mod faults;
mod fencing;
mod handoff;
mod inspection;
mod kafka;
mod kafka_path;
mod passivation;
mod placement;
mod rebalance;
mod roles;
mod routing;
mod shutdown;
mod strategies;
