//! Roles in a node program: `[roles]` gives entity types theirs, and
//! `node.roles` says which of them this node hosts. A node hosts the shards
//! of the types whose role it has (and of those without one); it routes to
//! the others' as a proxy, so it reads none of their Kafka records and
//! keeps none of their state.

use super::{ProgramError, Registration};
use crate::process::config::NodeConfig;

/// Gives each entity type `[roles]` names its role, over the one the
/// program gave it.
///
/// # Errors
/// `[roles]` names an entity type this node does not run: a typo there
/// would otherwise run the type everywhere.
pub(super) fn assign(
    config: &NodeConfig,
    entity_types: &mut [Box<dyn Registration>],
) -> Result<(), ProgramError> {
    for (name, role) in &config.roles {
        let Some(entity_type) = entity_types.iter_mut().find(|t| t.name() == name) else {
            let runs: Vec<&str> = entity_types.iter().map(|t| t.name()).collect();
            return Err(ProgramError::Settings(format!(
                "roles.{name}: `{name}` is not an entity type this node runs (it runs: {})",
                runs.join(", ")
            )));
        };
        entity_type.set_role(role.clone());
    }
    Ok(())
}

/// Whether this node hosts shards of `entity_type`: it is no proxy, and it
/// has the type's role if the type has one. The same rule
/// [`crate::node::Node::start_region`] follows, for what the program does
/// before the node exists (opening the state store).
pub(super) fn hosts(config: &NodeConfig, entity_type: &dyn Registration) -> bool {
    !config.node.proxy
        && entity_type
            .role()
            .is_none_or(|role| config.node.roles.iter().any(|r| r == role))
}
