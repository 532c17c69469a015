//! The capture invariant, over random frame sequences whose lengths cluster at cap - 1, cap and
//! cap + 1 with a small cap: what is cached is the complete body or nothing, the prefix is cut at
//! exactly the cap, and the live client gets the handler's frames unchanged, error included.
//!
//! The seed is printed; rerun a failure with CAPTURE_SEED=<seed>.

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use oncecheck_idempotency::{capture_up_to_cap, BoxBody, BoxError, Capture, LiveBody};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

#[derive(Debug, Clone)]
struct Case {
    cap: usize,
    frame_lengths: Vec<usize>,
    /// Fail after this many data frames (None: the body ends normally).
    error_after_frames: Option<usize>,
    trailers: bool,
}

/// Splits `total` bytes into frames, some empty, and places an optional error and trailers.
fn case() -> impl Strategy<Value = Case> {
    (1usize..=8)
        .prop_flat_map(|cap| {
            let total = prop_oneof![
                Just(cap.saturating_sub(1)),
                Just(cap),
                Just(cap + 1),
                0..=3 * cap,
                Just(10 * cap),
            ];
            (
                Just(cap),
                total,
                proptest::collection::vec(0usize..=4, 1..6),
                any::<bool>(),
                any::<Option<u8>>(),
            )
        })
        .prop_map(|(cap, total, cuts, trailers, error)| {
            // Turn the cut list into frame lengths summing to `total`.
            let mut frame_lengths = Vec::new();
            let mut left = total;
            for cut in cuts {
                let length = if cut == 0 {
                    0
                } else {
                    (left * cut / 5).max(1).min(left)
                };
                frame_lengths.push(length);
                left -= length;
            }
            frame_lengths.push(left);
            let error_after_frames = error.map(|at| usize::from(at) % (frame_lengths.len() + 1));
            Case {
                cap,
                frame_lengths,
                error_after_frames,
                trailers: trailers && error.is_none(),
            }
        })
}

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Data(Vec<u8>),
    Trailers(HeaderMap),
    Error,
}

fn events(case: &Case) -> Vec<Event> {
    let mut events = Vec::new();
    let mut offset = 0usize;
    for (index, length) in case.frame_lengths.iter().enumerate() {
        if case.error_after_frames == Some(index) {
            events.push(Event::Error);
            return events;
        }
        events.push(Event::Data(
            (offset..offset + length).map(|byte| byte as u8).collect(),
        ));
        offset += length;
    }
    if case.error_after_frames == Some(case.frame_lengths.len()) {
        events.push(Event::Error);
        return events;
    }
    if case.trailers {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-digest", "d".parse().unwrap());
        events.push(Event::Trailers(trailers));
    }
    events
}

fn body_of(events: &[Event]) -> BoxBody {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = events
        .iter()
        .map(|event| match event {
            Event::Data(data) => Ok(Frame::data(Bytes::from(data.clone()))),
            Event::Trailers(trailers) => Ok(Frame::trailers(trailers.clone())),
            Event::Error => Err("scripted error".into()),
        })
        .collect();
    StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
}

/// Normalises a frame sequence: drops empty data frames and joins adjacent data, so a split
/// frame compares equal to the original.
fn normalise(events: Vec<Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for event in events {
        match (out.last_mut(), event) {
            (_, Event::Data(data)) if data.is_empty() => {}
            (Some(Event::Data(previous)), Event::Data(data)) => previous.extend(data),
            (_, event) => out.push(event),
        }
    }
    out
}

async fn drain(mut body: LiveBody) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => out.push(Event::Data(data.to_vec())),
                Err(frame) => out.push(Event::Trailers(frame.into_trailers().unwrap())),
            },
            Err(_) => {
                out.push(Event::Error);
                break;
            }
        }
    }
    out
}

async fn check(case: Case) -> Result<(), TestCaseError> {
    let expected = events(&case);
    let all_data: Vec<u8> = expected
        .iter()
        .filter_map(|event| match event {
            Event::Data(data) => Some(data.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let failed = expected.contains(&Event::Error);
    let capture = capture_up_to_cap(body_of(&expected), case.cap).await;
    match &capture {
        Capture::Within { data, frames } => {
            prop_assert!(!failed, "a failing body is never Within");
            prop_assert!(data.len() <= case.cap);
            prop_assert_eq!(&data[..], &all_data[..], "Within holds the complete body");
            prop_assert_eq!(
                frames.iter().any(|frame| frame.is_trailers()),
                case.trailers
            );
        }
        Capture::Overflow {
            frames, remainder, ..
        } => {
            prop_assert!(all_data.len() > case.cap);
            let prefix: Vec<u8> = frames
                .iter()
                .filter_map(|frame| frame.data_ref())
                .flat_map(|data| data.to_vec())
                .collect();
            prop_assert_eq!(
                prefix.len(),
                case.cap,
                "the prefix is cut at exactly the cap"
            );
            prop_assert_eq!(&prefix[..], &all_data[..case.cap]);
            prop_assert!(
                !remainder.is_empty(),
                "the crossing frame's tail is handed on"
            );
        }
        Capture::Failed { frames, .. } => {
            prop_assert!(failed);
            let prefix: usize = frames
                .iter()
                .filter_map(|frame| frame.data_ref())
                .map(|data| data.len())
                .sum();
            prop_assert!(prefix <= case.cap);
        }
    }
    let delivered = drain(LiveBody::after_capture(capture)).await;
    prop_assert_eq!(
        normalise(delivered),
        normalise(expected),
        "the live body is the handler's body"
    );
    Ok(())
}

#[test]
fn capture_keeps_the_whole_body_or_cuts_at_exactly_the_cap() {
    let seed: u64 = std::env::var("CAPTURE_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("capture proptest seed: {seed} (rerun with CAPTURE_SEED={seed})");
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 512,
            failure_persistence: None,
            ..Config::default()
        },
        rng,
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = runner.run(&case(), |case| runtime.block_on(check(case)));
    if let Err(error) = result {
        panic!("capture invariant broken with CAPTURE_SEED={seed}: {error}");
    }
}

/// The live body's size hint is what the client's framing reads (a content length when it is
/// exact, chunks otherwise): exact after a capture that read the whole body, and the queued
/// bytes plus the unread rest's own hint after one that crossed the cap.
#[test]
fn the_live_body_hints_its_exact_size_when_the_handler_s_body_does() {
    let exact = |body: &LiveBody| {
        let hint = http_body::Body::size_hint(body);
        (hint.lower(), hint.upper())
    };
    assert_eq!(
        exact(&LiveBody::full(Bytes::from_static(b"abc"))),
        (3, Some(3))
    );
    assert_eq!(exact(&LiveBody::empty()), (0, Some(0)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let full = |text: &'static str| -> BoxBody {
        http_body_util::Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync()
    };
    let within = runtime.block_on(capture_up_to_cap(full("abcdef"), 8));
    assert_eq!(exact(&LiveBody::after_capture(within)), (6, Some(6)));
    // Two frames: the first crosses a cap of 4 (4 captured, 2 handed back), the second unread.
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = vec![
        Ok(Frame::data(Bytes::from_static(b"abcdef"))),
        Ok(Frame::data(Bytes::from_static(b"ghijk"))),
    ];
    let two_frames: BoxBody = StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync();
    let overflow = runtime.block_on(capture_up_to_cap(two_frames, 4));
    let live = LiveBody::after_capture(overflow);
    // The stream body hints nothing exact: lower 0, no upper; the queued 6 bytes are known.
    assert_eq!(exact(&live), (6, None));
    let over_full = runtime.block_on(capture_up_to_cap(full("abcdefghij"), 4));
    // One frame crossed the cap whole: all 10 bytes are queued, the rest (empty) is exact.
    assert_eq!(exact(&LiveBody::after_capture(over_full)), (10, Some(10)));
}
