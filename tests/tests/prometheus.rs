//! The metrics through a real Prometheus, as the compose cluster's
//! Prometheus reads them: two `colo run` nodes consuming from the test
//! broker, scraped with the repository's scrape config and alert rules
//! (targets the test's nodes, a 1 s interval for a short test), and read
//! back through Prometheus's HTTP API. Every PromQL expression of every
//! dashboard panel and alert rule is run against it.

use colo_tests::deploy;
use colo_tests::prometheus::Prometheus;
use colo_tests::purchases::Producer;
use colo_tests::user_nodes::{self, kafka_sets, READY};
use colo_tests::{broker::Broker, process::NodeProcess, wait};
use std::time::Duration;

/// The test nodes' number of shards (`NodeProcess`'s config).
const SHARDS: f64 = 12.0;

/// The repository's Prometheus config, scraping `targets` every second,
/// its rule files where the repository keeps them.
fn config(targets: &[&str]) -> String {
    let mut config = deploy::prometheus_config();
    config["global"]["scrape_interval"] = "1s".into();
    config["global"]["evaluation_interval"] = "1s".into();
    let rules = deploy::repo().join("deploy/prometheus");
    let files: Vec<serde_json::Value> = config["rule_files"]
        .as_array()
        .expect("rule files")
        .iter()
        .map(|f| {
            rules
                .join(f.as_str().expect("a path"))
                .display()
                .to_string()
                .into()
        })
        .collect();
    config["rule_files"] = files.into();
    let jobs = config["scrape_configs"].as_array_mut().expect("jobs");
    let colo = jobs
        .iter_mut()
        .find(|j| j["job_name"] == "colo")
        .expect("the colo job");
    colo["static_configs"] = serde_json::json!([{ "targets": targets }]);
    serde_norway::to_string(&config).expect("config YAML")
}

async fn until_value(prometheus: &Prometheus, what: &str, expr: &str, holds: impl Fn(f64) -> bool) {
    let holds = &holds;
    wait::until_ok(Duration::from_secs(90), || async move {
        match prometheus.sum(expr).await {
            Ok(value) if holds(value) => Ok(()),
            other => Err(format!("{what}: {expr} was {other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn prometheus_scrapes_the_nodes_and_every_dashboard_and_alert_expression_runs() {
    let broker = Broker::start();
    let (topic, cluster) = user_nodes::unique("prometheus");
    let mut sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    // Standby copies, for the dashboard's panels of them to have data.
    sets.push("sharding.standbys=1".to_string());
    let a = user_nodes::start(None, &sets);
    a.await_ready(READY).await;
    let mut b = user_nodes::start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let prometheus = Prometheus::start(&config(&[&a.admin, &b.admin])).await;

    // Both nodes are scraped, and their hosted shards add up to every
    // shard once the second node has its share.
    user_nodes::await_hosting(&b).await;
    until_value(
        &prometheus,
        "both nodes scraped",
        r#"count(up{job="colo"} == 1)"#,
        |v| v == 2.0,
    )
    .await;
    until_value(
        &prometheus,
        "every shard hosted once across the two nodes",
        r#"sum(colo_region_hosted_shards{entity_type="user"}) and count(colo_region_hosted_shards{entity_type="user"} > 0) == 2"#,
        |v| v == SHARDS,
    )
    .await;

    // Handled records count up while records flow.
    let dir = tempfile::tempdir().expect("dir");
    let handled = r#"sum(colo_kafka_records_total{entity_type="user",outcome="handled"})"#;
    let before = prometheus.sum(handled).await.expect("handled");
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 50, 2000, Some(500));
    until_value(&prometheus, "handled records counted", handled, |v| {
        v > before
    })
    .await;
    until_value(
        &prometheus,
        "a handled rate",
        r#"sum(rate(colo_kafka_records_total{entity_type="user",outcome="handled"}[5s]))"#,
        |v| v > 0.0,
    )
    .await;
    producer.finished(Duration::from_secs(60)).await;

    // A node leaves: its shards are handed off, and the hand-offs show in
    // their histogram (recorded where the coordinator runs).
    b.terminate();
    b.exited(Duration::from_secs(60)).await;
    until_value(
        &prometheus,
        "a hand-off in its histogram",
        r#"sum(colo_handoff_duration_seconds_count{entity_type="user"})"#,
        |v| v > 0.0,
    )
    .await;
    until_value(
        &prometheus,
        "every shard on the node that stayed",
        &format!(
            r#"sum(colo_region_hosted_shards{{entity_type="user",instance="{}"}})"#,
            a.admin
        ),
        |v| v == SHARDS,
    )
    .await;

    check_every_expression(&prometheus, &a).await;
}

/// Every expression of the dashboard and the rules runs without error; one
/// whose metrics all exist in this run has data (an alert rule's without
/// its final comparison: that holds only when something is wrong).
async fn check_every_expression(prometheus: &Prometheus, node: &NodeProcess) {
    let expressions = deploy::expressions();
    assert!(expressions.len() >= 16, "{} expressions", expressions.len());
    let mut problems = Vec::new();
    let mut with_data = 0;
    for expression in &expressions {
        if let Err(e) = prometheus.query(&expression.expr).await {
            problems.push(format!("{}: {e}", expression.origin));
            continue;
        }
        let mut all_exist = true;
        for name in deploy::metric_names(&expression.expr) {
            let exists = prometheus
                .vector(&format!("{name}{{job=\"colo\"}}"))
                .await
                .is_ok_and(|v| !v.is_empty());
            all_exist &= exists;
        }
        if !all_exist {
            continue;
        }
        let measured = if expression.alert {
            deploy::measured(&expression.expr)
        } else {
            expression.expr.clone()
        };
        match prometheus.vector(&measured).await {
            Ok(series) if !series.is_empty() => with_data += 1,
            Ok(_) => problems.push(format!(
                "{}: no data, though its metrics exist: {measured}",
                expression.origin
            )),
            Err(e) => problems.push(format!("{}: {e}", expression.origin)),
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} expressions failed:\n{}\nnode log tail:\n{}",
        problems.len(),
        expressions.len(),
        problems.join("\n"),
        node.logs()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!(
        "{} expressions ran; {with_data} had data (the others read metrics this run never recorded)",
        expressions.len()
    );
}
