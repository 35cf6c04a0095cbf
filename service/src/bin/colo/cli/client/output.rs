//! What the client subcommands print: each result as a short line or table
//! for people, or as one JSON document for scripts.

use colo_proto::v1::{ClusterStatsResponse, RegionStateResponse};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How many entity ids `shards` lists per shard before it only counts them.
const IDS_SHOWN: usize = 10;

/// A tell's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TellOutcome {
    /// The entity type.
    pub entity_type: String,
    /// The entity id.
    pub entity_id: String,
    /// The entity's shard.
    pub shard: u32,
    /// Why the message waits in the node's buffer, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffered: Option<String>,
    /// With an idempotency key: the entity had applied it already.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub already_applied: bool,
}

/// An ask's result.
#[derive(Debug, Clone, PartialEq)]
pub struct AskOutcome {
    /// The entity type.
    pub entity_type: String,
    /// The entity id.
    pub entity_id: String,
    /// The entity's shard.
    pub shard: u32,
    /// The entity's reply: JSON text on one line, as the node wrote it, so
    /// that every digit of a number is printed as the entity produced it.
    pub reply: String,
}

/// One region's shards, sorted by shard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardsOutcome {
    /// The node the region runs on.
    pub region: String,
    /// Shard -> its live entity ids.
    pub shards: BTreeMap<u32, Vec<String>>,
    /// Shards that did not answer in time.
    pub failed: Vec<u32>,
    /// Whether the region is registered with its coordinator now.
    pub coordinator_reachable: bool,
}

impl From<RegionStateResponse> for ShardsOutcome {
    fn from(r: RegionStateResponse) -> Self {
        let mut failed = r.failed;
        failed.sort_unstable();
        Self {
            region: r.region,
            shards: r
                .shards
                .into_iter()
                .map(|s| (s.shard, s.entity_ids))
                .collect(),
            failed,
            coordinator_reachable: r.coordinator_reachable,
        }
    }
}

/// Every region's entity counts, sorted by region and shard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsOutcome {
    /// Region -> its shards' entity counts.
    pub regions: BTreeMap<String, RegionCounts>,
    /// Regions that did not answer in time.
    pub failed_regions: Vec<String>,
    /// The node hosting the coordinator, as the answering node knows it
    /// (empty: none known).
    pub coordinator: String,
    /// That coordinator's epoch (0: not known).
    pub coordinator_epoch: u64,
}

/// One region's entity counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegionCounts {
    /// Shard -> live entities.
    pub shards: BTreeMap<u32, u64>,
    /// Shards that did not answer in time.
    pub failed: Vec<u32>,
    /// Shards whose entities are stopping for a hand-off.
    pub handing_off: Vec<u32>,
    /// Shards whose durable state is still being restored.
    pub restoring: Vec<u32>,
}

impl From<ClusterStatsResponse> for StatsOutcome {
    fn from(r: ClusterStatsResponse) -> Self {
        let mut failed_regions = r.failed_regions;
        failed_regions.sort_unstable();
        Self {
            regions: r
                .regions
                .into_iter()
                .map(|region| {
                    let sorted = |mut shards: Vec<u32>| {
                        shards.sort_unstable();
                        shards
                    };
                    let counts = RegionCounts {
                        shards: region.entities.into_iter().collect(),
                        failed: sorted(region.failed),
                        handing_off: sorted(region.handing_off),
                        restoring: sorted(region.restoring),
                    };
                    (region.region, counts)
                })
                .collect(),
            failed_regions,
            coordinator: r.coordinator,
            coordinator_epoch: r.coordinator_epoch,
        }
    }
}

fn json_line(value: &impl Serialize) -> String {
    // These outcome types hold only strings, numbers and JSON values, which
    // always serialize.
    let mut text = serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{e:?}}}"));
    text.push('\n');
    text
}

/// A tell's output.
pub fn render_tell(outcome: &TellOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    if outcome.already_applied {
        return format!(
            "{}/{} (shard {}) had applied a tell with this idempotency key already: not applied again\n",
            outcome.entity_type, outcome.entity_id, outcome.shard
        );
    }
    match &outcome.buffered {
        None => format!(
            "told {}/{} (shard {})\n",
            outcome.entity_type, outcome.entity_id, outcome.shard
        ),
        Some(why) => format!(
            "told {}/{} (shard {}); buffered: {why}\n",
            outcome.entity_type, outcome.entity_id, outcome.shard
        ),
    }
}

/// An ask's output: the reply, as compact JSON. The JSON document is
/// written by hand around the reply's own text: through a
/// `serde_json::Value` a float could come out one step off.
pub fn render_ask(outcome: &AskOutcome, json: bool) -> String {
    if json {
        let text = |s: &str| serde_json::Value::from(s).to_string();
        return format!(
            "{{\"entity_type\":{},\"entity_id\":{},\"shard\":{},\"reply\":{}}}\n",
            text(&outcome.entity_type),
            text(&outcome.entity_id),
            outcome.shard,
            outcome.reply
        );
    }
    format!(
        "{}/{} (shard {}) replied {}\n",
        outcome.entity_type, outcome.entity_id, outcome.shard, outcome.reply
    )
}

/// A region's shards as a table: shard, entity count, the first ids.
pub fn render_shards(outcome: &ShardsOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    let entities: usize = outcome.shards.values().map(Vec::len).sum();
    let mut text = format!(
        "region {}: {} shards, {} entities\n",
        outcome.region,
        outcome.shards.len(),
        entities
    );
    if !outcome.shards.is_empty() {
        text.push_str("shard  entities  ids\n");
        for (shard, ids) in &outcome.shards {
            let mut shown = ids
                .iter()
                .take(IDS_SHOWN)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            if ids.len() > IDS_SHOWN {
                let _ = write!(shown, ", ... (+{} more)", ids.len() - IDS_SHOWN);
            }
            let _ = writeln!(text, "{shard:>5}  {:>8}  {shown}", ids.len());
        }
    }
    if !outcome.failed.is_empty() {
        let _ = writeln!(
            text,
            "shards that did not answer: {}",
            join(&outcome.failed)
        );
    }
    if !outcome.coordinator_reachable {
        text.push_str(
            "coordinator unreachable: the shards above keep serving until the fence timeout; messages for other shards are buffered\n",
        );
    }
    text
}

/// The cluster's counts as a table: one row per region and a total.
pub fn render_stats(outcome: &StatsOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    let width = outcome
        .regions
        .keys()
        .map(String::len)
        .chain(["region".len(), "total".len()])
        .max()
        .unwrap_or_default();
    let mut text = format!("{:<width$}  shards  entities\n", "region");
    let (mut shards, mut entities) = (0usize, 0u64);
    for (region, counts) in &outcome.regions {
        let n: u64 = counts.shards.values().sum();
        shards += counts.shards.len();
        entities += n;
        let _ = write!(text, "{region:<width$}  {:>6}  {n:>8}", counts.shards.len());
        for (what, shards) in [
            ("handing off", &counts.handing_off),
            ("restoring", &counts.restoring),
            ("not answering", &counts.failed),
        ] {
            if !shards.is_empty() {
                let _ = write!(text, "  (shards {what}: {})", join(shards));
            }
        }
        text.push('\n');
    }
    let _ = writeln!(text, "{:<width$}  {shards:>6}  {entities:>8}", "total");
    match (outcome.coordinator.as_str(), outcome.coordinator_epoch) {
        ("", _) => text.push_str("coordinator: none known (an election is under way)\n"),
        (at, 0) => {
            let _ = writeln!(text, "coordinator: {at}");
        }
        (at, epoch) => {
            let _ = writeln!(text, "coordinator: {at}, epoch {epoch}");
        }
    }
    if !outcome.failed_regions.is_empty() {
        let _ = writeln!(
            text,
            "regions that did not answer: {}",
            outcome.failed_regions.join(", ")
        );
    }
    text
}

/// JSON text without the whitespace between its tokens (JSON needs none),
/// so that it fits on one line; what is inside strings is kept as it is.
pub fn compact_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

fn join(shards: &[u32]) -> String {
    shards
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use colo_proto::v1::{RegionShardStats, ShardState};

    #[test]
    fn tell_and_ask_print_a_line_or_json() {
        let tell = TellOutcome {
            entity_type: "counter".into(),
            entity_id: "a".into(),
            shard: 7,
            buffered: None,
            already_applied: false,
        };
        assert_eq!(render_tell(&tell, false), "told counter/a (shard 7)\n");
        let again = TellOutcome {
            already_applied: true,
            ..tell.clone()
        };
        assert_eq!(
            render_tell(&again, false),
            "counter/a (shard 7) had applied a tell with this idempotency key already: not applied again\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_tell(&again, true)).unwrap();
        assert_eq!(json["already_applied"], true);
        let waiting = TellOutcome {
            buffered: Some("coordinator unreachable".into()),
            ..tell.clone()
        };
        assert_eq!(
            render_tell(&waiting, false),
            "told counter/a (shard 7); buffered: coordinator unreachable\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_tell(&tell, true)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"entity_type": "counter", "entity_id": "a", "shard": 7})
        );

        let ask = AskOutcome {
            entity_type: "counter".into(),
            entity_id: "a \"quoted\"".into(),
            shard: 7,
            reply: "5".into(),
        };
        assert_eq!(
            render_ask(&ask, false),
            "counter/a \"quoted\" (shard 7) replied 5\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_ask(&ask, true)).unwrap();
        assert_eq!(json["reply"], serde_json::json!(5));
        assert_eq!(json["shard"], serde_json::json!(7));
        assert_eq!(json["entity_id"], "a \"quoted\"");
    }

    /// The digits of the report: parsed into a `serde_json::Value`
    /// and printed again, the last one came out as 5.
    #[test]
    fn an_ask_prints_a_float_reply_with_the_digits_the_node_sent() {
        let ask = AskOutcome {
            entity_type: "thermometer".into(),
            entity_id: "s-1".into(),
            shard: 0,
            reply: compact_json("{\"average\": 11.163829787234043, \"readings\": 47}"),
        };
        assert_eq!(
            render_ask(&ask, false),
            "thermometer/s-1 (shard 0) replied {\"average\":11.163829787234043,\"readings\":47}\n"
        );
        let line = render_ask(&ask, true);
        assert!(
            line.ends_with(",\"reply\":{\"average\":11.163829787234043,\"readings\":47}}\n"),
            "{line}"
        );
        assert_eq!(line.lines().count(), 1, "{line}");
    }

    #[test]
    fn compact_json_drops_whitespace_between_tokens_only() {
        assert_eq!(
            compact_json("{ \"a b\" : [1,\n 2.50 ],\t\"c\\\" d\": \" x \" }"),
            "{\"a b\":[1,2.50],\"c\\\" d\":\" x \"}"
        );
    }

    #[test]
    fn shards_print_a_table_with_few_ids() {
        let response = RegionStateResponse {
            region: "node-1".into(),
            shards: vec![
                ShardState {
                    shard: 12,
                    entity_ids: (0..12).map(|i| format!("e{i}")).collect(),
                },
                ShardState {
                    shard: 3,
                    entity_ids: vec!["a".into(), "b".into()],
                },
            ],
            failed: vec![9, 4],
            coordinator_reachable: true,
        };
        let outcome = ShardsOutcome::from(response);
        let text = render_shards(&outcome, false);
        assert_eq!(
            text,
            "region node-1: 2 shards, 14 entities\n\
             shard  entities  ids\n    \
                 3         2  a, b\n   \
                12        12  e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, ... (+2 more)\n\
             shards that did not answer: 4, 9\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_shards(&outcome, true)).unwrap();
        assert_eq!(json["region"], "node-1");
        assert_eq!(json["shards"]["3"], serde_json::json!(["a", "b"]));
        assert_eq!(json["failed"], serde_json::json!([4, 9]));

        let empty = ShardsOutcome::from(RegionStateResponse {
            region: "node-2".into(),
            shards: vec![],
            failed: vec![],
            coordinator_reachable: false,
        });
        assert_eq!(
            render_shards(&empty, false),
            "region node-2: 0 shards, 0 entities\n\
             coordinator unreachable: the shards above keep serving until the fence timeout; messages for other shards are buffered\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_shards(&empty, true)).unwrap();
        assert_eq!(json["coordinator_reachable"], false);
    }

    #[test]
    fn stats_print_a_row_per_region_and_a_total() {
        let response = ClusterStatsResponse {
            regions: vec![
                RegionShardStats {
                    region: "node-2".into(),
                    entities: [(1, 4), (2, 0)].into_iter().collect(),
                    failed: vec![6, 5],
                    handing_off: vec![2],
                    restoring: vec![6],
                },
                RegionShardStats {
                    region: "node-1".into(),
                    entities: [(0, 3)].into_iter().collect(),
                    failed: vec![],
                    handing_off: vec![],
                    restoring: vec![],
                },
            ],
            failed_regions: vec!["node-3".into()],
            coordinator: "node-1".into(),
            coordinator_epoch: 7,
        };
        let outcome = StatsOutcome::from(response);
        assert_eq!(
            render_stats(&outcome, false),
            "region  shards  entities\n\
             node-1       1         3\n\
             node-2       2         4  (shards handing off: 2)  (shards restoring: 6)  (shards not answering: 5, 6)\n\
             total        3         7\n\
             coordinator: node-1, epoch 7\n\
             regions that did not answer: node-3\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_stats(&outcome, true)).unwrap();
        assert_eq!(
            json["regions"]["node-2"]["shards"]["1"],
            serde_json::json!(4)
        );
        assert_eq!(json["failed_regions"], serde_json::json!(["node-3"]));
    }
}
