//! An outside client over loopback TCP: one request per connection, with hyper's HTTP/1.1
//! client (no reqwest), for the tests that speak to a served layer as a user's client would.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// What the client received.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The `idempotency-replayed` marker, when present.
    pub replayed: Option<String>,
    pub body: String,
}

impl Answer {
    /// The problem type's fragment (`in-flight`, `outcome-unknown`, ...) of a problem+json body.
    pub fn problem_kind(&self) -> Option<String> {
        problem_kind(self.body.as_bytes())
    }
}

/// The problem type's fragment of a problem+json body; `None` for any other body.
pub fn problem_kind(body: &[u8]) -> Option<String> {
    let document: serde_json::Value = serde_json::from_slice(body).ok()?;
    let kind = document["type"].as_str()?.rsplit_once('#')?.1;
    Some(kind.to_string())
}

/// Sends one request to `address` (`host:port`) on a connection of its own.
pub async fn call(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", address);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(
            request
                .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let replayed = headers
        .get("idempotency-replayed")
        .map(|value| value.to_str().unwrap().to_string());
    let body = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    Answer {
        status,
        headers,
        replayed,
        body,
    }
}
