//! The proxy re-signs what it forwards (`ONCECHECK_SIGV4=on`), checked on the wire in front of
//! moto: a recording TCP tap sits between the proxy and moto and keeps every request byte the
//! upstream receives. Every request (the set-up listener's, a held actor request forwarded by
//! the replayer, the proxy's own ListTables) must carry a well-formed SigV4 Authorization for
//! the upstream's host, in the proxy's credential scope, with the session token of its
//! temporary credentials, and a signature valid for the exact bytes the upstream got; none may
//! carry the client's own credentials; and moto still answers every one. The same run has the
//! proxy's ledger on (`ONCECHECK_UPSTREAM_LEDGER`): one line per exchange, with its units.
//!
//! Needs ONCECHECK_DDB_ENDPOINT and fails (never skips) without it:
//! `bash -c 'source scripts/services.sh; start_moto; cargo test -p oncecheck-conformance --test sigv4_proxy; services_down'`

use std::sync::{Arc, Mutex};

use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use oncecheck_conformance::proxy::signing::{sign_request, SigningScope, SIGV4_ENV};
use oncecheck_conformance::proxy::Proxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod support {
    pub mod moto;
    pub mod sigv4;
}
use support::moto::{upstream, STEP_WAIT};
use support::sigv4::{header, parse_timestamp};

/// The proxy's credentials (temporary: they carry a session token) and region, from the
/// standard chain's environment provider.
const PROXY_KEY: &str = "AKIDPROXYSIGNING";
const PROXY_SECRET: &str = "proxy-secret-for-the-sigv4-test";
const PROXY_TOKEN: &str = "proxy-session-token/for+the=sigv4-test";
const PROXY_REGION: &str = "eu-west-1";
/// The clients sign with other credentials, for another region, so that a forwarded client
/// signature would show.
const CLIENT_KEY: &str = "AKIDCLIENTSIDEONLY";

/// The bytes one connection sent upstream.
type Recording = Arc<Mutex<Vec<u8>>>;

/// A TCP relay to `upstream` that records, per connection, every byte sent upstream.
struct Tap {
    address: std::net::SocketAddr,
    connections: Arc<Mutex<Vec<Recording>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tap {
    async fn start(upstream: String) -> Tap {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let connections: Arc<Mutex<Vec<Recording>>> = Arc::default();
        let recorded = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let record: Recording = Arc::default();
                recorded.lock().unwrap().push(record.clone());
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 64 * 1024];
                    loop {
                        let read = match client_read.read(&mut buffer).await {
                            Ok(0) | Err(_) => break,
                            Ok(read) => read,
                        };
                        record.lock().unwrap().extend_from_slice(&buffer[..read]);
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
            }
        });
        Tap {
            address,
            connections,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn requests(&self) -> Vec<WireRequest> {
        self.connections
            .lock()
            .unwrap()
            .iter()
            .flat_map(|record| parse_wire(&record.lock().unwrap()))
            .collect()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct WireRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// The HTTP/1.1 requests in one connection's bytes (Content-Length framed, as the proxy sends).
fn parse_wire(mut bytes: &[u8]) -> Vec<WireRequest> {
    let mut requests = Vec::new();
    while let Some(end) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
        let head = std::str::from_utf8(&bytes[..end]).expect("an ASCII request head");
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap().split(' ');
        let method = request_line.next().unwrap().to_owned();
        let path = request_line.next().unwrap().to_owned();
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(':').expect("a header line");
                (name.to_ascii_lowercase(), value.trim().to_owned())
            })
            .collect();
        let length: usize = header(&headers, "content-length").map_or(0, |length| {
            length.parse().expect("a numeric Content-Length")
        });
        let body_start = end + 4;
        let body = bytes[body_start..body_start + length].to_vec();
        bytes = &bytes[body_start + length..];
        requests.push(WireRequest {
            method,
            path,
            headers,
            body,
        });
    }
    requests
}

fn client_signing_for_itself(endpoint: &str) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(
            CLIENT_KEY,
            "client-secret",
            None,
            None,
            "test client",
        ))
        .build();
    Client::from_conf(config)
}

/// `Name=value` of an Authorization header's comma-separated parts.
fn authorization_part<'a>(authorization: &'a str, name: &str) -> &'a str {
    authorization
        .split([',', ' '])
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {authorization:?}"))
}

#[test]
fn forwarded_requests_are_signed_for_the_upstream_host_and_moto_answers() {
    let moto = upstream();
    // Set before any thread or credential chain exists: the proxy's signer reads the chain.
    std::env::set_var(SIGV4_ENV, "on");
    std::env::set_var("AWS_ACCESS_KEY_ID", PROXY_KEY);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", PROXY_SECRET);
    std::env::set_var("AWS_SESSION_TOKEN", PROXY_TOKEN);
    std::env::set_var("AWS_REGION", PROXY_REGION);
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::remove_var("AWS_PROFILE");
    let ledger =
        std::env::temp_dir().join(format!("sigv4-proxy-ledger-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&ledger);
    std::env::set_var("ONCECHECK_UPSTREAM_LEDGER", &ledger);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let moto_address = moto
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let tap = Tap::start(moto_address).await;
        let proxy = Proxy::start(&tap.url(), 1).await.unwrap();
        // The proxy's own request.
        proxy
            .check_upstream()
            .await
            .expect("moto answers the proxy's signed ListTables");

        // The set-up listener's requests, forwarded at once, on a table of the relay's key
        // schema (the proxy reads keys as stream_id and seq).
        let set_up = client_signing_for_itself(&proxy.set_up_endpoint());
        let table = format!("sigv4-proxy-{}", std::process::id());
        set_up
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("stream_id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("seq")
                    .attribute_type(ScalarAttributeType::N)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("stream_id")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("seq")
                    .key_type(KeyType::Range)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .expect("moto answers a re-signed CreateTable");
        set_up
            .put_item()
            .table_name(&table)
            .item("stream_id", AttributeValue::S("signed".into()))
            .item("seq", AttributeValue::N("1".into()))
            .item(
                "note",
                AttributeValue::S("a body with = and + signs".into()),
            )
            .send()
            .await
            .expect("moto answers a re-signed PutItem");

        // An actor's request, held and forwarded by the replayer.
        let actor = client_signing_for_itself(&proxy.endpoint(0));
        let get = tokio::spawn({
            let table = table.clone();
            async move {
                actor
                    .get_item()
                    .table_name(&table)
                    .key("stream_id", AttributeValue::S("signed".into()))
                    .key("seq", AttributeValue::N("1".into()))
                    .consistent_read(true)
                    .send()
                    .await
            }
        });
        let held = proxy.next_request(0, STEP_WAIT).await.unwrap();
        assert_eq!(held.operation, "GetItem");
        let answer = proxy.forward(&held).await.unwrap();
        assert!(answer.is_success(), "moto answered {answer:?}");
        proxy.deliver(held, answer).unwrap();
        let got = get.await.unwrap().expect("the actor's GetItem answer");
        assert_eq!(
            got.item().and_then(|item| item.get("note")),
            Some(&AttributeValue::S("a body with = and + signs".into()))
        );
        set_up
            .delete_table()
            .table_name(&table)
            .send()
            .await
            .expect("moto answers a re-signed DeleteTable");

        let requests = tap.requests();
        let operations: Vec<&str> = requests
            .iter()
            .filter_map(|request| header(&request.headers, "x-amz-target"))
            .map(|target| target.trim_start_matches("DynamoDB_20120810."))
            .collect();
        assert_eq!(
            operations,
            [
                "ListTables",
                "CreateTable",
                "PutItem",
                "GetItem",
                "DeleteTable"
            ],
            "the upstream saw these requests"
        );
        let host = tap.address.to_string();
        let proxy_credentials = Credentials::new(
            PROXY_KEY,
            PROXY_SECRET,
            Some(PROXY_TOKEN.to_owned()),
            None,
            "the proxy's chain",
        );
        for request in &requests {
            let operation = header(&request.headers, "x-amz-target").unwrap();
            assert_eq!(request.method, "POST");
            assert_eq!(
                header(&request.headers, "host"),
                Some(host.as_str()),
                "{operation}"
            );
            let authorization = header(&request.headers, "authorization")
                .unwrap_or_else(|| panic!("{operation} carries no Authorization"));
            let date = header(&request.headers, "x-amz-date").expect("an X-Amz-Date");
            assert!(
                authorization.starts_with("AWS4-HMAC-SHA256 Credential="),
                "{operation}: {authorization}"
            );
            assert_eq!(
                authorization_part(authorization, "Credential"),
                format!(
                    "{PROXY_KEY}/{}/{PROXY_REGION}/dynamodb/aws4_request",
                    &date[..8]
                ),
                "{operation}: the credential scope"
            );
            let signed_headers: Vec<&str> = authorization_part(authorization, "SignedHeaders")
                .split(';')
                .collect();
            for needed in [
                "content-type",
                "host",
                "x-amz-date",
                "x-amz-security-token",
                "x-amz-target",
            ] {
                assert!(
                    signed_headers.contains(&needed),
                    "{operation}: {needed} unsigned in {signed_headers:?}"
                );
            }
            let signature = authorization_part(authorization, "Signature");
            assert!(
                signature.len() == 64 && signature.chars().all(|c| c.is_ascii_hexdigit()),
                "{operation}: signature {signature:?}"
            );
            assert_eq!(
                header(&request.headers, "x-amz-security-token"),
                Some(PROXY_TOKEN),
                "{operation}: the session token"
            );
            assert!(
                !request
                    .headers
                    .iter()
                    .any(|(_, value)| value.contains(CLIENT_KEY)),
                "{operation} still carries the client's credentials"
            );
            // The signature is valid for the bytes the upstream received: signing them again
            // with the proxy's credentials at the request's own time gives the same header.
            let unsigned: Vec<(&str, &str)> = request
                .headers
                .iter()
                .filter(|(name, _)| {
                    signed_headers.contains(&name.as_str())
                        && !matches!(name.as_str(), "x-amz-date" | "x-amz-security-token")
                })
                .map(|(name, value)| (name.as_str(), value.as_str()))
                .collect();
            let again = sign_request(
                "POST",
                &format!("http://{host}{}", request.path),
                &unsigned,
                &request.body,
                &proxy_credentials,
                SigningScope {
                    region: PROXY_REGION,
                    service: "dynamodb",
                    body_hash_header: false,
                },
                parse_timestamp(date),
            )
            .unwrap();
            assert_eq!(
                header(&again, "authorization"),
                Some(authorization),
                "{operation}: the signature does not cover what the upstream received"
            );
        }
    });

    // The ledger: the five exchanges in order, each with the units DynamoDB charges for it.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&ledger)
        .expect("the ledger file")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON ledger line"))
        .collect();
    let _ = std::fs::remove_file(&ledger);
    let entries: Vec<(&str, u64, f64, f64)> = lines
        .iter()
        .map(|line| {
            (
                line["operation"].as_str().unwrap(),
                line["status"].as_u64().unwrap(),
                line["read_units"].as_f64().unwrap(),
                line["write_units"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("ListTables", 200, 0.0, 0.0),
            ("CreateTable", 200, 0.0, 0.0),
            ("PutItem", 200, 0.0, 1.0),
            ("GetItem", 200, 1.0, 0.0),
            ("DeleteTable", 200, 0.0, 0.0),
        ]
    );
}
