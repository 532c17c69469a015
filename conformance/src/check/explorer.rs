//! `oncecheck explore`: stateright's Explorer behind a front that names the protocol. The
//! Explorer's status bar names the model by its Rust type (`RelayModel`); the front passes every
//! request through to the Explorer on a loopback port of its own and answers the status
//! (`/.status`) with the protocol's name and variant in the model's place (`relay append
//! (fixed)`), so the page speaks the words of the specs, as the CLI does.
//!
//! Invariants: a request is passed through unchanged but for `Connection: close` (one exchange
//! per connection); only the status answer's `model` field is rewritten, and an answer the front
//! cannot read is passed through as it came; every read is bounded (`REQUEST_HEAD_BYTES_MAX`,
//! `REQUEST_BODY_BYTES_MAX`, `RESPONSE_BYTES_MAX`), every wait (`CONNECT_WAIT_MILLIS_MAX`,
//! `CLIENT_WAIT_SECS_MAX`, `EXCHANGE_WAIT_SECS_MAX`) and the exchanges at once
//! (`CONNECTIONS_MAX`: one more is answered 503 at once, so idle clients cannot pile up threads).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request's line and headers at most.
const REQUEST_HEAD_BYTES_MAX: usize = 64 * 1024;
/// A request's body at most (the Explorer's requests have none).
const REQUEST_BODY_BYTES_MAX: usize = 1024 * 1024;
/// An answer at most: a state's view with its picture is far smaller.
const RESPONSE_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// How long a request waits for the Explorer to listen (it starts beside the front).
const CONNECT_WAIT_MILLIS_MAX: u64 = 10_000;
/// How long one exchange may take: `/.runtocompletion` answers when the whole search ends.
const EXCHANGE_WAIT_SECS_MAX: u64 = 3_600;
/// How long a client may take to send its request (a browser sends it at once).
const CLIENT_WAIT_SECS_MAX: u64 = 30;
/// Exchanges passed through at once, each on a thread of its own: a page loads a few at a time.
const CONNECTIONS_MAX: usize = 64;
/// The answer to a connection past `CONNECTIONS_MAX`.
const BUSY_ANSWER: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// The listener the user opens (`--port`), naming the protocol in the Explorer's status.
pub struct Front {
    listener: TcpListener,
    /// What the status bar says in place of the model's Rust type.
    title: String,
    connections_max: usize,
}

impl Front {
    /// Listens on `address`; a busy or unusable address is an error naming it.
    pub fn bind(address: &str, title: String) -> Result<Front, String> {
        let listener = TcpListener::bind(address).map_err(|error| {
            format!("cannot serve the Explorer on {address}: {error} (choose another --port)")
        })?;
        Ok(Front {
            listener,
            title,
            connections_max: CONNECTIONS_MAX,
        })
    }

    /// Passes every connection through to the Explorer at `explorer`, one thread each; blocks
    /// while the listener accepts.
    pub fn serve(self, explorer: SocketAddr) {
        let open = Arc::new(AtomicUsize::new(0));
        for mut client in self.listener.incoming().flatten() {
            if open.fetch_add(1, Ordering::SeqCst) >= self.connections_max {
                open.fetch_sub(1, Ordering::SeqCst);
                let _ = client.write_all(BUSY_ANSWER);
                continue;
            }
            let title = self.title.clone();
            let open = Arc::clone(&open);
            std::thread::spawn(move || {
                // A client gone or an Explorer not answering ends this exchange only.
                let _ = pass(client, explorer, &title);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    }
}

/// A loopback address free now, for the Explorer behind the front.
pub fn loopback_address() -> Result<SocketAddr, String> {
    let probe = TcpListener::bind("127.0.0.1:0")
        .map_err(|error| format!("cannot find a loopback port for the Explorer: {error}"))?;
    probe
        .local_addr()
        .map_err(|error| format!("cannot find a loopback port for the Explorer: {error}"))
}

/// One request passed through, its answer passed back (the status renamed).
fn pass(mut client: TcpStream, explorer: SocketAddr, title: &str) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(CLIENT_WAIT_SECS_MAX)))?;
    let request = read_request(&mut client)?;
    let mut upstream = connect(explorer)?;
    upstream.set_read_timeout(Some(Duration::from_secs(EXCHANGE_WAIT_SECS_MAX)))?;
    upstream.write_all(&request.bytes)?;
    let mut answer = Vec::new();
    (&mut upstream)
        .take(RESPONSE_BYTES_MAX)
        .read_to_end(&mut answer)?;
    if request.path == "/.status" {
        if let Some(renamed) = renamed_status(&answer, title) {
            answer = renamed;
        }
    }
    client.write_all(&answer)
}

/// A request as it goes to the Explorer, and its path.
struct Request {
    bytes: Vec<u8>,
    path: String,
}

/// Reads one request: its head (its `Connection` header replaced by `close`) and its body.
fn read_request(client: &mut TcpStream) -> std::io::Result<Request> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = find(&received, b"\r\n\r\n") {
            break end;
        }
        if received.len() > REQUEST_HEAD_BYTES_MAX {
            return Err(invalid("a request head over REQUEST_HEAD_BYTES_MAX"));
        }
        let read = client.read(&mut buffer)?;
        if read == 0 {
            return Err(invalid("the client closed before its request ended"));
        }
        received.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let path = request_line
        .split(' ')
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let mut content_length = 0usize;
    let mut bytes = format!("{request_line}\r\n");
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("connection") {
            continue;
        }
        if name.eq_ignore_ascii_case("content-length") {
            content_length = line[name.len() + 1..].trim().parse().unwrap_or(0);
        }
        bytes.push_str(line);
        bytes.push_str("\r\n");
    }
    bytes.push_str("Connection: close\r\n\r\n");
    if content_length > REQUEST_BODY_BYTES_MAX {
        return Err(invalid("a request body over REQUEST_BODY_BYTES_MAX"));
    }
    let mut body = received[head_end + 4..].to_vec();
    while body.len() < content_length {
        let read = client.read(&mut buffer)?;
        if read == 0 {
            return Err(invalid("the client closed before its body ended"));
        }
        body.extend_from_slice(&buffer[..read]);
    }
    body.truncate(content_length);
    let mut bytes = bytes.into_bytes();
    bytes.extend_from_slice(&body);
    Ok(Request { bytes, path })
}

/// Connects to the Explorer, waiting for it to listen.
fn connect(explorer: SocketAddr) -> std::io::Result<TcpStream> {
    let started = Instant::now();
    loop {
        match TcpStream::connect(explorer) {
            Ok(stream) => return Ok(stream),
            Err(error) if started.elapsed() > Duration::from_millis(CONNECT_WAIT_MILLIS_MAX) => {
                return Err(error)
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The status answer with `title` as its model, its length set anew; `None` when the answer is
/// not a plain JSON status (then it is passed through unchanged).
fn renamed_status(answer: &[u8], title: &str) -> Option<Vec<u8>> {
    let head_end = find(answer, b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..head_end]).ok()?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return None;
    }
    let mut status: serde_json::Value = serde_json::from_slice(&answer[head_end + 4..]).ok()?;
    status.as_object_mut()?.insert("model".into(), title.into());
    let body = serde_json::to_vec(&status).ok()?;
    let mut renamed = String::new();
    for line in head.split("\r\n") {
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("content-length") {
            renamed.push_str(&format!("Content-Length: {}\r\n", body.len()));
        } else {
            renamed.push_str(line);
            renamed.push_str("\r\n");
        }
    }
    renamed.push_str("\r\n");
    let mut renamed = renamed.into_bytes();
    renamed.extend_from_slice(&body);
    Some(renamed)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_past_the_most_at_once_is_answered_503_and_the_others_wait() {
        let mut front = Front::bind("127.0.0.1:0", "relay append (fixed)".into()).unwrap();
        front.connections_max = 2;
        let address = front.listener.local_addr().unwrap();
        // Nothing listens behind it: the held exchanges wait for their requests, not for it.
        let explorer = loopback_address().unwrap();
        std::thread::spawn(move || front.serve(explorer));
        let held: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(address).unwrap())
            .collect();
        // The front accepts in arrival order and counts each exchange before it accepts the
        // next, so the third is past the most whenever it is accepted.
        let mut third = TcpStream::connect(address).unwrap();
        third
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut answer = Vec::new();
        third.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, BUSY_ANSWER);
        drop(held);
    }

    #[test]
    fn the_status_names_the_protocol_and_keeps_its_other_fields() {
        let body = r#"{"done":false,"model":"oncecheck_model::relay::RelayModel","state_count":3}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let renamed = renamed_status(answer.as_bytes(), "relay append (fixed)").unwrap();
        let renamed = String::from_utf8(renamed).unwrap();
        let (head, body) = renamed.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(status["model"], "relay append (fixed)");
        assert_eq!(status["state_count"], 3);
        // Not a status the front can read: passed through as it came.
        assert!(renamed_status(b"HTTP/1.1 404 Not Found\r\n\r\n", "x").is_none());
    }
}
