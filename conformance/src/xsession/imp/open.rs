//! The derived checks' sessions on xsession's one-way inboxes, opened the way the
//! hand-written checks open theirs: the registry, the tokens and the suite's own inbox are
//! this suite's; what the session carries is the derived suite's.
//!
//! Playing the sender, the session is one connection to the launched recipient's ipcPath,
//! written by the suite; what the session reads is the recipient's answers, which come on
//! connections it dials to the suite's inbox (the frames' `from`), and it ends when the
//! recipient closes the connection the suite dialed; every socket of the inbox is a `from`
//! the session hears ([`Ctx::alternates`]). Playing the recipient, the session is
//! the first connection the launched sender dials to the suite's inbox, read to its end;
//! the suite writes nothing on it (the listener never writes, §2).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use contract_transport::conn::Conn;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::unix::OwnedReadHalf;
use tokio::task::JoinHandle;

use super::{Inbox, RxSetup, UnixStream, env, open_rx, open_tx_with};
use crate::session::{Again, Ctx, Peer};
use crate::{BodyFutureOf, Failure};

/// Sockets of the suite's inbox, each a `from` whose statuses reach the session: a derived
/// rate check spreads its messages over them so that the per-sender bucket refuses none
/// (a check needing more skips, saying how many).
const FROMS: usize = 4;

/// Bytes of answers buffered for the session before the forwarder waits for its reader.
const ANSWERS_BUFFER: usize = 1 << 16;

pub(in crate::xsession) fn open_session(cx: &mut Ctx) -> BodyFutureOf<'_, Peer> {
    Box::pin(async move {
        match cx.role.as_str() {
            "sender" => as_sender(cx).await,
            _ => as_recipient(cx).await,
        }
    })
}

async fn as_sender(cx: &mut Ctx) -> Result<Peer, Failure> {
    let env = env(cx)?;
    let t = open_tx_with(cx, env, FROMS).await?;
    let ipc = t.ipc();
    let stream = connect(cx, &ipc).await?;
    cx.again = Some(again_at(ipc));
    let (rd, wr) = stream.into_split();
    let (answers, feed) = tokio::io::duplex(ANSWERS_BUFFER);
    // The examples the derived suite writes from stand for this session's values.
    let wire = cx.wire.clone();
    let alias = |method: &str, pointer: &str, to: Option<&str>| {
        let example = crate::derived::example(wire.contract(), method, "sender")?;
        Some((example.pointer(pointer)?.clone(), Value::from(to?)))
    };
    let path = t.inbox.path();
    cx.aliases = [
        alias("auth", "/token", t.rec.token.as_deref()),
        alias("user", "/from", Some(&path)),
        alias("user", "/replyToken", Some(&t.inbox.token)),
        alias("user", "/toSessionId", Some(&t.rec.session_id)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let froms = t
        .inbox
        .paths
        .iter()
        .map(|p| Value::from(p.display().to_string()));
    cx.alternates = vec![("/from".into(), froms.collect())];
    let wire = cx.wire.clone();
    let task = forward(t.inbox, rd, feed, move |line: &[u8]| {
        let m = wire.decode(&t.env.channel, "recipient", line, None);
        m.is_ok_and(|m| m.method.as_deref() == Some("auth"))
    });
    cx.hold(Forward(tokio::spawn(task)));
    cx.peer_on(Conn::Stream(Box::new(tokio::io::join(answers, wr))))
}

async fn connect(cx: &Ctx, ipc: &str) -> Result<UnixStream, Failure> {
    tokio::time::timeout(cx.opts.deadline, UnixStream::connect(ipc))
        .await
        .map_err(|_| Failure::new(format!("connecting to {ipc} timed out")))?
        .map_err(|e| Failure::new(format!("cannot connect to {ipc}: {e}")))
}

/// One more connection to the launched recipient's inbox: its statuses come to the first
/// session's (the suite's inbox is one), and the listener never writes on it (§2), so
/// what it reads is its end.
fn again_at(ipc: String) -> Again {
    Box::new(move |cx: &mut Ctx| {
        let ipc = ipc.clone();
        Box::pin(async move {
            let stream = connect(cx, &ipc).await?;
            cx.peer_on(Conn::Stream(Box::new(stream)))
        })
    })
}

/// Copy every line that reaches the suite's inbox into the session, until the recipient
/// closes the connection the suite dialed (the session's end). A connection's auth line
/// (`is_auth`) stays out: it opens that connection, not the session's, and the hand-written
/// `xsession.2.one-way` judges it.
async fn forward(
    mut inbox: Inbox,
    mut dialed: OwnedReadHalf,
    mut feed: DuplexStream,
    is_auth: impl Fn(&[u8]) -> bool,
) {
    let mut buf = [0u8; 512];
    loop {
        tokio::select! {
            n = dialed.read(&mut buf) => match n {
                // The listener never writes (§2): bytes are read only to see its close.
                Ok(n) if n > 0 => continue,
                _ => return,
            },
            conn = inbox.rx.recv() => {
                let Some(conn) = conn else { return };
                let skip = conn.lines.first().is_some_and(|l| is_auth(l));
                for line in conn.lines.iter().skip(usize::from(skip)) {
                    let written = async {
                        feed.write_all(line).await?;
                        feed.write_all(b"\n").await
                    };
                    if written.await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Ends the forwarder with the check.
struct Forward(JoinHandle<()>);

impl Drop for Forward {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn as_recipient(cx: &mut Ctx) -> Result<Peer, Failure> {
    let mut rx = open_rx(cx, RxSetup::default(), &|_, _, _| Ok(Vec::new())).await?;
    let until = rx.env.soon();
    let Some(conn) = rx.inbox.next(until).await else {
        return Err(Failure::new(format!(
            "the sender dialed the suite's inbox within {:?} with no connection",
            rx.env.wait
        )));
    };
    // The one line the suite cannot hand the session: the cap is the codec's.
    if let super::End::TooLong(e, head) = &conn.end {
        return Err(
            Failure::new(format!("the sender wrote a line over lineMax: {e}"))
                .with("the start of the line", head),
        );
    }
    let mut read = Vec::new();
    for line in &conn.lines {
        read.extend_from_slice(line);
        read.push(b'\n');
    }
    cx.hold(rx);
    let io = tokio::io::join(io::Cursor::new(read), NeverWrites);
    cx.peer_on(Conn::Stream(Box::new(io)))
}

/// The listener's side of an accepted connection, on which it never writes (§2): a write
/// is the suite's own bug, refused rather than lost.
struct NeverWrites;

impl AsyncWrite for NeverWrites {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::Error::other(
            "suite bug: the listener never writes on an accepted connection",
        )))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
