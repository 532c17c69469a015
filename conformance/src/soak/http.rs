//! The soak's HTTP/1.1 client (hyper's, over loopback): one request with a timeout, the status
//! and the whole body back, and every failure to get them (refused, reset, timed out) as one
//! error value, which the caller treats as an unknown outcome and retries.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Longest a soak request may take before it counts as unanswered (a stall lasts seconds).
const REQUEST_SECS_MAX: u64 = 30;

#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A whole answer.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Default for HttpClient {
    fn default() -> HttpClient {
        HttpClient {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(5))
                .build_http(),
        }
    }
}

impl HttpClient {
    /// Sends one request; `Err` when no whole answer came back in time.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, String> {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|error| format!("building a request to {url}: {error}"))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|error| format!("{url}: {error}"))?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|error| format!("{url}: reading the body: {error}"))?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        match tokio::time::timeout(Duration::from_secs(REQUEST_SECS_MAX), exchange).await {
            Ok(answer) => answer,
            Err(_elapsed) => Err(format!("{url}: no answer within {REQUEST_SECS_MAX} s")),
        }
    }
}
