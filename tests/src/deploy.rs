//! The repository's deployment files read as a deployment sees them: the
//! compose file as `docker-compose config` resolves it, the Dockerfile's
//! ports and environment, Prometheus's scrape config and alert rules,
//! and the Grafana dashboard with every PromQL expression in it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's top directory.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository directory")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> serde_json::Value {
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The compose file as `docker-compose config` resolves it (anchors and
/// merges applied, ports in long form).
///
/// # Panics
/// docker-compose is not installed or refuses the file.
pub fn compose() -> serde_json::Value {
    compose_files(&["docker-compose.yml"])
}

/// Compose files laid over each other (`docker-compose -f A -f B config`),
/// as docker-compose resolves them.
///
/// # Panics
/// As [`compose`].
pub fn compose_files(files: &[&str]) -> serde_json::Value {
    let mut command = Command::new("docker-compose");
    for file in files {
        command.arg("-f").arg(repo().join(file));
    }
    let out = command
        .arg("config")
        .output()
        .expect("run docker-compose (./scripts/test.sh installs Debian's docker-compose)");
    assert!(
        out.status.success(),
        "docker-compose config refused {files:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_norway::from_slice(&out.stdout).expect("docker-compose config's output")
}

/// The compose services that run a colo node (they have an admin
/// listener), by name, with their environment.
pub fn colo_services(compose: &serde_json::Value) -> BTreeMap<String, BTreeMap<String, String>> {
    let services = compose["services"].as_object().expect("services");
    services
        .iter()
        .filter_map(|(name, service)| {
            let env: BTreeMap<String, String> = service["environment"]
                .as_object()?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_string)))
                .collect();
            env.contains_key("COLO_NODE__ADMIN_LISTEN")
                .then(|| (name.clone(), env))
        })
        .collect()
}

/// The port of a `host:port` address.
pub fn port(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {address:?}"))
}

/// The Dockerfile's runtime stage: its `EXPOSE`d ports, its `ENV`
/// variables and its `HEALTHCHECK` command.
#[derive(Debug)]
pub struct Dockerfile {
    pub exposed: Vec<u16>,
    pub env: BTreeMap<String, String>,
    pub healthcheck: String,
}

/// Reads the Dockerfile's last stage (continuation lines joined).
pub fn dockerfile() -> Dockerfile {
    let text = read("Dockerfile").replace("\\\n", " ");
    let last_stage = text
        .rsplit("\nFROM ")
        .next()
        .expect("a FROM line")
        .to_string();
    let mut file = Dockerfile {
        exposed: Vec::new(),
        env: BTreeMap::new(),
        healthcheck: String::new(),
    };
    for line in last_stage.lines().map(str::trim) {
        if let Some(ports) = line.strip_prefix("EXPOSE ") {
            file.exposed.extend(
                ports
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u16>().ok()),
            );
        } else if let Some(vars) = line.strip_prefix("ENV ") {
            for pair in vars.split_whitespace() {
                if let Some((k, v)) = pair.split_once('=') {
                    file.env.insert(k.to_string(), v.to_string());
                }
            }
        } else if let Some(check) = line.strip_prefix("HEALTHCHECK ") {
            file.healthcheck = check.to_string();
        }
    }
    file
}

/// `deploy/prometheus/prometheus.yml`.
pub fn prometheus_config() -> serde_json::Value {
    yaml("deploy/prometheus/prometheus.yml")
}

/// `deploy/prometheus/alerts.yml`.
pub fn alert_rules() -> serde_json::Value {
    yaml("deploy/prometheus/alerts.yml")
}

/// The provisioned Grafana dashboard.
pub fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read("deploy/grafana/dashboards/colo.json")).expect("dashboard JSON")
}

/// The dashboard's panels (rows' panels included), rows left out.
pub fn panels(dashboard: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut stack: Vec<serde_json::Value> =
        dashboard["panels"].as_array().cloned().unwrap_or_default();
    while let Some(panel) = stack.pop() {
        if let Some(inner) = panel["panels"].as_array() {
            stack.extend(inner.iter().cloned());
        }
        if panel["type"] != "row" {
            out.push(panel);
        }
    }
    out
}

/// Where an expression comes from, and the expression.
#[derive(Debug, Clone)]
pub struct Expression {
    pub origin: String,
    pub expr: String,
    /// An alert rule's (its condition holds only when something is wrong).
    pub alert: bool,
}

/// Every PromQL expression of every dashboard panel and alert rule, with
/// the dashboard's variables given the values of "All" and a rate interval
/// fit for a short test.
pub fn expressions() -> Vec<Expression> {
    let mut out = Vec::new();
    for panel in panels(&dashboard()) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            let expr = expr
                .replace("$__rate_interval", "30s")
                .replace("$__interval", "30s")
                .replace("$entity_type", ".*")
                .replace("$instance", ".*");
            out.push(Expression {
                origin: format!(
                    "panel {:?} target {}",
                    panel["title"].as_str().unwrap_or(""),
                    target["refId"].as_str().unwrap_or("")
                ),
                expr,
                alert: false,
            });
        }
    }
    for group in alert_rules()["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            out.push(Expression {
                origin: format!("alert {}", rule["alert"].as_str().unwrap_or("")),
                expr: rule["expr"].as_str().unwrap_or("").to_string(),
                alert: true,
            });
        }
    }
    out
}

/// The metric names an expression reads.
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut at = 0;
    while let Some(found) = expr[at..].find("colo_") {
        let start = at + found;
        // Not inside a longer name, nor a label's quoted value.
        let before_ok = start == 0
            || !(bytes[start - 1].is_ascii_alphanumeric()
                || bytes[start - 1] == b'_'
                || bytes[start - 1] == b'"');
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |n| start + n);
        if before_ok && !names.contains(&expr[start..end].to_string()) {
            names.push(expr[start..end].to_string());
        }
        at = end;
    }
    names
}

/// An alert rule's expression without its final comparison: what it
/// measures, which has data whenever its metrics do.
pub fn measured(expr: &str) -> String {
    for op in [" == ", " != ", " >= ", " <= ", " > ", " < "] {
        if let Some((left, right)) = expr.rsplit_once(op) {
            if right.trim().parse::<f64>().is_ok() {
                return left.trim().to_string();
            }
        }
    }
    expr.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_and_measures_are_read_from_expressions() {
        assert_eq!(
            metric_names("sum(rate(colo_a_total{x=\"colo_no\"}[1m])) / colo_b"),
            ["colo_a_total", "colo_b"]
        );
        assert_eq!(measured("min by (i) (colo_r) == 0"), "min by (i) (colo_r)");
        assert_eq!(measured("sum(colo_x) > 0"), "sum(colo_x)");
        assert_eq!(measured("sum(colo_x)"), "sum(colo_x)");
    }
}
