//! Frame-level capture of a response body up to a cap, and the body the client then receives.
//!
//! Invariants (checked by the capture proptest):
//! - The captured data is a prefix of the handler's data and never longer than the cap.
//! - `Within` means the whole body was read and it is at most `cap` bytes; its data frames are
//!   exactly the handler's data.
//! - `Overflow` pins the captured prefix at exactly `cap` bytes: the frame that crosses the cap is
//!   split with `Bytes::split_to`, which shares the allocation, so the part past the cap is
//!   never copied; it is handed back ahead of the still unread rest of the body.
//! - Trailer frames are kept in order for the live client; they are never part of the cached data.
//! - The concatenation of what [`LiveBody`] yields after a capture is, frame for frame, what the
//!   handler's body yielded (its error included): the client gets exactly the handler's bytes.

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The type-erased body the layer passes around (Send, not Sync, like axum's).
pub type BoxBody = UnsyncBoxBody<Bytes, BoxError>;

/// What reading a body up to the cap found.
pub enum Capture {
    /// The body ended within the cap. `data` is its complete data; `frames` replays it live.
    Within {
        frames: Vec<Frame<Bytes>>,
        data: Bytes,
    },
    /// The body is longer than the cap. `frames` hold exactly `cap` data bytes; `remainder` is
    /// the crossing frame's tail (shared, not copied); `rest` is the unread body.
    Overflow {
        frames: Vec<Frame<Bytes>>,
        remainder: Bytes,
        rest: BoxBody,
    },
    /// The body failed before it ended within the cap; `frames` is what came before the error.
    Failed {
        frames: Vec<Frame<Bytes>>,
        error: BoxError,
    },
}

/// Reads frames until the body ends, fails, or its data crosses `cap`.
pub async fn capture_up_to_cap(mut body: BoxBody, cap: usize) -> Capture {
    let mut frames = Vec::new();
    let mut captured_bytes = 0usize;
    loop {
        match body.frame().await {
            None => {
                return Capture::Within {
                    data: concat_data(&frames, captured_bytes),
                    frames,
                }
            }
            Some(Err(error)) => return Capture::Failed { frames, error },
            Some(Ok(frame)) => match frame.into_data() {
                Ok(mut data) => {
                    if captured_bytes + data.len() > cap {
                        // The crossing frame: keep exactly what fits, hand the tail on unshared-copy.
                        let prefix = data.split_to(cap - captured_bytes);
                        if !prefix.is_empty() {
                            frames.push(Frame::data(prefix));
                        }
                        return Capture::Overflow {
                            frames,
                            remainder: data,
                            rest: body,
                        };
                    }
                    captured_bytes += data.len();
                    if !data.is_empty() {
                        frames.push(Frame::data(data));
                    }
                }
                // Trailers (or a future frame kind): live only, never cached.
                Err(other) => frames.push(other),
            },
        }
    }
}

fn concat_data(frames: &[Frame<Bytes>], total: usize) -> Bytes {
    let mut data_frames = frames.iter().filter_map(Frame::data_ref);
    // One data frame needs no copy at all.
    if frames.iter().filter(|frame| frame.is_data()).count() == 1 {
        return data_frames.next().cloned().unwrap_or_default();
    }
    let mut buffer = BytesMut::with_capacity(total);
    for data in data_frames {
        buffer.extend_from_slice(data);
    }
    buffer.freeze()
}

/// The body the layer returns: queued frames first, then an optional error, then the optional
/// rest of the handler's body, polled live.
pub struct LiveBody {
    queued: VecDeque<Frame<Bytes>>,
    error: Option<BoxError>,
    rest: Option<BoxBody>,
}

impl LiveBody {
    pub fn empty() -> LiveBody {
        LiveBody {
            queued: VecDeque::new(),
            error: None,
            rest: None,
        }
    }

    pub fn full(data: Bytes) -> LiveBody {
        let mut body = LiveBody::empty();
        if !data.is_empty() {
            body.queued.push_back(Frame::data(data));
        }
        body
    }

    /// The handler's body, untouched (non-2xx responses and requests the layer does not cover).
    pub fn passthrough(body: BoxBody) -> LiveBody {
        LiveBody {
            queued: VecDeque::new(),
            error: None,
            rest: Some(body),
        }
    }

    /// Replays a capture: every frame the capture read, then whatever the handler has not yet sent.
    pub fn after_capture(capture: Capture) -> LiveBody {
        match capture {
            Capture::Within { frames, .. } => LiveBody {
                queued: frames.into(),
                error: None,
                rest: None,
            },
            Capture::Overflow {
                frames,
                remainder,
                rest,
            } => {
                let mut queued: VecDeque<Frame<Bytes>> = frames.into();
                if !remainder.is_empty() {
                    queued.push_back(Frame::data(remainder));
                }
                LiveBody {
                    queued,
                    error: None,
                    rest: Some(rest),
                }
            }
            Capture::Failed { frames, error } => LiveBody {
                queued: frames.into(),
                error: Some(error),
                rest: None,
            },
        }
    }
}

impl Body for LiveBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(frame) = self.queued.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(error) = self.error.take() {
            return Poll::Ready(Some(Err(error)));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(context),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.queued.is_empty()
            && self.error.is_none()
            && self.rest.as_ref().is_none_or(|rest| rest.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let queued: u64 = self
            .queued
            .iter()
            .filter_map(Frame::data_ref)
            .map(|data| data.len() as u64)
            .sum();
        match (&self.rest, &self.error) {
            (None, None) => SizeHint::with_exact(queued),
            (Some(rest), None) => {
                let inner = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower() + queued);
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper + queued);
                }
                hint
            }
            _ => SizeHint::new(),
        }
    }
}
