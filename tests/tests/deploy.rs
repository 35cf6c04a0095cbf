//! The deployment files (docker-compose.yml, Dockerfile, deploy/): what a
//! user who runs `docker compose up` relies on, checked without a Docker
//! engine (none runs here, and no image can be pulled): the compose file
//! as docker-compose resolves it, its ports and scrape targets against the
//! Dockerfile and Prometheus's config, the rules and config through
//! promtool, every dashboard panel's unit, legend and description, and a
//! node started with exactly a compose service's environment.

use colo_tests::broker::Broker;
use colo_tests::deploy::{self, colo_services, port};
use colo_tests::process::{colo_binary, free_port};
use colo_tests::{http, user_nodes, wait};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn the_compose_file_runs_kafka_three_colo_nodes_a_producer_prometheus_and_grafana() {
    let compose = deploy::compose();
    let services: BTreeSet<&str> = compose["services"]
        .as_object()
        .expect("services")
        .keys()
        .map(String::as_str)
        .collect();
    for wanted in [
        "kafka",
        "colo-1",
        "colo-2",
        "colo-3",
        "produce",
        "prometheus",
        "grafana",
    ] {
        assert!(services.contains(wanted), "no {wanted} in {services:?}");
    }
    assert_eq!(colo_services(&compose).len(), 3);
    // Images are pinned: a compose file that pulls "latest" changes under
    // its users.
    for (name, service) in compose["services"].as_object().expect("services") {
        let image = service["image"].as_str().unwrap_or("");
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "{name}'s image {image:?} is not pinned"
        );
    }
    // The Kafka users start with is the one the tests run.
    let pom = std::fs::read_to_string(deploy::repo().join("tests/kafka/pom.xml")).expect("pom");
    let tested = pom
        .split("<kafka.version>")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .expect("the pom names kafka.version");
    assert_eq!(
        compose["services"]["kafka"]["image"].as_str(),
        Some(format!("apache/kafka:{tested}").as_str())
    );
    let ignored = std::fs::read_to_string(deploy::repo().join(".dockerignore")).expect("ignore");
    assert!(
        ignored.lines().any(|l| l.trim() == "target/"),
        "target/ is in the build context"
    );
}

#[test]
fn every_colo_node_is_scraped_on_its_admin_port_and_advertises_its_own_name() {
    let compose = deploy::compose();
    let expected: BTreeSet<String> = colo_services(&compose)
        .iter()
        .map(|(name, env)| {
            assert_eq!(
                compose["services"][name]["hostname"], *name,
                "{name}'s hostname"
            );
            assert_eq!(
                env["COLO_NODE__ADVERTISED"],
                format!("{name}:{}", port(&env["COLO_NODE__LISTEN"])),
                "{name} advertises another name or port than it listens on"
            );
            format!("{name}:{}", port(&env["COLO_NODE__ADMIN_LISTEN"]))
        })
        .collect();
    let config = deploy::prometheus_config();
    let job = config["scrape_configs"]
        .as_array()
        .expect("scrape configs")
        .iter()
        .find(|j| j["job_name"] == "colo")
        .expect("a colo job");
    let scraped: BTreeSet<String> = job["static_configs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect();
    assert_eq!(scraped, expected);
    assert_eq!(job["metrics_path"], "/metrics");
}

#[test]
fn the_dockerfile_exposes_the_ports_the_nodes_listen_on_and_checks_readiness() {
    let dockerfile = deploy::dockerfile();
    let exposed: BTreeSet<u16> = dockerfile.exposed.iter().copied().collect();
    let grpc = port(&dockerfile.env["COLO_NODE__LISTEN"]);
    let admin = port(&dockerfile.env["COLO_NODE__ADMIN_LISTEN"]);
    assert_eq!(exposed, BTreeSet::from([grpc, admin]));
    assert!(
        dockerfile
            .healthcheck
            .contains(&format!(":{admin}/health/ready")),
        "{}",
        dockerfile.healthcheck
    );
    let compose = deploy::compose();
    for (name, env) in colo_services(&compose) {
        assert_eq!(port(&env["COLO_NODE__LISTEN"]), grpc, "{name}");
        assert_eq!(port(&env["COLO_NODE__ADMIN_LISTEN"]), admin, "{name}");
        for published in compose["services"][&name]["ports"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let target = published["target"].as_u64().expect("target port");
            assert!(
                exposed.contains(&u16::try_from(target).unwrap_or(0)),
                "{name} publishes {target}, not exposed"
            );
        }
    }
}

#[test]
fn prometheus_and_grafana_read_the_repositorys_files() {
    let compose = deploy::compose();
    let mounts = |service: &str| -> BTreeMap<String, String> {
        compose["services"][service]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| match v.as_str() {
                // Bind mounts in short form: source:target[:mode].
                Some(short) => {
                    let mut parts = short.split(':');
                    let source = parts.next()?;
                    Some((parts.next()?.to_string(), source.to_string()))
                }
                None => Some((
                    v["target"].as_str()?.to_string(),
                    v["source"].as_str()?.to_string(),
                )),
            })
            .collect()
    };
    let repo = deploy::repo();
    let prometheus = mounts("prometheus");
    assert_eq!(
        prometheus["/etc/prometheus"],
        repo.join("deploy/prometheus").display().to_string()
    );
    let config = deploy::prometheus_config();
    for rules in config["rule_files"].as_array().expect("rule files") {
        let rules = rules.as_str().expect("a path");
        assert!(
            repo.join("deploy/prometheus").join(rules).exists(),
            "{rules}"
        );
    }
    let grafana = mounts("grafana");
    let provider: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(repo.join("deploy/grafana/provisioning/dashboards/colo.yml"))
            .expect("provider"),
    )
    .expect("provider YAML");
    let dashboards_at = provider["providers"][0]["options"]["path"]
        .as_str()
        .expect("provider path");
    assert_eq!(
        grafana[dashboards_at],
        repo.join("deploy/grafana/dashboards").display().to_string()
    );
    let datasources: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(
            repo.join("deploy/grafana/provisioning/datasources/prometheus.yml"),
        )
        .expect("datasource"),
    )
    .expect("datasource YAML");
    let uid = datasources["datasources"][0]["uid"].clone();
    assert_eq!(
        datasources["datasources"][0]["url"],
        "http://prometheus:9090"
    );
    for panel in deploy::panels(&deploy::dashboard()) {
        assert_eq!(panel["datasource"]["uid"], uid, "{}", panel["title"]);
    }
}

#[test]
fn promtool_passes_the_alert_rules_and_the_scrape_config() {
    let dir = deploy::repo().join("deploy/prometheus");
    for (what, file) in [("rules", "alerts.yml"), ("config", "prometheus.yml")] {
        let out = Command::new("promtool")
            .args(["check", what])
            .arg(dir.join(file))
            .output()
            .expect("run promtool (./scripts/test.sh installs Debian's prometheus)");
        assert!(
            out.status.success(),
            "promtool check {what} {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rules = deploy::alert_rules();
    let names: BTreeSet<&str> = rules["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    for wanted in [
        "ColoCoordinatorUnreachable",
        "ColoConsumerLagGrowing",
        "ColoDeadLetters",
        "ColoHandOffFailed",
    ] {
        assert!(names.contains(wanted), "no {wanted} in {names:?}");
    }
}

#[test]
fn every_dashboard_panel_has_a_unit_a_legend_and_a_description() {
    let panels = deploy::panels(&deploy::dashboard());
    assert!(panels.len() >= 12, "{} panels", panels.len());
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or("");
        assert!(!title.is_empty(), "a panel without a title");
        assert!(
            panel["description"].as_str().is_some_and(|d| d.len() > 10),
            "{title}: no description"
        );
        assert!(
            panel["fieldConfig"]["defaults"]["unit"]
                .as_str()
                .is_some_and(|u| !u.is_empty()),
            "{title}: no unit"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert!(
                target["legendFormat"]
                    .as_str()
                    .is_some_and(|l| !l.is_empty()),
                "{title}: a query without a legend"
            );
        }
    }
}

/// A compose service's environment, with its addresses made this machine's
/// (the names stay as they are: the node refuses a variable that names no
/// field).
fn on_loopback(
    env: &BTreeMap<String, String>,
    bootstrap: &str,
    topic: &str,
    cluster: &str,
    data: &std::path::Path,
) -> (BTreeMap<String, String>, String, String) {
    let grpc = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let mut out = env.clone();
    for (name, value) in [
        ("COLO_NODE__LISTEN", grpc.clone()),
        ("COLO_NODE__ADVERTISED", grpc.clone()),
        ("COLO_NODE__ADMIN_LISTEN", admin.clone()),
        ("COLO_NODE__DATA_DIR", data.display().to_string()),
        ("COLO_KAFKA__BOOTSTRAP_SERVERS", bootstrap.to_string()),
        ("COLO_KAFKA__CLUSTER", cluster.to_string()),
        ("COLO_KAFKA__TOPICS__USER", format!(r#"["{topic}"]"#)),
    ] {
        assert!(out.contains_key(name), "the compose service sets no {name}");
        out.insert(name.to_string(), value);
    }
    (out, grpc, admin)
}

/// `colo run` with exactly `env` (and no config file): what the image runs
/// with. Killed when dropped.
struct EnvNode {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl EnvNode {
    fn start(env: &BTreeMap<String, String>, dir: &std::path::Path) -> Self {
        let log = dir.join("node.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(colo_binary())
            .args(["run", "--exit-with-parent"])
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start colo run");
        Self { child, log }
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `/health/ready` on `admin`; panics with the log if it
    /// never answers 200.
    async fn await_ready(&self, admin: &str) {
        let ready = wait::held_within(Duration::from_secs(60), || async {
            matches!(http::get(admin, "/health/ready").await, Ok((200, _)))
        })
        .await;
        assert!(ready, "the node never became ready:\n{}", self.logs());
    }
}

impl Drop for EnvNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_node_with_exactly_a_compose_services_environment_becomes_ready_and_handles_the_producers_records(
) {
    let compose = deploy::compose();
    let env = colo_services(&compose)
        .remove("colo-1")
        .expect("a colo-1 service");
    let broker = Broker::start();
    let (topic, cluster) = user_nodes::unique("compose-env");
    let data = tempfile::tempdir().expect("data dir");
    let (env, _grpc, admin) = on_loopback(&env, broker.bootstrap(), &topic, &cluster, data.path());
    // Only the service's variables (and no config file): what the image
    // runs with.
    let node = EnvNode::start(&env, data.path());
    node.await_ready(&admin).await;
    let logs = || node.logs();

    // The producer service's command, its broker and topic this test's and
    // two seconds instead of an hour.
    let command: Vec<String> = compose["services"]["produce"]["command"]
        .as_array()
        .expect("the producer's command")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let mut args = Vec::new();
    let mut words = command.iter();
    while let Some(word) = words.next() {
        args.push(word.clone());
        let value = match word.as_str() {
            "--bootstrap-servers" | "--topic" | "--duration" => words.next(),
            _ => continue,
        };
        assert!(value.is_some(), "{word} without a value");
        args.push(match word.as_str() {
            "--bootstrap-servers" => broker.bootstrap().to_string(),
            "--topic" => topic.clone(),
            _ => "2s".to_string(),
        });
    }
    assert_eq!(args.first().map(String::as_str), Some("produce"));
    let produced = Command::new(colo_binary())
        .args(&args)
        .output()
        .expect("run colo produce");
    assert!(
        produced.status.success(),
        "colo {args:?}: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let handled = wait::held_within(Duration::from_secs(60), || async {
        let Ok((_, body)) = http::get(&admin, "/metrics").await else {
            return false;
        };
        body.lines()
            .filter(|l| {
                l.starts_with("colo_kafka_records_total{") && l.contains("outcome=\"handled\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
            > 0.0
    })
    .await;
    assert!(handled, "no record handled:\n{}", logs());
}

/// `docker-compose.secured.yml` over the compose file: every colo node has
/// `[tls]` with the certificate of its own host (the host of its
/// advertised address) and the tokens file, all from the certificates
/// directory mounted read-only; a node with exactly that environment (its
/// files made by `scripts/certs.sh`) becomes ready and answers a client
/// with a token, and nothing else.
#[tokio::test]
async fn the_secured_compose_variant_runs_each_node_with_its_own_certificate() {
    let compose = deploy::compose_files(&["docker-compose.yml", "docker-compose.secured.yml"]);
    let services = colo_services(&compose);
    assert_eq!(services.len(), 3);
    for (name, env) in &services {
        let host = env["COLO_NODE__ADVERTISED"]
            .rsplit_once(':')
            .expect("host:port")
            .0;
        let dir = "/etc/colo/certs";
        assert_eq!(env["COLO_TLS__CA"], format!("{dir}/ca.pem"), "{name}");
        assert_eq!(env["COLO_TLS__CERT"], format!("{dir}/{host}.pem"), "{name}");
        assert_eq!(env["COLO_TLS__KEY"], format!("{dir}/{host}.key"), "{name}");
        assert_eq!(
            env["COLO_API__TOKENS_FILE"],
            format!("{dir}/tokens"),
            "{name}"
        );
        let mounts = compose["services"][name]["volumes"]
            .as_array()
            .expect("volumes");
        // Short form, as Debian's docker-compose resolves it:
        // "SOURCE:TARGET:ro".
        assert!(
            mounts
                .iter()
                .filter_map(|m| m.as_str())
                .any(|m| m.ends_with(&format!(":{dir}:ro"))),
            "{name} mounts no read-only {dir}: {mounts:?}"
        );
    }

    // colo-1's environment, on this machine: its files in a directory of
    // certificates for the host it advertises here.
    let broker = Broker::start();
    let (topic, cluster) = user_nodes::unique("compose-tls");
    let data = tempfile::tempdir().expect("data dir");
    let (mut env, grpc, admin) = on_loopback(
        &services["colo-1"],
        broker.bootstrap(),
        &topic,
        &cluster,
        data.path(),
    );
    let certs = colo_tests::tls::Certs::make(&["127.0.0.1"]);
    let token = "compose-token-0f1e2d3c4b5a6978";
    std::fs::write(certs.path("tokens"), format!("ops read-write {token}\n")).expect("tokens");
    for (name, file) in [
        ("COLO_TLS__CA", certs.ca()),
        ("COLO_TLS__CERT", certs.cert("127.0.0.1")),
        ("COLO_TLS__KEY", certs.key("127.0.0.1")),
        ("COLO_API__TOKENS_FILE", certs.path("tokens")),
    ] {
        env.insert(name.to_string(), file.display().to_string());
    }
    let node = EnvNode::start(&env, data.path());
    node.await_ready(&admin).await;
    let channel = certs
        .channel(&grpc, None)
        .await
        .unwrap_or_else(|e| panic!("TLS connection: {e:?}\n{}", node.logs()));
    let ask = || {
        colo_tests::client::ask_request_to(
            "user",
            "user-1",
            r#""UserStats""#,
            Duration::from_secs(10),
        )
    };
    let with_token = colo_tests::tls::with_token(channel.clone(), token)
        .ask(ask())
        .await;
    assert!(with_token.is_ok(), "{with_token:?}\n{}", node.logs());
    let without = colo_proto::v1::sharding_client::ShardingClient::new(channel)
        .ask(ask())
        .await;
    assert_eq!(
        without.expect_err("refused without a token").code(),
        tonic::Code::Unauthenticated
    );
}
