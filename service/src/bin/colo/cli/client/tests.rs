use super::*;
use clap::Parser;

#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(subcommand)]
    command: ClientCommand,
}

#[test]
fn subcommands_parse_with_defaults() {
    let cli =
        Cli::try_parse_from(["colo", "ask", "--id", "a", "\"Get\"", "--timeout", "5s"]).unwrap();
    let ClientCommand::Ask {
        target,
        id,
        message,
        timeout,
    } = cli.command
    else {
        panic!("not an ask: {cli:?}");
    };
    assert_eq!(target.addr, DEFAULT_ADDR);
    assert_eq!(target.entity_type, "", "the node's only one");
    assert!(!target.json);
    assert_eq!((id.as_str(), message.as_str()), ("a", "\"Get\""));
    assert_eq!(timeout, Some(Duration::from_secs(5)));

    let cli = Cli::try_parse_from([
        "colo", "stats", "--addr", "n2:7002", "--type", "device", "--json",
    ])
    .unwrap();
    let ClientCommand::Stats { target, timeout } = cli.command else {
        panic!("not stats: {cli:?}");
    };
    assert_eq!(
        (
            target.addr.as_str(),
            target.entity_type.as_str(),
            target.json
        ),
        ("n2:7002", "device", true)
    );
    assert_eq!(timeout, None);
    assert!(
        Cli::try_parse_from(["colo", "tell", "{\"Add\":1}"]).is_err(),
        "--id is required"
    );
}

#[test]
fn addresses_get_a_scheme_when_they_have_none() {
    assert_eq!(
        normalize_addr("127.0.0.1:7001").unwrap(),
        "http://127.0.0.1:7001"
    );
    assert_eq!(
        normalize_addr(" localhost:7002 ").unwrap(),
        "http://localhost:7002"
    );
    assert_eq!(normalize_addr("http://n1:7001").unwrap(), "http://n1:7001");
    assert_eq!(normalize_addr("https://n1:443").unwrap(), "https://n1:443");
    assert_eq!(normalize_addr("[::1]:7001").unwrap(), "http://[::1]:7001");
    for bad in ["", "  ", "http://", "not an address"] {
        let err = normalize_addr(bad).unwrap_err();
        assert!(
            matches!(err, ClientCliError::Address { .. }),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains("--addr"), "{err}");
    }
}

#[test]
fn messages_are_json_or_a_bare_word() {
    assert_eq!(message_json("{\"Add\":5}").unwrap(), b"{\"Add\":5}");
    assert_eq!(message_json(" \"Get\" ").unwrap(), b"\"Get\"");
    assert_eq!(message_json("Get").unwrap(), b"\"Get\"");
    assert_eq!(message_json("42").unwrap(), b"42");
    for bad in ["{Add:5}", "", "Add 5", "'Get'"] {
        assert!(
            matches!(message_json(bad), Err(ClientCliError::Message(_))),
            "{bad:?}"
        );
    }
}

/// The digits of the report: through a `serde_json::Value` the
/// last one came out as 5.
#[test]
fn a_reply_is_printed_as_the_node_wrote_it() {
    let payload = |data: &str| Payload {
        content_type: "application/json".into(),
        data: data.as_bytes().to_vec(),
    };
    for (sent, shown) in [
        ("11.163829787234043", "11.163829787234043"),
        (
            "{\"average\":11.163829787234043,\"readings\":47}",
            "{\"average\":11.163829787234043,\"readings\":47}",
        ),
        ("{ \"b\": 1,\n \"a\": [0.1, 2] }", "{\"b\":1,\"a\":[0.1,2]}"),
        ("not json", "\"not json\""),
    ] {
        assert_eq!(reply_text(Some(&payload(sent))), shown, "{sent:?}");
    }
    assert_eq!(reply_text(None), "null");
}

#[test]
fn a_refused_entity_type_names_the_nodes_entity_types() {
    let refusal = |known: &str| {
        tonic::Status::invalid_argument(format!(
            "entity_type \"?\" is not known on this node; known: {known}"
        ))
    };
    assert_eq!(
        known_entity_types(&refusal("account")),
        Some(vec!["account".to_string()])
    );
    assert_eq!(
        known_entity_types(&refusal("counter, user")),
        Some(vec!["counter".to_string(), "user".to_string()])
    );
    assert_eq!(known_entity_types(&refusal("what is this")), None);
    assert_eq!(
        known_entity_types(&tonic::Status::invalid_argument(
            "entity_id must not be empty"
        )),
        None
    );
    assert_eq!(
        known_entity_types(&tonic::Status::unavailable("known: counter")),
        None
    );
}

#[test]
fn status_errors_start_with_the_code() {
    let err = ClientCliError::from(tonic::Status::invalid_argument(
        "entity_id must not be empty",
    ));
    assert_eq!(
        err.to_string(),
        "INVALID_ARGUMENT: entity_id must not be empty"
    );
    assert_eq!(code_name(tonic::Code::Unavailable), "UNAVAILABLE");
}
