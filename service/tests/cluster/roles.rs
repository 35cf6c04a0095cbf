//! Roles: an entity type with a role runs its shards only on the nodes
//! that have it; the others, started the same way, route to it as proxies.

use crate::support::*;
use colo::{EntityType, Node, RegistrationError};
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_with_a_role_lives_on_the_nodes_with_it_and_is_reached_from_the_others() {
    let mut cluster = Cluster::new("roles", fast_settings(12));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    cluster.add_node_with_roles("a", &["backend"], "backend");
    cluster.add_node_with_roles("b", &["backend", "reports"], "backend");
    let c = cluster.add_node_with_roles("c", &["front"], "backend");
    cluster.await_regions(2).await;

    // Every shard placed, each asked for through c: none of them on c.
    let ids = cluster.touch_all_shards("c").await;
    let hosts: BTreeSet<String> = cluster.homes().into_values().collect();
    assert_eq!(hosts, BTreeSet::from(["a".to_string(), "b".to_string()]));
    for id in ids.values() {
        let reply = c.ask(id, ProbeMsg::Where, ASK).await.expect("ask via c");
        assert!(
            matches!(&reply, ProbeReply::At { node, .. } if node == "a" || node == "b"),
            "{id}: {reply:?}"
        );
    }

    // a dies: its shards start on b, the other node with the role, when
    // next asked for through c; never on c.
    cluster.nodes["a"].0.kill().await;
    eventually("a terminated", Duration::from_secs(10), || async {
        !cluster.shard_counts().contains_key("a")
    })
    .await;
    for id in ids.values() {
        let reply = c.ask(id, ProbeMsg::Where, ASK).await.expect("ask via c");
        assert!(
            matches!(&reply, ProbeReply::At { node, .. } if node == "b"),
            "{id}: {reply:?}"
        );
    }
    assert_eq!(
        cluster.shard_counts(),
        std::collections::BTreeMap::from([("b".to_string(), 12)])
    );
    assert!(cluster.world.delivered_on("c") == 0, "c handled a message");
}

#[test]
fn a_role_that_is_no_name_is_refused_at_registration() {
    let node = Node::new(colo::InMemoryNetwork::new().transport("a"));
    let refused = node
        .start_region(EntityType::new("probe", |_| Tally).with_role("back end"))
        .unwrap_err();
    assert_eq!(refused, RegistrationError::InvalidRole("back end".into()));
    assert_eq!(
        refused.to_string(),
        r#"invalid role "back end": use 1 to 128 characters from [A-Za-z0-9_.-]"#
    );
}

/// The smallest entity a registration needs.
struct Tally;

impl colo::Entity for Tally {
    type Message = ();
    type Reply = ();

    async fn handle(&mut self, _: &colo::EntityContext, _: ()) -> Result<(), colo::EntityError> {
        Ok(())
    }
}
