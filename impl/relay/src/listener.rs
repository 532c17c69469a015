//! The relay's listener: hyper's own 414 and 431 answers get problem bodies.
//!
//! hyper rejects a request line longer than it parses (414) and a request head over its buffer
//! or header count (431) before any handler sees the request, and answers with an empty body.
//! Every relay error has a problem body, so [`ProblemListener`] wraps each connection in
//! [`ProblemIo`], which recognises exactly those two automatic answers on the wire and writes a
//! problem response in their place.
//!
//! Invariants: bytes of any other response pass through untouched; a replacement is written
//! whole before hyper is told its own answer was written; hyper closes the connection after
//! these answers, so nothing follows a replacement. Recognised: a response head that starts with
//! `HTTP/1.1 414 ` or `HTTP/1.1 431 ` and declares `content-length: 0`, which the relay's
//! handlers never send (their errors carry a body).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::PROBLEM_TYPE_PREFIX;

/// A TCP listener whose connections answer hyper's automatic 414 and 431 with problem bodies.
pub struct ProblemListener {
    inner: TcpListener,
}

impl ProblemListener {
    pub fn new(inner: TcpListener) -> ProblemListener {
        ProblemListener { inner }
    }
}

impl axum::serve::Listener for ProblemListener {
    type Io = ProblemIo<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, address) = axum::serve::Listener::accept(&mut self.inner).await;
        (ProblemIo::new(stream), address)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that swaps hyper's bodiless 414 and 431 for problem responses.
pub struct ProblemIo<S> {
    inner: S,
    /// The rest of a replacement being written, and the length of hyper's buffer it replaces.
    replacing: Option<(Vec<u8>, usize)>,
}

impl<S> ProblemIo<S> {
    pub fn new(inner: S) -> ProblemIo<S> {
        ProblemIo {
            inner,
            replacing: None,
        }
    }
}

/// The problem response replacing hyper's automatic answer in `head`, if it is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status, slug, title, detail) = if head.starts_with(b"HTTP/1.1 414 ") {
        (
            "414 URI Too Long",
            "uri-too-long",
            "URI too long",
            "the request's URI is longer than the relay parses; shorten it",
        )
    } else if head.starts_with(b"HTTP/1.1 431 ") {
        (
            "431 Request Header Fields Too Large",
            "header-fields-too-large",
            "Request header fields too large",
            "the request's header fields are larger or more numerous than the relay parses",
        )
    } else {
        return None;
    };
    let end = head.windows(4).position(|window| window == b"\r\n\r\n")?;
    let declared_empty = String::from_utf8_lossy(&head[..end])
        .to_ascii_lowercase()
        .contains("\r\ncontent-length: 0");
    if !declared_empty {
        return None;
    }
    let code: u16 = status[..3].parse().expect("a three-digit status");
    let body = serde_json::json!({
        "type": format!("{PROBLEM_TYPE_PREFIX}{slug}"),
        "title": title,
        "status": code,
        "detail": detail,
    })
    .to_string();
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for ProblemIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(context, buffer)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ProblemIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            match replacement(buffer) {
                Some(bytes) => this.replacing = Some((bytes, buffer.len())),
                None => return Pin::new(&mut this.inner).poll_write(context, buffer),
            }
        }
        let (rest, replaced) = this.replacing.as_mut().expect("set above");
        while !rest.is_empty() {
            let written = match Pin::new(&mut this.inner).poll_write(context, rest) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(written)) => written,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            };
            rest.drain(..written);
        }
        // hyper's whole buffer counts as written: the replacement stands for all of it.
        let replaced = *replaced;
        this.replacing = None;
        Poll::Ready(Ok(replaced))
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that records what its wrapper passed through.
    #[derive(Default)]
    struct Recording {
        written: Vec<u8>,
        flushes: usize,
        shutdowns: usize,
    }

    impl AsyncWrite for Recording {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buffer: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.written.extend_from_slice(buffer);
            Poll::Ready(Ok(buffer.len()))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shutdowns += 1;
            Poll::Ready(Ok(()))
        }
    }

    /// Any other answer reaches the connection untouched, and so do hyper's flushes and its
    /// shutdown (the end of a `connection: close` answer, which a TLS or buffered connection
    /// would need to send what it holds).
    #[tokio::test]
    async fn other_answers_flushes_and_shutdowns_pass_through_to_the_connection() {
        use tokio::io::AsyncWriteExt;
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let mut connection = ProblemIo::new(Recording::default());
        connection.write_all(answer).await.unwrap();
        connection.flush().await.unwrap();
        connection.shutdown().await.unwrap();
        assert_eq!(connection.inner.written, answer);
        assert_eq!(connection.inner.flushes, 1);
        assert_eq!(connection.inner.shutdowns, 1);
    }

    #[test]
    fn only_hypers_bodiless_414_and_431_are_replaced() {
        let automatic = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let replaced = String::from_utf8(replacement(automatic).unwrap()).unwrap();
        assert!(replaced.starts_with("HTTP/1.1 414 URI Too Long\r\n"));
        assert!(replaced.contains("application/problem+json"));
        assert!(replaced.ends_with('}'));
        let header = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement(header).is_some());
        // With a body (a handler's own answer) or another status: untouched.
        assert!(replacement(b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 12\r\n\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n").is_none());
    }
}
