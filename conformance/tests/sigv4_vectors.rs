//! The proxy's signing path (`proxy::signing::sign_request`) against AWS's published SigV4 test
//! vectors (the signing test suite of aws-c-auth, as kept in smithy-rs; the data files are in
//! `tests/sigv4-vectors/`, see its NOTICE.md for their source and licence).
//!
//! For every vector: the canonical request the signer built equals the vector's; the string to
//! sign is the vector's (its date and credential scope are the ones the signer put in the
//! request, and the signature it produced is the HMAC of exactly the vector's string to sign
//! under the vector's derived key); and the Authorization header, X-Amz-Date and (for temporary
//! credentials) X-Amz-Security-Token equal the vector's signed request.
//!
//! The signer does not expose its canonical request; it emits it in a trace event, which this
//! test records. That event redacts sensitive header values (the session token), so the
//! comparison redacts the vector's the same way; the signature check still covers the token,
//! since the signed string hashes the unredacted canonical request.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use oncecheck_conformance::proxy::signing::{sign_request, SigningScope};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

mod support {
    pub mod sigv4;
}
use support::sigv4::{header, parse_timestamp};

/// The vectors that apply to a signed POST JSON API like DynamoDB's, and the plain GET/POST
/// cases around them: vanilla requests, a query string, a form body (signed with its body
/// hash header), header name case and value case, value trimming, session tokens, and path
/// normalisation.
const VECTORS: [&str; 12] = [
    "get-vanilla",
    "get-vanilla-query",
    "post-vanilla",
    "post-vanilla-query",
    "post-x-www-form-urlencoded",
    "post-header-key-case",
    "post-header-value-case",
    "get-header-value-trim",
    "post-sts-header-before",
    "get-vanilla-with-session-token",
    "get-slash-dot-slash-normalized",
    "get-relative-relative-normalized",
];

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sigv4-vectors")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A request file: the request line, `Name:value` header lines, a blank line, the body.
struct VectorRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

fn parse_request(text: &str) -> VectorRequest {
    let (head, body) = match text.split_once("\n\n") {
        Some((head, body)) => (head, body.to_owned()),
        None => (text.trim_end_matches('\n'), String::new()),
    };
    let mut lines = head.lines();
    let request_line = lines.next().expect("a request line");
    let mut parts = request_line.split(' ');
    let method = parts.next().expect("a method").to_owned();
    let path = parts.next().expect("a path").to_owned();
    let headers = lines
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("a header line without a colon: {line:?}"));
            (name.to_owned(), value.to_owned())
        })
        .collect();
    VectorRequest {
        method,
        path,
        headers,
        body,
    }
}

/// Records the `canonical_request` field of the signer's trace events.
#[derive(Clone, Default)]
struct CanonicalRequests(Arc<Mutex<Vec<String>>>);

struct CanonicalField<'a>(&'a mut Option<String>);

impl Visit for CanonicalField<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "canonical_request" {
            *self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for CanonicalRequests {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        let mut found = None;
        event.record(&mut CanonicalField(&mut found));
        if let Some(canonical) = found {
            self.0.lock().unwrap().push(canonical);
        }
    }
}

/// The signer's trace redacts a session token as `** redacted (length=N) **`.
fn redact_token(canonical: &str) -> String {
    canonical
        .lines()
        .map(|line| match line.strip_prefix("x-amz-security-token:") {
            Some(token) => format!(
                "x-amz-security-token:** redacted (length={}) **",
                token.len()
            ),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `Signature=...` of an Authorization header.
fn signature_of(authorization: &str) -> &str {
    authorization
        .rsplit_once("Signature=")
        .map(|(_, signature)| signature)
        .unwrap_or_else(|| panic!("no signature in {authorization:?}"))
}

/// `Credential=KEY/SCOPE,` of an Authorization header: the scope.
fn scope_of(authorization: &str) -> &str {
    let credential = authorization
        .split_once("Credential=")
        .and_then(|(_, rest)| rest.split_once(','))
        .map(|(credential, _)| credential)
        .unwrap_or_else(|| panic!("no credential in {authorization:?}"));
    credential
        .split_once('/')
        .map(|(_, scope)| scope)
        .expect("a credential scope")
}

struct Outcome {
    added: Vec<(String, String)>,
    canonical: String,
}

fn sign_vector(name: &str) -> (Outcome, Value, VectorRequest) {
    let dir = vectors_dir().join(name);
    let context: Value = serde_json::from_str(&read(&dir.join("context.json"))).unwrap();
    let request = parse_request(&read(&dir.join("request.txt")));
    let credentials = &context["credentials"];
    let credentials = Credentials::new(
        credentials["access_key_id"].as_str().unwrap(),
        credentials["secret_access_key"].as_str().unwrap(),
        credentials["token"].as_str().map(str::to_owned),
        None,
        "sigv4-vector",
    );
    let scope = SigningScope {
        region: context["region"].as_str().unwrap(),
        service: context["service"].as_str().unwrap(),
        body_hash_header: context["sign_body"].as_bool() == Some(true),
    };
    let time = parse_timestamp(context["timestamp"].as_str().unwrap());
    let host = header(&request.headers, "host").expect("a Host header");
    let url = format!("https://{host}{}", request.path);
    let headers: Vec<(&str, &str)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let recorder = CanonicalRequests::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let added = tracing::subscriber::with_default(subscriber, || {
        sign_request(
            &request.method,
            &url,
            &headers,
            request.body.as_bytes(),
            &credentials,
            scope,
            time,
        )
    })
    .unwrap_or_else(|error| panic!("{name}: {error}"));
    let canonical = recorder
        .0
        .lock()
        .unwrap()
        .pop()
        .unwrap_or_else(|| panic!("{name}: the signer emitted no canonical request"));
    (Outcome { added, canonical }, context, request)
}

#[test]
fn the_signing_path_reproduces_every_vector() {
    for name in VECTORS {
        let dir = vectors_dir().join(name);
        let (outcome, context, _) = sign_vector(name);
        let added = |header_name: &str| header(&outcome.added, header_name).map(str::to_owned);

        // The canonical request.
        let expected_canonical = read(&dir.join("header-canonical-request.txt"));
        assert_eq!(
            outcome.canonical,
            redact_token(&expected_canonical),
            "{name}: canonical request"
        );

        // The string to sign: its date and scope are the request's, and the signature is the
        // HMAC of the vector's string under the vector's signing key.
        let string_to_sign = read(&dir.join("header-string-to-sign.txt"));
        let lines: Vec<&str> = string_to_sign.lines().collect();
        let authorization = added("authorization").expect("an Authorization header");
        assert_eq!(lines[0], "AWS4-HMAC-SHA256", "{name}: algorithm");
        assert_eq!(
            Some(lines[1].to_owned()),
            added("x-amz-date"),
            "{name}: string-to-sign date"
        );
        assert_eq!(lines[2], scope_of(&authorization), "{name}: scope");
        let secret = context["credentials"]["secret_access_key"]
            .as_str()
            .unwrap();
        let time = parse_timestamp(context["timestamp"].as_str().unwrap());
        let key = aws_sigv4::sign::v4::generate_signing_key(
            secret,
            time,
            context["region"].as_str().unwrap(),
            context["service"].as_str().unwrap(),
        );
        assert_eq!(
            aws_sigv4::sign::v4::calculate_signature(key, string_to_sign.as_bytes()),
            signature_of(&authorization),
            "{name}: the signature is not over the vector's string to sign"
        );

        // The signed request's headers.
        let signed = parse_request(&read(&dir.join("header-signed-request.txt")));
        for signed_header in ["authorization", "x-amz-date", "x-amz-security-token"] {
            assert_eq!(
                added(signed_header).as_deref(),
                header(&signed.headers, signed_header),
                "{name}: {signed_header}"
            );
        }
    }
}

/// The checks can fail: a vector signed a second later, or with another secret, no longer
/// matches (the assertions above compare, not echo).
#[test]
fn a_changed_input_no_longer_matches_its_vector() {
    let name = "post-vanilla";
    let dir = vectors_dir().join(name);
    let (_, context, request) = sign_vector(name);
    let signed = parse_request(&read(&dir.join("header-signed-request.txt")));
    let expected = header(&signed.headers, "authorization").unwrap();
    let time = parse_timestamp(context["timestamp"].as_str().unwrap());
    let scope = SigningScope {
        region: "us-east-1",
        service: "service",
        body_hash_header: false,
    };
    let headers = [("Host", "example.amazonaws.com")];
    let sign = |secret: &str, time: SystemTime| {
        let credentials = Credentials::new("AKIDEXAMPLE", secret, None, None, "test");
        let added = sign_request(
            &request.method,
            "https://example.amazonaws.com/",
            &headers,
            b"",
            &credentials,
            scope,
            time,
        )
        .unwrap();
        header(&added, "authorization").unwrap().to_owned()
    };
    let secret = context["credentials"]["secret_access_key"]
        .as_str()
        .unwrap();
    assert_eq!(sign(secret, time), expected);
    assert_ne!(sign(secret, time + Duration::from_secs(1)), expected);
    assert_ne!(sign("another-secret", time), expected);
}
