mod kafka;

use super::*;
use clap::Parser;
use colo_passivation::PassivationStrategy;
use std::io::Write;

const MINIMAL: &str = r#"
[node]
listen = "127.0.0.1:7001"
admin_listen = "127.0.0.1:9001"
[coordinator]
address = "127.0.0.1:7001"
"#;

const FULL: &str = r#"
[node]
listen = "0.0.0.0:7002"
advertised = "colo-2:7002"
admin_listen = "0.0.0.0:9002"
entity_types = ["counter"]
proxy = true

[coordinator]
address = "colo-1:7001"
heartbeat_interval = "500ms"
fence_timeout = "3s"
region_timeout = "5s"

[coordinator.least_shard]
rebalance_absolute_limit = 20
rebalance_relative_limit = 0.2
rebalance_threshold = 2
max_simultaneous_rebalance = 4

[sharding]
number_of_shards = 60
retry_interval = "1s"
buffer_size = 500
handoff_timeout = "30s"
rebalance_interval = "2s"
shard_start_timeout = "3s"
min_members = 2
shard_mailbox_capacity = 64
ask_timeout = "750ms"

[sharding.passivation]
strategy = "lru"
idle_timeout = "90s"
idle_interval = "10s"
active_entity_limit = 2000

[log]
format = "json"
level = "info,colo=debug"
"#;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sets(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn load(text: &str, vars: &[(&str, &str)], set: &[&str]) -> Result<NodeConfig, ConfigError> {
    let f = file(text);
    NodeConfig::load(Some(f.path()), env(vars), &sets(set))
}

fn field_error(text: &str, vars: &[(&str, &str)], set: &[&str]) -> (String, String) {
    let err = load(text, vars, set).unwrap_err();
    let shown = err.to_string();
    (err.field().unwrap_or("<none>").to_string(), shown)
}

#[test]
fn a_full_file_parses() {
    let c = load(FULL, &[], &[]).unwrap();
    assert_eq!(c.advertised(), "colo-2:7002");
    assert_eq!(c.region_id().as_str(), "colo-2:7002");
    assert!(!c.hosts_coordinator());
    assert!(c.node.proxy);
    assert_eq!(c.node.entity_types, ["counter"]);
    assert_eq!(c.node.admin_listen.port(), 9002);
    assert_eq!(c.coordinator.heartbeat_interval, Duration::from_millis(500));
    assert_eq!(c.coordinator.fence_timeout, Duration::from_secs(3));
    assert_eq!(c.coordinator.region_timeout, Duration::from_secs(5));
    let least = c.least_shard_settings();
    assert_eq!(least.rebalance_absolute_limit, 20);
    assert_eq!(least.rebalance_relative_limit, 0.2);
    assert_eq!(least.rebalance_threshold, 2);
    assert_eq!(least.max_simultaneous_rebalance, 4);
    let s = c.sharding_settings();
    assert_eq!(s.number_of_shards, 60);
    assert_eq!(s.retry_interval, Duration::from_secs(1));
    assert_eq!(s.buffer_size, 500);
    assert_eq!(s.handoff_timeout, Duration::from_secs(30));
    assert_eq!(s.rebalance_interval, Duration::from_secs(2));
    assert_eq!(s.shard_start_timeout, Duration::from_secs(3));
    assert_eq!(s.min_members, 2);
    assert_eq!(s.shard_mailbox_capacity, 64);
    assert_eq!(c.ask_timeout(), Duration::from_millis(750));
    assert_eq!(s.passivation.active_entity_limit, Some(2000));
    assert_eq!(s.passivation.idle_timeout, Some(Duration::from_secs(90)));
    assert_eq!(s.passivation.idle_interval, Some(Duration::from_secs(10)));
    assert_eq!(
        s.passivation.replacement,
        colo_passivation::ReplacementSettings::preset("lru")
    );
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(c.log.level, "info,colo=debug");
}

#[test]
fn the_example_file_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../colo.example.toml");
    let c = NodeConfig::load(Some(&path), env(&[]), &[]).unwrap();
    assert!(c.hosts_coordinator());
    assert_eq!(c.sharding_settings(), ShardingSettings::default());
}

#[test]
fn the_state_section_sets_the_engine_and_the_write_behind() {
    let c = load(MINIMAL, &[], &[]).unwrap();
    assert_eq!(c.state.engine, colo_state::Engine::Fjall);
    assert_eq!(c.state, crate::StateSettings::default());
    let c = load(
        MINIMAL,
        &[("COLO_STATE__ENGINE", "sled")],
        &["state.flush_interval=1s", "state.max_dirty=5"],
    )
    .unwrap();
    assert_eq!(c.state.engine, colo_state::Engine::Sled);
    assert_eq!(c.state.flush_interval, Duration::from_secs(1));
    assert_eq!(c.state.max_dirty, 5);
    for (set, field) in [
        ("state.flush_interval=0s", "state.flush_interval"),
        ("state.max_dirty=0", "state.max_dirty"),
        ("state.engine=\"rocks\"", "state.engine"),
    ] {
        let e = load(MINIMAL, &[], &[set]).unwrap_err().to_string();
        assert!(e.contains(field), "{set}: {e}");
    }
}

#[test]
fn remember_entities_is_off_by_default_and_takes_its_recovery_rate() {
    let c = load(MINIMAL, &[], &[]).unwrap();
    assert_eq!(c.sharding_settings().remember_entities, None);
    let c = load(
        MINIMAL,
        &[],
        &[
            "sharding.remember_entities=true",
            "sharding.entity_recovery_strategy=\"constant\"",
            "sharding.entity_recovery_frequency=\"50ms\"",
            "sharding.entity_recovery_number=3",
        ],
    )
    .unwrap();
    assert_eq!(
        c.sharding_settings().remember_entities,
        Some(crate::EntityRecovery::Constant {
            frequency: Duration::from_millis(50),
            number: 3
        })
    );
    let e = load(
        MINIMAL,
        &[],
        &[
            "sharding.remember_entities=true",
            "sharding.entity_recovery_strategy=\"constant\"",
            "sharding.entity_recovery_number=0",
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("entity_recovery"), "{e}");
}

#[test]
fn defaults_are_akkas() {
    let c = load(MINIMAL, &[], &[]).unwrap();
    assert_eq!(c.sharding_settings(), ShardingSettings::default());
    assert_eq!(
        c.sharding_settings().passivation,
        PassivationStrategy::idle(Duration::from_secs(120))
    );
    assert_eq!(c.least_shard_settings(), LeastShardSettings::default());
    assert_eq!(c.ask_timeout(), Duration::from_secs(5));
    assert_eq!(c.advertised(), "127.0.0.1:7001");
    assert!(c.hosts_coordinator());
    assert!(!c.node.proxy);
    assert!(c.node.entity_types.is_empty(), "every registered type");
    assert_eq!(c.coordinator.heartbeat_interval, Duration::from_secs(1));
    assert_eq!(c.coordinator.fence_timeout, Duration::from_secs(12));
    assert_eq!(c.coordinator.region_timeout, Duration::from_secs(17));
    assert_eq!(c.log, LogSection::default());
}

#[test]
fn env_overrides_the_file_and_set_overrides_env() {
    let vars = [
        ("COLO_SHARDING__NUMBER_OF_SHARDS", "50"),
        ("COLO_NODE__LISTEN", "127.0.0.1:7005"),
        ("COLO_SHARDING__PASSIVATION__STRATEGY", "lru"),
        ("COLO_NODE__ENTITY_TYPES", "[\"counter\"]"),
        (
            "COLO_COORDINATOR__LEAST_SHARD__REBALANCE_ABSOLUTE_LIMIT",
            "7",
        ),
        ("COLO_UNRELATED", "ignored: no double underscore"),
    ];
    let c = load(MINIMAL, &vars, &[]).unwrap();
    assert_eq!(c.sharding.number_of_shards, 50);
    assert_eq!(c.node.listen.port(), 7005);
    assert!(!c.hosts_coordinator());
    assert_eq!(
        c.sharding_settings().passivation.active_entity_limit,
        Some(100_000)
    );
    assert_eq!(c.least_shard_settings().rebalance_absolute_limit, 7);

    let c = load(
        MINIMAL,
        &vars,
        &[
            "sharding.number_of_shards=70",
            "sharding.number_of_shards=80",
            "sharding.handoff_timeout=5s",
            "log.level=warn,colo=debug",
        ],
    )
    .unwrap();
    assert_eq!(c.sharding.number_of_shards, 80, "the last --set wins");
    assert_eq!(c.sharding.handoff_timeout, Duration::from_secs(5));
    assert_eq!(c.log.level, "warn,colo=debug");
}

#[test]
fn no_file_needs_every_required_field_from_overrides() {
    let err = NodeConfig::load(None, env(&[]), &[]).unwrap_err();
    assert_eq!(err.field(), Some("node"));
    assert_eq!(err.to_string(), "invalid config: node: is required");
    let err = NodeConfig::load(None, env(&[]), &sets(&["node.listen=127.0.0.1:1"])).unwrap_err();
    assert_eq!(err.field(), Some("node.admin_listen"));
    let c = NodeConfig::load(
        None,
        env(&[("COLO_COORDINATOR__ADDRESS", "127.0.0.1:1")]),
        &sets(&["node.listen=127.0.0.1:1", "node.admin_listen=127.0.0.1:2"]),
    )
    .unwrap();
    assert!(c.hosts_coordinator());
}

#[test]
fn run_args_shorthands_become_sets() {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }
    let cli = Cli::try_parse_from([
        "colo",
        "--listen",
        "127.0.0.1:7101",
        "--admin-listen",
        "127.0.0.1:9101",
        "--coordinator",
        "127.0.0.1:7101",
        "--set",
        "sharding.number_of_shards=5",
        "--set",
        "node.proxy=true",
    ])
    .unwrap();
    let c = cli.run.load_from(env(&[])).unwrap();
    assert!(c.hosts_coordinator());
    assert!(c.node.proxy);
    assert_eq!(c.sharding.number_of_shards, 5);
    assert_eq!(c.node.admin_listen.port(), 9101);

    let bad = RunArgs {
        listen: Some("nowhere".to_string()),
        ..cli.run
    };
    let err = bad.load_from(env(&[])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid config: node.listen: invalid socket address syntax (from --listen)"
    );
}

#[test]
fn a_wrong_type_names_the_field_and_its_origin() {
    let (field, shown) = field_error(MINIMAL, &[], &["sharding.number_of_shards=many"]);
    assert_eq!(field, "sharding.number_of_shards");
    assert!(
        shown.contains("from --set sharding.number_of_shards=many"),
        "{shown}"
    );
    let (field, shown) = field_error(MINIMAL, &[("COLO_NODE__PROXY", "maybe")], &[]);
    assert_eq!(field, "node.proxy");
    assert!(shown.contains("from COLO_NODE__PROXY"), "{shown}");
    let (field, shown) = field_error(&MINIMAL.replace("127.0.0.1:9001", "nowhere"), &[], &[]);
    assert_eq!(field, "node.admin_listen");
    assert!(
        shown.starts_with("invalid config: node.admin_listen: invalid socket address syntax (in "),
        "{shown}"
    );
    let (field, _) = field_error(MINIMAL, &[], &["coordinator.region_timeout=soon"]);
    assert_eq!(field, "coordinator.region_timeout");
}

#[test]
fn unknown_fields_are_refused_by_name() {
    let (field, shown) = field_error(
        &format!("{MINIMAL}\n[sharding]\nnumber_of_shard = 5\n"),
        &[],
        &[],
    );
    assert_eq!(field, "sharding.number_of_shard");
    assert!(shown.contains("unknown field `number_of_shard`"), "{shown}");
    let (field, shown) = field_error(MINIMAL, &[("COLO_SHARDING__NUMBER_OF_SHARD", "5")], &[]);
    assert_eq!(field, "sharding.number_of_shard");
    assert!(
        shown.contains("from COLO_SHARDING__NUMBER_OF_SHARD"),
        "{shown}"
    );
    let (field, shown) = field_error(MINIMAL, &[("COLO_SHARDNG__BUFFER_SIZE", "5")], &[]);
    assert_eq!(field, "shardng");
    assert!(shown.contains("from COLO_SHARDNG__BUFFER_SIZE"), "{shown}");
    let (field, _) = field_error(MINIMAL, &[], &["coordinator.least_shard.threshold=1"]);
    assert_eq!(field, "coordinator.least_shard.threshold");
}

#[test]
fn region_timeout_must_exceed_the_fence_by_a_margin() {
    let (field, shown) = field_error(
        MINIMAL,
        &[],
        &[
            "coordinator.heartbeat_interval=1s",
            "coordinator.fence_timeout=5s",
            "coordinator.region_timeout=6s",
        ],
    );
    assert_eq!(field, "coordinator.region_timeout");
    assert!(
        shown.contains(
            "must exceed fence_timeout by at least two heartbeat intervals (at least 7s)"
        ),
        "{shown}"
    );
    let (field, shown) = field_error(
        MINIMAL,
        &[],
        &[
            "coordinator.heartbeat_interval=2s",
            "coordinator.fence_timeout=4s",
        ],
    );
    assert_eq!(field, "coordinator.fence_timeout");
    assert!(
        shown.contains("at least three heartbeat intervals (6s)"),
        "{shown}"
    );
}

#[test]
fn zero_shards_are_refused() {
    let (field, shown) = field_error(MINIMAL, &[("COLO_SHARDING__NUMBER_OF_SHARDS", "0")], &[]);
    assert_eq!(field, "sharding.number_of_shards");
    assert_eq!(
        shown,
        "invalid config: sharding.number_of_shards: must be at least 1 (from COLO_SHARDING__NUMBER_OF_SHARDS)"
    );
    let (field, _) = field_error(MINIMAL, &[], &["sharding.buffer_size=0"]);
    assert_eq!(field, "sharding.buffer_size");
    let (field, _) = field_error(MINIMAL, &[], &["sharding.passivation.idle_timeout=0s"]);
    assert_eq!(field, "sharding.passivation.idle_timeout");
    let (field, _) = field_error(
        MINIMAL,
        &[],
        &["coordinator.least_shard.rebalance_relative_limit=2"],
    );
    assert_eq!(field, "coordinator.least_shard.rebalance_relative_limit");
}

#[test]
fn an_entity_type_named_twice_is_refused() {
    // Whether a name is an entity type of the program is checked by the
    // program, which knows what it registered (see program.rs).
    let (field, shown) = field_error(
        MINIMAL,
        &[],
        &["node.entity_types=[\"counter\", \"counter\"]"],
    );
    assert_eq!(field, "node.entity_types");
    assert!(shown.contains("names `counter` twice"), "{shown}");
}

#[test]
fn roles_are_read_from_the_node_and_the_roles_table_by_env_and_set_too() {
    let file = format!("{MINIMAL}[roles]\nuser = \"backend\"\n");
    let c = load(
        &file,
        &[("COLO_ROLES__COUNTER", "front")],
        &[r#"node.roles=["backend", "front"]"#, "roles.ledger=backend"],
    )
    .unwrap();
    assert_eq!(c.node.roles, ["backend", "front"]);
    assert_eq!(
        c.roles,
        BTreeMap::from([
            ("counter".to_string(), "front".to_string()),
            ("ledger".to_string(), "backend".to_string()),
            ("user".to_string(), "backend".to_string()),
        ])
    );
    assert!(load(MINIMAL, &[], &[]).unwrap().node.roles.is_empty());
}

#[test]
fn a_role_that_is_no_name_is_refused_with_its_field() {
    let (field, shown) = field_error(MINIMAL, &[], &[r#"node.roles=["back end"]"#]);
    assert_eq!(field, "node.roles");
    assert!(
        shown.contains(r#""back end" is not a role: use 1 to 128 characters from [A-Za-z0-9_.-]"#),
        "{shown}"
    );
    let (field, _) = field_error(MINIMAL, &[], &[r#"roles.user="""#]);
    assert_eq!(field, "roles.user");
}

#[test]
fn idempotency_keys_are_kept_as_api_says_and_refused_at_zero() {
    let c = load(
        MINIMAL,
        &[],
        &[
            r#"api.idempotency_retention="1h""#,
            "api.idempotency_keys=10",
        ],
    )
    .unwrap();
    let s = c.sharding_settings();
    assert_eq!(s.idempotency_retention, Duration::from_secs(3600));
    assert_eq!(s.idempotency_keys, 10);
    let defaults = load(MINIMAL, &[], &[]).unwrap().sharding_settings();
    assert_eq!(defaults.idempotency_retention, Duration::from_secs(86_400));
    assert_eq!(defaults.idempotency_keys, 100);
    let (field, _) = field_error(MINIMAL, &[], &[r#"api.idempotency_retention="0s""#]);
    assert_eq!(field, "api.idempotency_retention");
    let (field, _) = field_error(MINIMAL, &[], &["api.idempotency_keys=0"]);
    assert_eq!(field, "api.idempotency_keys");
}

#[test]
fn an_unknown_passivation_strategy_is_refused() {
    let (field, shown) = field_error(
        MINIMAL,
        &[("COLO_SHARDING__PASSIVATION__STRATEGY", "lur")],
        &[],
    );
    assert_eq!(field, "sharding.passivation.strategy");
    assert!(
        shown.contains("unknown passivation strategy `lur`"),
        "{shown}"
    );
    let (field, _) = field_error(
        MINIMAL,
        &[],
        &["sharding.passivation.active_entity_limit=10"],
    );
    assert_eq!(field, "sharding.passivation.active_entity_limit");
}

#[test]
fn addresses_and_log_level_are_checked() {
    let unreachable = MINIMAL.replace("listen = \"127.0.0.1:7001\"", "listen = \"0.0.0.0:7001\"");
    let (field, _) = field_error(&unreachable, &[], &[]);
    assert_eq!(field, "node.advertised");
    let c = load(&unreachable, &[], &["node.advertised=127.0.0.1:7001"]).unwrap();
    assert!(c.hosts_coordinator());
    let (field, _) = field_error(MINIMAL, &[], &["coordinator.address=colo-1"]);
    assert_eq!(field, "coordinator.address");
    let (field, _) = field_error(MINIMAL, &[], &["log.level=colo=loud"]);
    assert_eq!(field, "log.level");
    let (field, _) = field_error(MINIMAL, &[], &["log.format=yaml"]);
    assert_eq!(field, "log.format");
}

#[test]
fn file_problems_name_the_file() {
    let missing = Path::new("/nonexistent/colo.toml");
    let err = NodeConfig::load(Some(missing), env(&[]), &[]).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(
        err.to_string()
            .starts_with("invalid config: cannot read /nonexistent/colo.toml: "),
        "{err}"
    );
    let f = file("[node\nlisten = 1");
    let err = NodeConfig::load(Some(f.path()), env(&[]), &[]).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Syntax {
                origin: Origin::File(_),
                ..
            }
        ),
        "{err}"
    );
    let err = load(MINIMAL, &[], &["sharding"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("--set sharding: expected KEY=VALUE"),
        "{err}"
    );
}

#[test]
fn the_effective_config_round_trips() {
    let c = load(FULL, &[], &[]).unwrap();
    let text = toml::to_string(&c).unwrap();
    assert_eq!(load(&text, &[], &[]).unwrap(), c);
}
