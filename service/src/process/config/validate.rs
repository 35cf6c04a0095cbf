//! Checks that need more than a field's type: ranges, relations between
//! fields, and the existing settings' own validation with their field names
//! placed under the section they live in.

use super::NodeConfig;
use crate::entity::is_name;
use std::collections::HashSet;

/// A refused field's dotted path and the reason.
type Refusal = (String, String);

impl NodeConfig {
    /// Refuses what deserializing lets through.
    ///
    /// # Errors
    /// The first refused field.
    pub(super) fn validate(&self) -> Result<(), Refusal> {
        let refuse = |field: &str, reason: String| Err((field.to_string(), reason));

        let node = &self.node;
        match &node.advertised {
            Some(advertised) => check_host_port("node.advertised", advertised)?,
            None if node.listen.ip().is_unspecified() => {
                return refuse(
                    "node.advertised",
                    format!(
                        "is required when node.listen ({}) is not an address other nodes can reach",
                        node.listen
                    ),
                )
            }
            None => {}
        }
        let mut seen = HashSet::new();
        if let Some(twice) = node.entity_types.iter().find(|t| !seen.insert(*t)) {
            return refuse("node.entity_types", format!("names `{twice}` twice"));
        }
        if let Some(role) = node.roles.iter().find(|r| !is_name(r)) {
            return refuse("node.roles", bad_role(role));
        }
        if let Some((entity_type, role)) = self.roles.iter().find(|(_, r)| !is_name(r)) {
            return refuse(&format!("roles.{entity_type}"), bad_role(role));
        }
        if self.api.idempotency_retention.is_zero() {
            return refuse(
                "api.idempotency_retention",
                "must be longer than zero".to_string(),
            );
        }
        if self.api.idempotency_keys == 0 {
            return refuse("api.idempotency_keys", "must be at least 1".to_string());
        }
        if node.shutdown_timeout.is_zero() {
            return refuse(
                "node.shutdown_timeout",
                "must be longer than zero".to_string(),
            );
        }
        if node.admin_listen == node.listen && node.listen.port() != 0 {
            return refuse(
                "node.admin_listen",
                "must differ from node.listen".to_string(),
            );
        }

        let coordinator = &self.coordinator;
        if coordinator.address.is_empty() {
            if self.kafka.is_none() {
                return refuse(
                    "coordinator.address",
                    "is required without [kafka]: name the node that hosts the coordinator, or add [kafka] to have the nodes elect it".to_string(),
                );
            }
            for (field, value) in [
                ("coordinator.session_timeout", coordinator.session_timeout),
                ("coordinator.election_timeout", coordinator.election_timeout),
            ] {
                if value.is_zero() {
                    return refuse(field, "must be longer than zero".to_string());
                }
            }
            // Kafka gives a dead node's partition to another member once
            // its session times out, then a rebalance round; a rejoin
            // before that starts the group's round again, and on Apache
            // Kafka an election with 5 s against a 6 s session took 10.7 s
            // (27 s at worst) where 15 s let it take 5.8 s (BENCHMARKS.md,
            // "Coordinator failover on Apache Kafka").
            // Kafka's brokers refuse a session longer than their
            // `group.max.session.timeout.ms` (30 minutes by default); a
            // value past twice that cannot be meant.
            let Some(twice) = coordinator.session_timeout.checked_mul(2) else {
                return refuse(
                    "coordinator.session_timeout",
                    "is too long: Kafka's brokers accept a session of at most 30 minutes by default".to_string(),
                );
            };
            if coordinator.election_timeout < twice {
                return refuse(
                    "coordinator.election_timeout",
                    format!(
                        "must be at least twice coordinator.session_timeout ({}): a node that joins the election group again before the group has moved a dead node's partition delays the election",
                        humantime::format_duration(coordinator.session_timeout)
                    ),
                );
            }
        } else {
            check_host_port("coordinator.address", &coordinator.address)?;
        }
        if coordinator.heartbeat_interval.is_zero() {
            return refuse(
                "coordinator.heartbeat_interval",
                "must be longer than zero".to_string(),
            );
        }
        coordinator.least_shard.validate().map_err(|e| {
            (
                format!("coordinator.least_shard.{}", e.field),
                e.reason.to_string(),
            )
        })?;

        self.sharding
            .passivation
            .check()
            .map_err(|(field, reason)| (format!("sharding.{field}"), reason))?;
        if self.sharding.ask_timeout.is_zero() {
            return refuse(
                "sharding.ask_timeout",
                "must be longer than zero".to_string(),
            );
        }
        self.sharding_settings().validate().map_err(|e| {
            // A replacement policy's own fields are not configurable here;
            // the preset is chosen by `strategy`.
            let section = match e.field {
                "heartbeat_interval" | "fence_timeout" | "region_timeout" => "coordinator",
                _ => "sharding",
            };
            let field = match e.field {
                "passivation.replacement" => "passivation.strategy",
                field => field,
            };
            (format!("{section}.{field}"), e.reason)
        })?;

        self.state
            .validate()
            .map_err(|e| (format!("state.{}", e.field), e.reason))?;

        crate::logging::validate_level(&self.log.level)
            .map_err(|e| ("log.level".to_string(), e.reason))?;

        self.check_security()?;

        if let Some(kafka) = &self.kafka {
            kafka.check()?;
            for entity_type in kafka.topics.keys() {
                let Some(ingest) = self.ingest_settings(entity_type) else {
                    continue;
                };
                ingest
                    .source
                    .validate()
                    .map_err(|e| ("kafka.client".to_string(), e.to_string()))?;
            }
        }
        Ok(())
    }
}

impl NodeConfig {
    /// `[tls]` and `[api]`: every listener that can change state is either
    /// encrypted or not, and every client has a way in.
    fn check_security(&self) -> Result<(), Refusal> {
        let refuse = |field: &str, reason: &str| Err((field.to_string(), reason.to_string()));
        match &self.tls {
            None => {
                if self.api.tokens_file.is_some() {
                    return refuse(
                        "api.tokens_file",
                        "needs [tls]: a bearer token sent in plain text can be read off the network",
                    );
                }
            }
            Some(tls) => {
                if tls.reload_interval.is_zero() {
                    return refuse("tls.reload_interval", "must be longer than zero");
                }
                if self.api.tokens_file.is_none() && !self.api.client_certificates {
                    return refuse(
                        "api.client_certificates",
                        "is false and api.tokens_file is not set: no client could call the client API",
                    );
                }
            }
        }
        Ok(())
    }
}

/// Region ids are dialled by other nodes, so they must at least look like
/// `host:port`; the host may be a name (e.g. a container's).
fn bad_role(role: &str) -> String {
    format!("{role:?} is not a role: use 1 to 128 characters from [A-Za-z0-9_.-]")
}

fn check_host_port(field: &str, value: &str) -> Result<(), Refusal> {
    let refuse = |reason: &str| Err((field.to_string(), format!("`{value}` {reason}")));
    let Some((host, port)) = value.rsplit_once(':') else {
        return refuse("is not host:port");
    };
    if host.is_empty() || host.chars().any(char::is_whitespace) {
        return refuse("has no valid host");
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => refuse("needs a port from 1 to 65535"),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_host_port;

    #[test]
    fn addresses_must_be_host_and_port() {
        for ok in ["127.0.0.1:7001", "colo-1:7001", "[::1]:7001"] {
            assert!(check_host_port("f", ok).is_ok(), "{ok}");
        }
        for bad in ["colo-1", ":7001", "colo-1:", "colo-1:0", "a b:1", "h:99999"] {
            assert!(check_host_port("f", bad).is_err(), "{bad}");
        }
    }
}
