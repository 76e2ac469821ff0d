//! `contract::Connection` over an in-memory duplex: the framing's `frameDeadline`
//! runs from a frame's first byte (idleness is no violation, progress does not
//! reset it), and a method's cap holds for the replies to it. Time is paused,
//! so the contract's real deadline is waited out instantly.

use std::sync::Arc;
use std::time::Duration;

use contract::Connection;
use contract::io::IoError;
use contract::wire::{FrameError, ViolationClass, Wire};
use serde_json::json;
use tokio::io::{AsyncWriteExt, DuplexStream};

fn rukh() -> Arc<Wire> {
    let c = contract::builtin("rukh").expect("rukh");
    Arc::new(Wire::new(Arc::new(c)).expect("wire"))
}

/// The core's end as a `Connection`, and the extension's raw end.
fn pair() -> (Connection<DuplexStream>, DuplexStream, Duration) {
    let wire = rukh();
    let (_, deadline) = wire.frame_deadline("ipc").expect("rukh names one");
    let (a, b) = tokio::io::duplex(1 << 16);
    let conn = Connection::new(a, wire, "ipc", "core", "extension").expect("connection");
    (conn, b, deadline)
}

fn frame(v: &serde_json::Value) -> Vec<u8> {
    let body = serde_json::to_vec(v).expect("json");
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn log() -> serde_json::Value {
    json!({"jsonrpc":"2.0","method":"rukh.log","params":{"level":"info","message":"hi"}})
}

#[tokio::test(start_paused = true)]
async fn a_frame_left_incomplete_fails_at_the_deadline() {
    let (mut conn, mut ext, deadline) = pair();
    let bytes = frame(&log());
    ext.write_all(&bytes[..bytes.len() - 1])
        .await
        .expect("write");
    let start = tokio::time::Instant::now();
    // Bounded, so a missing deadline fails here instead of hanging the test.
    match tokio::time::timeout(deadline * 3, conn.recv())
        .await
        .expect("the connection gives up within its deadline")
    {
        Err(IoError::Frame(FrameError::Incomplete { limit, after, .. })) => {
            assert_eq!(limit, "incompleteFrameSeconds");
            assert_eq!(after, deadline);
        }
        other => panic!("want Incomplete, got {other:?}"),
    }
    assert_eq!(start.elapsed(), deadline, "exactly the contract's deadline");
}

#[tokio::test(start_paused = true)]
async fn progress_does_not_reset_the_clock() {
    let (mut conn, mut ext, deadline) = pair();
    let bytes = frame(&log());
    let step = deadline / 4;
    let writer = tokio::spawn(async move {
        // One byte per quarter deadline: always progressing, never complete in time.
        for b in bytes {
            ext.write_all(&[b]).await.expect("write");
            tokio::time::sleep(step).await;
        }
        ext
    });
    let r = tokio::time::timeout(deadline * 3, conn.recv())
        .await
        .expect("the connection gives up within its deadline");
    assert!(
        matches!(r, Err(IoError::Frame(FrameError::Incomplete { .. }))),
        "{r:?}"
    );
    writer.abort();
}

#[tokio::test(start_paused = true)]
async fn idleness_between_frames_is_no_violation() {
    let (mut conn, mut ext, deadline) = pair();
    tokio::time::sleep(deadline * 10).await;
    ext.write_all(&frame(&log())).await.expect("write");
    let m = conn.recv().await.expect("valid").expect("a message");
    assert_eq!(m.method.as_deref(), Some("rukh.log"));
    // A frame split across writes well inside the deadline is fine too.
    let bytes = frame(&log());
    let (head, tail) = bytes.split_at(3);
    ext.write_all(head).await.expect("write");
    let tail = tail.to_vec();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(deadline / 2).await;
        ext.write_all(&tail).await.expect("write");
        ext
    });
    conn.recv().await.expect("valid").expect("a message");
    let _ext = writer.await.expect("writer");
}

#[tokio::test(start_paused = true)]
async fn a_reply_over_its_methods_cap_is_refused() {
    let (mut conn, mut ext, _) = pair();
    let init = contract::builtin("rukh").expect("rukh").methods["rukh.initialize"].examples[0]
        .message
        .clone();
    conn.send(&init).await.expect("the core's initialize");
    let cap = contract::wire::framing::limit_bytes(
        &contract::builtin("rukh").expect("rukh"),
        "lifecyclePayloadMax",
    )
    .expect("cap") as usize;
    let refusal =
        json!({"jsonrpc":"2.0","id":init["id"],"error":{"code":-32003,"message":"x".repeat(cap)}});
    ext.write_all(&frame(&refusal)).await.expect("write");
    match conn.recv().await {
        Err(IoError::Violation(v)) => {
            assert_eq!(v.class, ViolationClass::Oversize, "{}", v.reason);
            let p = v.partial.expect("partial");
            assert_eq!(p.method.as_deref(), Some("rukh.initialize"));
        }
        other => panic!("want an oversize violation, got {other:?}"),
    }
}

/// A contract written back out loads again as the same contract, so a recording can
/// carry the document it was made with (contract-proxy `replay` of a contract file).
#[test]
fn every_contract_round_trips_through_its_model() {
    for name in contract::builtin_names() {
        let c = contract::builtin(name).expect("builtin");
        let text = serde_json::to_string(&c).expect("serialize");
        let again = contract::from_str(name, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(again, c, "{name}");
    }
}

/// An oversize length prefix, fed a few bytes at a time: the codec reports it once, drops
/// the announced bytes without buffering them (the buffer never holds more than one
/// read), and decodes the frame after it; a plain `JsonCodec` ends there.
#[test]
fn skip_oversize_drops_the_announced_bytes_and_goes_on() {
    use bytes::BytesMut;
    use contract::io::{JsonCodec, SkipOversize};
    use tokio_util::codec::Decoder;
    let c = contract::builtin("kernel").expect("kernel");
    let wire = Wire::new(Arc::new(c)).expect("wire");
    let codec = JsonCodec::for_channel(&wire, "control").expect("a JSON stream");
    let max = wire.limits().cap("controlPayloadMax").expect("the cap");
    let len = max + 1;
    let mut stream = (len as u32).to_be_bytes().to_vec();
    stream.extend(std::iter::repeat_n(b'x', len as usize));
    let next = frame(&json!({"after": true}));
    stream.extend_from_slice(&next);
    let mut plain = codec.clone();
    let mut buf = BytesMut::from(&stream[..64]);
    assert!(matches!(
        plain.decode(&mut buf),
        Err(FrameError::Oversize { .. })
    ));

    let mut skipping = SkipOversize::new(codec);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    for chunk in stream.chunks(4096) {
        buf.extend_from_slice(chunk);
        while let Some(item) = skipping.decode(&mut buf).expect("no stream error") {
            items.push(item);
        }
        assert!(
            buf.len() <= 4096 + next.len(),
            "nothing of the skipped frame is kept"
        );
    }
    assert!(skipping.decode_eof(&mut buf).expect("clean end").is_none());
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(
        matches!(&items[0], Err(FrameError::Oversize { len: l, max: m }) if *l == len && *m == max)
    );
    assert_eq!(items[1].as_ref().expect("the next frame")[..], next[4..]);
}
