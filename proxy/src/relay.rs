//! The tokio layer: accept, connect upstream, pump bytes both ways through the inspector.
//!
//! Each direction reads into one fixed buffer and writes it out before reading
//! again, so a slow receiver backpressures the sender with no queue in between.
//! The inspector sees a copy of every chunk; in observe mode nothing is held back.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

use crate::conn::{BoxIo, Conn};
use crate::endpoint::{Endpoint, Incoming, Listener, Options};
use crate::inspect::{Dir, Inspector};
use crate::log::Logger;
use contract::wire::Wire;

/// Bytes read per chunk in each direction.
pub const CHUNK: usize = 64 * 1024;

/// One route: a listener, an upstream, and how to inspect what passes.
#[derive(Clone)]
pub struct Route {
    /// Name shown in logs.
    pub name: String,
    /// The contract, compiled.
    pub wire: Arc<Wire>,
    /// Channel of the contract this route carries.
    pub channel: String,
    /// Party that connects to the listener.
    pub client: String,
    /// Party behind the upstream.
    pub server: String,
    /// Where to connect.
    pub upstream: Endpoint,
}

/// Accept connections until the listener fails, relaying each.
pub async fn serve(listener: Listener, route: Route, log: Arc<Logger>) -> std::io::Result<()> {
    loop {
        let Incoming::Conn {
            conn: Conn::Stream(conn),
            ..
        } = listener.accept().await?
        else {
            log.note(&route.name, "only byte-stream listeners are relayed so far");
            continue;
        };
        let route = route.clone();
        let log = log.clone();
        tokio::spawn(async move {
            if let Err(e) = relay(conn, &route, &log).await {
                log.note(&route.name, &e);
            }
        });
    }
}

/// Relay one accepted connection to a fresh upstream connection.
pub async fn relay(client: BoxIo, route: &Route, log: &Arc<Logger>) -> Result<(), String> {
    let upstream = match route.upstream.connect(&Options::default(), None).await {
        Ok(c) => match c.conn {
            Conn::Stream(s) => s,
            Conn::Messages(_) => return Err("message upstreams are not relayed yet".into()),
        },
        Err(e) => return Err(e.to_string()),
    };
    let inspector = Inspector::new(
        route.wire.clone(),
        &route.name,
        &route.channel,
        &route.client,
        &route.server,
    )
    .map_err(|e| e.to_string())?;
    let inspector = Arc::new(Mutex::new(inspector));
    let (cr, cw) = tokio::io::split(client);
    let (ur, uw) = tokio::io::split(upstream);
    let up = pump(cr, uw, Dir::Up, inspector.clone(), log.clone());
    let down = pump(ur, cw, Dir::Down, inspector, log.clone());
    let (a, b) = tokio::join!(up, down);
    a.and(b).map_err(|e| e.to_string())
}

async fn pump(
    mut from: ReadHalf<BoxIo>,
    mut to: WriteHalf<BoxIo>,
    dir: Dir,
    inspector: Arc<Mutex<Inspector>>,
    log: Arc<Logger>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            // Half-close travels through: xsession senders end their one message this way.
            to.shutdown().await?;
            return Ok(());
        }
        let events = match inspector.lock() {
            Ok(mut i) => i.feed(dir, &buf[..n], Instant::now()),
            Err(_) => Vec::new(),
        };
        for e in &events {
            log.event(e);
        }
        to.write_all(&buf[..n]).await?;
    }
}
