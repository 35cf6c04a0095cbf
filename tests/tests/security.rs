//! `colo run` with `[tls]` and `[api]`: nodes that reach each other over
//! mutual TLS only, a client API that asks for a certificate or a bearer
//! token, certificates and tokens rotated without a restart, and secrets
//! kept out of every log. Each test's nodes listen on loopback addresses
//! of their own (127.0.0.x), so that each node's certificate names a host
//! no other node has.

use colo_proto::v1 as pb;
use colo_tests::client::{ask_request, ids, shards_by_region_through as shards_by_region, READY};
use colo_tests::process::{colo_binary, NodeProcess, Program};
use colo_tests::tls::{with_token, Certs};
use colo_tests::wait;
use pb::sharding_client::ShardingClient;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::Code;

const OPS_TOKEN: &str = "ops-token-5e1f0c9a7b3d2e48";
const DASHBOARD_TOKEN: &str = "dashboard-token-9d8c7b6a5f4e3d21";

fn sets(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

/// A node on `host` with `host`'s certificate from `certs`, plus `more`.
fn tls_node(certs: &Certs, host: &str, coordinator: Option<&str>, more: &[&str]) -> NodeProcess {
    let mut all = certs.node_sets(host);
    all.extend(more.iter().map(|s| s.to_string()));
    NodeProcess::start_on(host, Program::Colo, coordinator, &sets(&all))
}

/// The counter's value after `message`, through a client with a
/// certificate.
async fn ask(
    client: &mut ShardingClient<Channel>,
    id: &str,
    message: &str,
) -> Result<i64, tonic::Status> {
    let reply = client.ask(ask_request(id, message)).await?.into_inner();
    let text =
        String::from_utf8(reply.reply.map(|p| p.data).unwrap_or_default()).unwrap_or_default();
    text.trim()
        .parse()
        .map_err(|_| tonic::Status::internal(format!("not a counter value: {text}")))
}

/// A three-node cluster over mutual TLS serves tells and asks across nodes,
/// and hands a leaving node's shards off to the others.
#[tokio::test]
async fn a_cluster_over_mutual_tls_serves_and_hands_shards_off() {
    let hosts = ["127.0.0.31", "127.0.0.32", "127.0.0.33"];
    let certs = Certs::make(&[hosts[0], hosts[1], hosts[2], "ops"]);
    let a = tls_node(&certs, hosts[0], None, &[]);
    let b = tls_node(&certs, hosts[1], Some(&a.grpc), &[]);
    let mut c = tls_node(&certs, hosts[2], Some(&a.grpc), &[]);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    let mut via_a = certs.client(&a.grpc, "ops").await;
    let ids = ids("tls", 60);
    for id in &ids {
        via_a
            .tell(pb::TellRequest {
                entity_type: "counter".into(),
                entity_id: id.clone(),
                payload: colo_tests::client::json(r#"{"Add":2}"#),
                idempotency_key: None,
            })
            .await
            .expect("tell over TLS");
    }
    let mut via_b = certs.client(&b.grpc, "ops").await;
    for id in &ids {
        assert_eq!(
            ask(&mut via_b, id, r#""Get""#).await.expect("ask"),
            2,
            "{id}"
        );
    }
    wait::until(
        "all three nodes host shards",
        Duration::from_secs(30),
        || async {
            shards_by_region(&mut via_a.clone())
                .await
                .is_some_and(|s| s.len() == 3 && s.values().all(|n| *n > 0))
        },
    )
    .await;

    // The third node leaves: its shards are handed off over TLS, and every
    // entity answers through the two that stay.
    c.terminate();
    c.exited(Duration::from_secs(30)).await;
    wait::until(
        "the two nodes host every shard",
        Duration::from_secs(30),
        || async {
            shards_by_region(&mut via_a.clone()).await.is_some_and(|s| {
                s.len() == 2 && !s.contains_key(hosts[2]) && s.values().sum::<usize>() > 0
            })
        },
    )
    .await;
    for id in &ids {
        ask(&mut via_b, id, r#""Get""#)
            .await
            .expect("ask after the hand-off");
    }
    assert!(
        c.logs().contains("stopped"),
        "the leaving node stopped gracefully:\n{}",
        c.logs()
    );
}

/// A node whose certificate comes from another CA, and a node without TLS,
/// cannot join a cluster over mutual TLS; a plain-text client is refused.
#[tokio::test]
async fn nodes_without_a_certificate_from_the_cluster_ca_cannot_join() {
    let certs = Certs::make(&["127.0.0.41", "ops"]);
    let strangers = Certs::make(&["127.0.0.42"]);
    let a = tls_node(&certs, "127.0.0.41", None, &[]);
    a.await_ready(READY).await;
    let stranger = tls_node(&strangers, "127.0.0.42", Some(&a.grpc), &[]);
    let plain = NodeProcess::start_on("127.0.0.43", Program::Colo, Some(&a.grpc), &[]);

    // Both try, and both are turned away at the handshake.
    wait::until(
        "both have tried to register",
        Duration::from_secs(30),
        || {
            std::future::ready(
                stranger.logs().contains("coordinator unreachable")
                    && plain.logs().contains("coordinator unreachable")
                    && a.logs().contains("TLS handshake refused"),
            )
        },
    )
    .await;
    let mut client = certs.client(&a.grpc, "ops").await;
    let regions = shards_by_region(&mut client).await.expect("stats");
    assert!(
        regions.keys().all(|r| r == &a.grpc),
        "only the cluster's own node is a member: {regions:?}"
    );
    assert!(!stranger.ready().await, "the stranger is not ready");
    assert!(!plain.ready().await, "the plain-text node is not ready");

    // A plain-text client gets no answer from the TLS listener.
    let plain_client = ShardingClient::connect(format!("http://{}", a.grpc)).await;
    let refused = match plain_client {
        Err(_) => true,
        Ok(mut client) => client.ask(ask_request("x", r#""Get""#)).await.is_err(),
    };
    assert!(refused, "a plain-text client was served");
    // Nor does a client that trusts another CA trust the node.
    assert!(
        strangers
            .channel(&a.grpc, Some("127.0.0.42"))
            .await
            .is_err(),
        "a client trusting another CA accepted the node's certificate"
    );
}

/// A certificate is good only for the host it names: a node configured
/// with another node's certificate refuses to start, and a peer that
/// claims to be a node its certificate does not name is refused by both
/// node services.
#[tokio::test]
async fn a_certificate_naming_another_host_is_refused() {
    let certs = Certs::make(&["127.0.0.51", "127.0.0.52"]);
    let a = tls_node(&certs, "127.0.0.51", None, &[]);
    a.await_ready(READY).await;

    // Started with 127.0.0.51's certificate on 127.0.0.53.
    let mut wrong = NodeProcess::start_on(
        "127.0.0.53",
        Program::Colo,
        Some(&a.grpc),
        &sets(&certs.node_sets("127.0.0.51")),
    );
    let status = wrong.exited(Duration::from_secs(30)).await;
    assert!(!status.success());
    assert!(
        wrong.logs().contains("does not name 127.0.0.53"),
        "the error names the host:\n{}",
        wrong.logs()
    );

    // 127.0.0.52's certificate, claiming to be a node on 127.0.0.54.
    let channel = certs
        .channel(&a.grpc, Some("127.0.0.52"))
        .await
        .expect("connect");
    let impostor = "127.0.0.54:7001";
    let register = pb::RegionMessage {
        entity_type: "counter".into(),
        message: Some(pb::region_message::Message::Register(pb::Register {
            region: impostor.into(),
            number_of_shards: 12,
            ..Default::default()
        })),
    };
    let mut coordinator = pb::coordinator_client::CoordinatorClient::new(channel.clone());
    let mut answers = coordinator
        .link(tokio_stream::iter(vec![register]))
        .await
        .expect("the stream opens")
        .into_inner();
    let refusal = answers
        .message()
        .await
        .expect_err("the register is refused");
    assert_eq!(refusal.code(), Code::PermissionDenied, "{refusal:?}");
    assert!(
        refusal.message().contains("does not name 127.0.0.54"),
        "{refusal:?}"
    );

    let hello = pb::LinkFrame {
        frame: Some(pb::link_frame::Frame::Hello(pb::Hello {
            node: impostor.into(),
            incarnation: 1,
        })),
    };
    let mut node = pb::node_client::NodeClient::new(channel);
    let refusal = match node.link(tokio_stream::iter(vec![hello])).await {
        Err(status) => status,
        Ok(answers) => answers
            .into_inner()
            .message()
            .await
            .expect_err("the hello is refused"),
    };
    assert_eq!(refusal.code(), Code::PermissionDenied, "{refusal:?}");

    // Without a certificate, the node services are closed altogether.
    let anonymous = certs.channel(&a.grpc, None).await.expect("connect");
    let mut coordinator = pb::coordinator_client::CoordinatorClient::new(anonymous);
    let refusal = coordinator
        .link(tokio_stream::iter(Vec::<pb::RegionMessage>::new()))
        .await
        .expect_err("refused");
    assert_eq!(refusal.code(), Code::Unauthenticated, "{refusal:?}");
}

/// The client API with bearer tokens: none and a wrong one are refused, a
/// read-write token tells, a read-only one asks but cannot tell; a token
/// added to the file works without a restart; no token appears in any log,
/// nor in the CLI's output.
#[tokio::test]
async fn the_client_api_takes_tokens_by_scope_and_logs_none() {
    let certs = Certs::make(&["127.0.0.61"]);
    let tokens = certs.path("tokens");
    std::fs::write(
        &tokens,
        format!(
            "# who may call\nops read-write {OPS_TOKEN}\ndashboard read-only {DASHBOARD_TOKEN}\n"
        ),
    )
    .expect("write tokens");
    let tokens_set = format!("api.tokens_file={}", tokens.display());
    let a = tls_node(
        &certs,
        "127.0.0.61",
        None,
        &[
            &tokens_set,
            "api.client_certificates=false",
            "log.level=debug",
        ],
    );
    a.await_ready(READY).await;
    let channel = certs.channel(&a.grpc, None).await.expect("connect");
    let tell = || pb::TellRequest {
        entity_type: "counter".into(),
        entity_id: "t".into(),
        payload: colo_tests::client::json(r#"{"Add":1}"#),
        idempotency_key: None,
    };

    let refusal = ShardingClient::new(channel.clone())
        .tell(tell())
        .await
        .expect_err("no token");
    assert_eq!(refusal.code(), Code::Unauthenticated, "{refusal:?}");
    let wrong = "ops-token-5e1f0c9a7b3d2e49";
    let refusal = with_token(channel.clone(), wrong)
        .tell(tell())
        .await
        .expect_err("wrong token");
    assert_eq!(refusal.code(), Code::Unauthenticated, "{refusal:?}");

    with_token(channel.clone(), OPS_TOKEN)
        .tell(tell())
        .await
        .expect("read-write tells");
    let mut dashboard = with_token(channel.clone(), DASHBOARD_TOKEN);
    let reply = dashboard
        .ask(ask_request("t", r#""Get""#))
        .await
        .expect("read-only asks");
    assert_eq!(
        reply.into_inner().reply.map(|p| p.data),
        Some(b"1".to_vec())
    );
    dashboard
        .cluster_stats(pb::ClusterStatsRequest {
            entity_type: "counter".into(),
            timeout: None,
        })
        .await
        .expect("read-only reads the stats");
    let refusal = dashboard
        .tell(tell())
        .await
        .expect_err("read-only cannot tell");
    assert_eq!(refusal.code(), Code::PermissionDenied, "{refusal:?}");
    // A client certificate is not enough with client_certificates = false.
    let with_cert = certs
        .channel(&a.grpc, Some("127.0.0.61"))
        .await
        .expect("connect");
    let refusal = ShardingClient::new(with_cert)
        .tell(tell())
        .await
        .expect_err("certificate only");
    assert_eq!(refusal.code(), Code::Unauthenticated, "{refusal:?}");

    // A token added to the file is taken without a restart.
    let added = "added-token-0a1b2c3d4e5f6a7b";
    let text = std::fs::read_to_string(&tokens).expect("read tokens");
    std::fs::write(&tokens, format!("{text}added read-write {added}\n")).expect("add a token");
    wait::until("the added token is taken", Duration::from_secs(20), || {
        let channel = channel.clone();
        async move { with_token(channel, added).tell(tell()).await.is_ok() }
    })
    .await;

    // The CLI, with its flags and their environment variables.
    let cli = |args: &[&str], env: &[(&str, &str)]| {
        let output = std::process::Command::new(colo_binary())
            .args(args)
            .args(["--addr", &a.grpc, "--type", "counter"])
            .envs(env.iter().copied())
            .output()
            .expect("run colo");
        let out = String::from_utf8_lossy(&output.stdout).to_string();
        let err = String::from_utf8_lossy(&output.stderr).to_string();
        (output.status.success(), out + &err)
    };
    let ca = certs.ca().display().to_string();
    let (ok, text) = cli(
        &["ask", "--id", "t", "Get", "--ca", &ca],
        &[("COLO_TOKEN", DASHBOARD_TOKEN)],
    );
    assert!(ok && text.contains("replied 2"), "{text}");
    let token_file = certs.path("ops.token");
    std::fs::write(&token_file, format!("{OPS_TOKEN}\n")).expect("write token file");
    let (ok, text) = cli(
        &[
            "tell",
            "--id",
            "t",
            r#"{"Add":1}"#,
            "--token-file",
            &token_file.display().to_string(),
        ],
        &[("COLO_CA", ca.as_str())],
    );
    assert!(ok, "{text}");
    let (ok, text) = cli(
        &[
            "tell",
            "--id",
            "t",
            "Get",
            "--ca",
            &ca,
            "--token",
            DASHBOARD_TOKEN,
        ],
        &[],
    );
    assert!(!ok && text.contains("PERMISSION_DENIED"), "{text}");
    assert!(
        !text.contains(DASHBOARD_TOKEN),
        "the CLI printed the token: {text}"
    );
    let (ok, text) = cli(&["tell", "--id", "t", "Get", "--token", OPS_TOKEN], &[]);
    assert!(
        !ok && text.contains("--ca"),
        "a token is sent over TLS only: {text}"
    );
    assert!(!text.contains(OPS_TOKEN), "{text}");

    let (ok, text) = cli(&["ask", "--id", "t", "Get"], &[]);
    assert!(
        !ok && text.contains("the node serves TLS: give --ca"),
        "plain text to a TLS node: {text}"
    );

    let logs = a.logs();
    assert!(
        logs.contains("refused a call with an unknown token"),
        "{logs}"
    );
    for secret in [OPS_TOKEN, DASHBOARD_TOKEN, wrong, added] {
        assert!(!logs.contains(secret), "a token is in the node's log");
    }
}

/// A node's certificate files replaced while it runs: new connections get
/// the new certificate, without a restart, and the cluster goes on.
#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let certs = Certs::make(&["127.0.0.71", "127.0.0.72", "ops"]);
    let a = tls_node(&certs, "127.0.0.71", None, &["tls.admin=true"]);
    let b = tls_node(&certs, "127.0.0.72", Some(&a.grpc), &[]);
    // With tls.admin, the admin server is HTTPS: the plain probe fails.
    wait::until("the node is ready over HTTPS", READY, || async {
        certs
            .https_get(&a.admin, "/health/ready")
            .await
            .is_ok_and(|(status, _)| status == 200)
    })
    .await;
    assert!(!a.ready().await, "the admin server answered plain HTTP");
    b.await_ready(READY).await;
    let before = certs.der("127.0.0.71");
    assert_eq!(
        certs.served_certificate(&a.grpc).await.expect("handshake"),
        before
    );

    certs.issue(&["127.0.0.71"]);
    let after = certs.der("127.0.0.71");
    assert_ne!(before, after);
    wait::until(
        "new connections get the new certificate",
        Duration::from_secs(20),
        || async {
            certs.served_certificate(&a.grpc).await.ok().as_ref() == Some(&after)
                && certs.served_certificate(&a.admin).await.ok().as_ref() == Some(&after)
        },
    )
    .await;
    assert!(
        a.logs().contains("TLS certificate files changed"),
        "{}",
        a.logs()
    );

    // The cluster still works across both nodes, over fresh connections.
    let mut client = certs.client(&b.grpc, "ops").await;
    for id in ids("rotated", 24) {
        ask(&mut client, &id, r#"{"Add":1}"#)
            .await
            .expect("ask after the rotation");
    }
    let (status, body) = certs
        .https_get(&a.admin, "/metrics")
        .await
        .expect("GET /metrics");
    assert_eq!(status, 200);
    assert!(body.contains("colo_"), "metrics over HTTPS");
}

/// A node without `[tls]` on an address other hosts can reach warns that
/// it serves plain text; on loopback it does not.
#[tokio::test]
async fn plain_text_beyond_loopback_is_warned_about() {
    let port = colo_tests::process::free_port();
    let exposed = NodeProcess::start(
        None,
        &[
            &format!("node.listen=0.0.0.0:{port}"),
            &format!("node.advertised=127.0.0.1:{port}"),
            &format!("coordinator.address=127.0.0.1:{port}"),
        ],
    );
    let local = NodeProcess::start(None, &[]);
    wait::until("both nodes started", READY, || {
        std::future::ready(
            exposed.logs().contains("node serving") && local.logs().contains("node serving"),
        )
    })
    .await;
    assert!(
        exposed
            .logs()
            .contains("the gRPC listener serves plain text on an address other hosts can reach"),
        "{}",
        exposed.logs()
    );
    assert!(
        !local.logs().contains("serves plain text"),
        "{}",
        local.logs()
    );
}

/// Files that cannot work stop the node at startup, naming the field and
/// the file: a key that does not go with its certificate, a CA file that
/// holds no certificate, a tokens file with a bad line (whose token is not
/// shown).
#[tokio::test]
async fn unusable_tls_and_token_files_stop_the_node_naming_them() {
    let certs = Certs::make(&["127.0.0.81", "other"]);
    let tokens = certs.path("tokens");
    let secret = "a-token-that-is-long-enough";
    std::fs::write(&tokens, format!("ops admin {secret}\n")).expect("write tokens");
    let not_a_ca = certs.path("empty.pem");
    std::fs::write(&not_a_ca, "").expect("write");
    let cases = [
        (
            format!("tls.key={}", certs.key("other").display()),
            "tls.key: ",
            "does not go with tls.cert",
        ),
        (
            format!("tls.ca={}", not_a_ca.display()),
            "tls.ca: ",
            "holds no certificate",
        ),
        (
            format!("api.tokens_file={}", tokens.display()),
            "api.tokens_file: ",
            "line 1: scope `admin`",
        ),
    ];
    for (bad, field, reason) in cases {
        let mut all = certs.node_sets("127.0.0.81");
        all.push(bad);
        let mut node = NodeProcess::start_on("127.0.0.81", Program::Colo, None, &sets(&all));
        let status = node.exited(Duration::from_secs(30)).await;
        assert!(!status.success());
        let logs = node.logs();
        assert!(
            logs.contains(field) && logs.contains(reason),
            "{field} {reason}:\n{logs}"
        );
        assert!(!logs.contains(secret), "{logs}");
    }
}
