//! `colo remove-internal-data`: what a cluster keeps on its brokers about
//! itself, deleted once no node of it runs (Akka's
//! RemoveInternalClusterShardingData): its coordinator topic, and with
//! `--state` the changelog topics of its durable entity types. Its source
//! topics and dead-letter topics are the user's data and stay.

use std::time::Duration;

/// How long each call to the brokers may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The flags of `colo remove-internal-data`.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoveArgs {
    /// The cluster: its nodes' `kafka.cluster`.
    #[arg(long)]
    pub cluster: String,
    /// The brokers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_servers: String,
    /// Also the changelog topics of its durable entity types: every
    /// entity's state is gone with them.
    #[arg(long)]
    pub state: bool,
    /// Lists what would be deleted, and whether a live node would stop it;
    /// deletes nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A librdkafka property, `key=value` (security, say); repeatable.
    #[arg(long = "client", value_name = "KEY=VALUE", value_parser = key_value)]
    pub client: Vec<(String, String)>,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// `<cluster>.<one name>` and, with a suffix, `<cluster>.<one name><suffix>`:
/// the cluster's own names. A name of another cluster whose name starts
/// with this one's and a dot (`a.b` against `a`) has more parts.
fn of_cluster(name: &str, cluster: &str, suffix: &str) -> bool {
    name.strip_prefix(cluster)
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(suffix))
        .is_some_and(|middle| !middle.is_empty() && !middle.contains('.'))
}

/// Runs the command; what it printed, or why it refused.
///
/// # Errors
/// The brokers cannot be reached, a member of the cluster's groups is
/// alive, or a topic could not be deleted.
pub async fn run(args: RemoveArgs) -> Result<String, String> {
    if args.cluster.is_empty() || args.cluster.contains(char::is_whitespace) {
        return Err(format!("--cluster {:?} names no cluster", args.cluster));
    }
    let (bootstrap, client, cluster, state) = (
        args.bootstrap_servers.clone(),
        args.client.clone(),
        args.cluster.clone(),
        args.state,
    );
    let (topics, live) = tokio::task::spawn_blocking(move || {
        let coordinator = format!("{cluster}.coordinator");
        let keep =
            |name: &str| name == coordinator || (state && of_cluster(name, &cluster, ".changelog"));
        let topics = colo_connectors::topics_named(&bootstrap, &client, &keep, TIMEOUT)?;
        let live =
            colo_connectors::live_groups(&bootstrap, &client, &format!("{cluster}."), TIMEOUT)?;
        let live: Vec<_> = live
            .into_iter()
            .filter(|g| of_cluster(&g.name, &cluster, ""))
            .collect();
        Ok::<_, colo_connectors::SourceError>((topics, live))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("the brokers at {}: {e}", args.bootstrap_servers))?;

    let alive = (!live.is_empty()).then(|| {
        let groups: Vec<String> = live
            .iter()
            .map(|g| format!("{} ({})", g.name, g.members.join(", ")))
            .collect();
        format!(
            "nodes of cluster {:?} are running: members of {}; stop every node of the cluster first",
            args.cluster,
            groups.join("; ")
        )
    });
    let listed = if topics.is_empty() {
        "nothing".to_string()
    } else {
        topics.join(", ")
    };
    if args.dry_run {
        let mut out = format!("would delete: {listed}\n");
        if let Some(alive) = alive {
            out.push_str(&format!("and would refuse now: {alive}\n"));
        }
        return Ok(out);
    }
    if let Some(alive) = alive {
        return Err(format!("refused: {alive}"));
    }
    colo_connectors::delete_topics(&args.bootstrap_servers, &args.client, &topics, TIMEOUT)
        .await
        .map_err(|e| format!("deleting {listed}: {e}"))?;
    Ok(format!("deleted: {listed}\n"))
}

#[cfg(test)]
mod tests {
    use super::of_cluster;

    #[test]
    fn only_the_clusters_own_names_are_its() {
        assert!(of_cluster("shop.user.changelog", "shop", ".changelog"));
        assert!(of_cluster("shop.user", "shop", ""));
        assert!(!of_cluster("shop.eu.user.changelog", "shop", ".changelog"));
        assert!(!of_cluster("shopping.user.changelog", "shop", ".changelog"));
        assert!(!of_cluster("shop..changelog", "shop", ".changelog"));
        assert!(!of_cluster("shop.user-events", "shop", ".changelog"));
    }
}
