//! End-to-end tests for colo.
//!
//! This crate will start real `colo` processes, a real Kafka-protocol broker
//! and a real Prometheus server on loopback, and check what users rely on:
//! no event lost or applied twice when a node is killed under load, shards
//! moving on rebalance, metrics scraped.
//!
//! The in-process cluster tests of the sharding runtime live with the runtime
//! in `service/tests/`, because they need no process or broker.
#![forbid(unsafe_code)]
