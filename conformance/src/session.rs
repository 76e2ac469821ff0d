//! Sessions with the implementation under test: how the target is reached
//! ([`Target`]), the per-check context that opens fresh sessions and cleans up
//! after them ([`Ctx`]), and the suite's own end of a session ([`Peer`]).
//!
//! Who listens follows the contract: the party named by the first channel's
//! `connects` dials, the other party listens (kernel: the core dials both of
//! the shell's channels, K-1). A launched target (`exec:CMD` with `{control}`
//! and `{data}` placeholders) is started afresh for every session and handed
//! fresh endpoints, in a private directory, to listen on or dial, and a fresh
//! `{token}` where its channel's upgrade wants a Bearer token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use contract::io::{JsonCodec, SkipOversize};
use contract::model::{ActionKind, Kind};
use contract::wire::framing::BinaryCodec;
use contract::wire::{
    BinaryFrame, ChannelCodec, CloseFrame, Correlator, FrameError, Message, Violation,
    ViolationClass, Wire,
};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio_util::codec::{Decoder, Encoder, Framed};

use super::{Failure, Opts};
use crate::judge::Judge;
use contract_transport::conn::{BoxIo, BoxMsg, Conn, Hello, Msg};
use contract_transport::endpoint::tls::TlsOpts;
use contract_transport::endpoint::{Endpoint, Incoming as Accepted, Listener, Options};

#[cfg(unix)]
use contract_transport::endpoint::process::{ChildProc, spawn_exec};

/// How long a launched child gets to exit after SIGTERM before SIGKILL.
#[cfg(unix)]
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long a launched implementation may take to connect, and to give its first answer:
/// both also pay for its start-up (an interpreter importing its SDK on a loaded machine),
/// which is not the protocol's latency. Later waits get `--deadline`.
pub(crate) const STARTUP: Duration = Duration::from_secs(10);
/// Pause between dial attempts while a launched implementation is still binding.
const DIAL_RETRY: Duration = Duration::from_millis(50);
/// Messages a session keeps for post-hoc checks; more are counted, not kept.
const LOG_MAX: usize = 10_000;

/// Socket kind for the endpoints handed to a launched target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SocketKind {
    /// Unix sockets in a private directory.
    Unix,
    /// TCP on loopback.
    Tcp,
    /// WebSocket on loopback (`ws://127.0.0.1:PORT/`): a contract whose channel is a
    /// WebSocket, with the close frames its close codes travel in.
    Ws,
}

/// `ws://127.0.0.1:PORT/` (port 0: any, once bound): what a launched target is handed.
#[cfg(unix)]
fn loopback_ws(port: u16) -> Endpoint {
    Endpoint::Ws {
        tls: false,
        addr: format!("127.0.0.1:{port}"),
        path: "/".into(),
    }
}

/// Where the implementation under test is, as the command line named it.
pub enum Target {
    /// `exec:CMD` with `{control}`/`{data}` placeholders: started per session.
    Launch {
        /// The command, placeholders unreplaced.
        argv: Vec<String>,
        /// Whether the suite listens (the implementation dials in).
        suite_listens: bool,
        /// Socket kind of the handed endpoints.
        sockets: SocketKind,
    },
    /// `exec:`/`exec-fd:` without placeholders: the control channel is the child's stdio or fd.
    Pipe(Endpoint),
    /// The implementation listens here; the suite dials per session.
    Dial {
        /// Control channel endpoint.
        control: Endpoint,
        /// Second channel endpoint.
        data: Option<Endpoint>,
    },
    /// `exec:CMD` with placeholders of the contract's own suite (any `{name}` but
    /// `{control}`/`{data}`, e.g. toolchannel's `{url}`, `{token}`): the suite fills them in
    /// and starts the command itself, per session, with [`Ctx::spawn`].
    Template {
        /// The command, placeholders unreplaced.
        argv: Vec<String>,
    },
    /// The suite listens here; the implementation dials in per session.
    Accept {
        /// Control channel listener.
        control: Arc<Listener>,
        /// Second channel listener.
        data: Option<Arc<Listener>>,
    },
}

/// The channels a session uses: the first JSON channel, then the binary one if any.
fn channels(wire: &Wire) -> (String, Option<String>) {
    let c = wire.contract();
    let control = c
        .channels
        .iter()
        .find(|(_, ch)| ch.binding.is_some())
        .or_else(|| c.channels.first())
        .map(|(n, _)| n.clone())
        .unwrap_or_default();
    let data = c
        .channels
        .iter()
        .find(|(n, _)| **n != control)
        .map(|(n, _)| n.clone());
    (control, data)
}

/// Endpoint options for the contract (its QUIC and TLS ALPN id) with `tls`.
pub(crate) fn endpoint_options(wire: &Wire, tls: &TlsOpts) -> Options {
    Options::for_contract(wire.contract(), "", tls.clone())
}

const PLACEHOLDERS: [&str; 2] = ["{control}", "{data}"];

/// Whether `argv` holds a `{name}` placeholder (lower-case letters and `_`) other than
/// [`PLACEHOLDERS`] and `{token}` (filled in for any launched target): a command the
/// contract's suite launches itself ([`Target::Template`]).
pub fn has_template_placeholder(argv: &[String]) -> bool {
    argv.iter().any(|a| {
        a.split('{').skip(1).any(|rest| {
            rest.split_once('}').is_some_and(|(name, _)| {
                !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                    && name != "control"
                    && name != "data"
                    && name != "token"
            })
        })
    })
}

impl Target {
    /// Resolve `--target`/`--target-data` for a suite playing `play`.
    pub async fn from_args(
        wire: &Wire,
        play: &str,
        (target, target_data): (&str, Option<&str>),
        sockets: SocketKind,
        tls: &TlsOpts,
    ) -> Result<Self, String> {
        let (control_ch, _) = channels(wire);
        let connects = wire
            .contract()
            .channels
            .get(&control_ch)
            .and_then(|c| c.connects.clone());
        let suite_dials = connects.as_deref().is_none_or(|p| p == play);
        let parse = |s: &str, flag: &str| -> Result<Endpoint, String> {
            s.parse::<Endpoint>().map_err(|e| format!("{flag}: {e}"))
        };
        let ep = parse(target, "--target")?;
        let data = target_data.map(|d| parse(d, "--target-data")).transpose()?;
        match ep {
            Endpoint::Exec(argv) if argv.iter().any(|a| PLACEHOLDERS.iter().any(|p| a.contains(p))) => {
                if data.is_some() {
                    return Err("--target-data goes with a dialed or listened target; a launched target gets {data}".into());
                }
                // A channel no party connects (rukh's socketpair) is listened on by the
                // suite: a launched command given an address dials it (`socat FD:3
                // {control}` bridging the end a core hands its extension).
                Ok(Target::Launch {
                    argv,
                    suite_listens: connects.as_deref().is_none_or(|p| p != play),
                    sockets,
                })
            }
            Endpoint::Exec(argv) if has_template_placeholder(&argv) => {
                if data.is_some() {
                    return Err("--target-data cannot go with a launched target".into());
                }
                Ok(Target::Template { argv })
            }
            Endpoint::ExecFd { ref argv, .. }
                if argv.iter().any(|a| PLACEHOLDERS.iter().any(|p| a.contains(p))) =>
            {
                Err("placeholders go with exec:CMD; exec-fd:N:CMD carries the control channel on fd N".into())
            }
            Endpoint::Exec(_) | Endpoint::ExecFd { .. } => {
                if data.is_some() {
                    return Err("--target-data cannot go with a pipe target: use exec:CMD with {control} and {data}".into());
                }
                Ok(Target::Pipe(ep))
            }
            Endpoint::Stdio | Endpoint::Fd(_) => Err(
                "--target stdio/fd:N is not supported: the suite needs a fresh session per check".into(),
            ),
            _ if suite_dials => Ok(Target::Dial { control: ep, data }),
            _ => {
                let opts = endpoint_options(wire, tls);
                let control = ep.listen(&opts).await.map_err(|e| e.to_string())?;
                let data = match data {
                    Some(d) => Some(Arc::new(d.listen(&opts).await.map_err(|e| e.to_string())?)),
                    None => None,
                };
                eprintln!(
                    "contract-proxy: conformance: waiting for the implementation to dial {}{}",
                    control.local(),
                    data.as_ref()
                        .map(|d| format!(" and {}", d.local()))
                        .unwrap_or_default()
                );
                // One certificate per listener when self-signed: the implementation pins each.
                for l in std::iter::once(&control).chain(data.as_deref()) {
                    if let Some(fp) = l.fingerprint() {
                        eprintln!("contract-proxy: conformance: {} presents certificate SHA-256 {fp}", l.local());
                    }
                }
                Ok(Target::Accept {
                    control: Arc::new(control),
                    data,
                })
            }
        }
    }
}

/// How the current session was reached, to reach the same implementation again.
pub(crate) enum Link {
    Dial(Endpoint, Option<Endpoint>),
    Accept(Arc<Listener>, Option<Arc<Listener>>),
    Pipe,
}

/// What one check works with: the contract, the options, fresh sessions.
pub struct Ctx {
    /// The compiled contract.
    pub wire: Arc<Wire>,
    /// The party the suite plays.
    pub role: String,
    /// The party under test.
    pub other: String,
    /// Options.
    pub opts: Opts,
    target: Arc<Target>,
    #[cfg(unix)]
    children: Vec<ChildProc>,
    dirs: Vec<PathBuf>,
    last: Option<Link>,
    /// Context for a failure report (child exits, dropped log entries).
    pub notes: Vec<String>,
    /// What a derived check is about (see [`super::Check::subject`]).
    pub subject: Option<String>,
    /// A session the check leaves for the next one, which finds it here when it
    /// [`super::Check::shares`]; the runner keeps it only when the check passed.
    pub kept: Option<Kept>,
    /// How [`Ctx::open`] reaches a template target ([`Target::Template`]): the hook of the
    /// contract's hand-written suite, where the data cannot say how a session starts.
    pub opener: Option<Opener>,
    /// What a derived check that ended the session also expects of the implementation
    /// (rukh: the core exits as `execution_failed` says), set by the [`Opener`] that
    /// opened it.
    pub on_end: Option<EndHook>,
    /// The close code of the close frame that ended the derived check's session, for the
    /// [`Ctx::on_end`] hook (toolchannel: the worker exits as its own close code says).
    pub closed_code: Option<u16>,
    /// Values the contract's examples stand for in this session, set by the [`Opener`]
    /// that opened it (toolchannel: the example's session id is the one the launched
    /// worker was given): the derived checks write the second of each pair wherever a
    /// message they send from an example holds the first.
    pub aliases: Vec<(Value, Value)>,
    /// Further values of a member the session hears answers through as well, set by the
    /// [`Opener`] (xsession: each socket of the suite's inbox is a `from` its statuses come
    /// back to): a derived check that must vary a member a report is addressed to takes
    /// the values from here, each pointer with its values.
    pub alternates: Vec<(String, Vec<Value>)>,
    /// How to reach the implementation the last [`Ctx::open`] reached once more, set by
    /// the [`Opener`] that opened it where it can (xsession: the launched recipient's
    /// inbox, dialed again; toolchannel playing the host: the worker's next dial); without
    /// one, [`Ctx::open_again`] re-dials a dialed target and [`Ctx::next_dial`] takes a
    /// dialing one's next dial on the same listeners.
    pub again: Option<Again>,
    /// What lives as long as the sessions of this context (a launcher's helper socket).
    held: Vec<Kept>,
    /// The Bearer token of this session's upgrade: the `{token}` a launched target was
    /// given, or `--param token=…`.
    pub token: Option<String>,
    /// How [`Ctx::door`] reaches a template target's upgrade (the hand-written suite's hook).
    pub door: Option<crate::door::DoorHook>,
}

/// An [`Opener`]'s way to one more connection to the implementation it reached.
pub type Again = Box<dyn for<'a> Fn(&'a mut Ctx) -> super::BodyFutureOf<'a, Peer> + Send + Sync>;

/// A hand-written suite's hook that opens one session: launch a template target with its
/// placeholders filled in (or reach another the way the suite's protocol needs: a token on
/// an upgrade) and return the suite's end of the session.
/// What it must keep alive for the session it gives to [`Ctx::hold`].
pub type Opener = for<'a> fn(&'a mut Ctx) -> super::BodyFutureOf<'a, Peer>;

/// A hand-written suite's hook run after a derived check saw the session end as the
/// contract prescribes: what else the implementation must do then, in one line.
pub type EndHook = for<'a> fn(&'a mut Ctx) -> super::BodyFutureOf<'a, String>;

/// A session a check left for the next ([`Ctx::kept`]), of whatever type its suite uses.
/// The mutex only makes it `Sync`, as a context shared by reference across awaits must be:
/// one check at a time owns it.
pub struct Kept(std::sync::Mutex<Box<dyn std::any::Any + Send>>);

impl Kept {
    /// Keep `session`.
    pub fn new<T: Send + 'static>(session: T) -> Kept {
        Kept(std::sync::Mutex::new(Box::new(session)))
    }

    /// The session, if it is a `T`.
    pub fn take<T: 'static>(self) -> Option<T> {
        let any = self.0.into_inner().unwrap_or_else(|e| e.into_inner());
        any.downcast::<T>().ok().map(|b| *b)
    }
}

/// A private directory for one session's sockets.
#[cfg(unix)]
fn fresh_dir() -> Result<PathBuf, Failure> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for attempt in 0..16u32 {
        let dir = std::env::temp_dir().join(format!(
            "contract-conformance-{}-{stamp:x}-{attempt}",
            std::process::id()
        ));
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        match b.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(Failure::new(format!(
                    "cannot create a socket directory: {e}"
                )));
            }
        }
    }
    Err(Failure::new("cannot create a fresh socket directory"))
}

/// A value no other session has (a token, a session id), tagged for the logs.
pub(crate) fn fresh(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let nonce = nanos ^ (u64::from(std::process::id()) << 32);
    format!("conf-{tag}-{:012x}", nonce & 0xffff_ffff_ffff)
}

/// A loopback port nobody listens on right now (the implementation binds it next).
pub(crate) async fn free_port() -> Result<u16, Failure> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Failure::new(format!("cannot find a free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Failure::new(format!("cannot find a free port: {e}")))
}

/// The next connection on `l` within `wait` (one the listener turned away is skipped):
/// a byte stream, or a WebSocket upgrade not answered yet.
pub(crate) async fn next_on(l: &Listener, what: &str, wait: Duration) -> Result<Accepted, Failure> {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, l.accept()).await {
            Err(_) => {
                return Err(Failure::new(format!(
                    "the implementation did not connect the {what} to {} within {wait:?}",
                    l.local()
                )));
            }
            Ok(Err(e)) => return Err(Failure::new(format!("accepting the {what}: {e}"))),
            Ok(Ok(Accepted::Rejected { .. })) => continue,
            Ok(Ok(a)) => return Ok(a),
        }
    }
}

async fn accept_one(l: &Listener, what: &str, wait: Duration) -> Result<Conn, Failure> {
    let until = Instant::now() + wait;
    match next_on(l, &format!("{what} channel"), wait).await? {
        Accepted::Ws(p) => {
            let left = until.saturating_duration_since(Instant::now());
            let m = tokio::time::timeout(left, p.accept(None))
                .await
                .map_err(|_| Failure::new(format!("the {what} WebSocket handshake timed out")))?
                .map_err(|e| Failure::new(format!("the {what} WebSocket handshake: {e}")))?;
            Ok(Conn::Messages(m))
        }
        Accepted::Conn { conn, .. } => Ok(conn),
        Accepted::Rejected { .. } => Err(Failure::new("suite bug: a rejected connection")),
    }
}

/// Both channels over `link` (dialed, or accepted, control first) within `wait`.
async fn connect_both(
    link: &Link,
    (opts, hello): (&Options, Option<&Hello>),
    wait: Duration,
) -> Result<(Conn, Option<Conn>), Failure> {
    Ok(match link {
        Link::Dial(c, d) => (
            dial_retrying(c, (opts, hello), "control", wait).await?,
            match d {
                Some(d) => Some(dial_retrying(d, (opts, None), "data", wait).await?),
                None => None,
            },
        ),
        Link::Accept(c, d) => (
            accept_one(c, "control", wait).await?,
            match d {
                Some(d) => Some(accept_one(d, "data", wait).await?),
                None => None,
            },
        ),
        Link::Pipe => return Err(Failure::new("suite bug: a pipe is not reached twice")),
    })
}

/// The exit code of `child` once it has exited with one other than 0; never without a
/// child, or after a clean exit.
#[cfg(unix)]
async fn failed_exit(child: Option<&mut ChildProc>) -> i32 {
    if let Some(child) = child
        && let Ok(st) = child.wait().await
    {
        let code = contract_transport::endpoint::process::status_code(st);
        if code != 0 {
            return code;
        }
    }
    std::future::pending().await
}

#[cfg(not(unix))]
async fn failed_exit(_child: Option<&mut ()>) -> i32 {
    std::future::pending().await
}

async fn dial_retrying(
    ep: &Endpoint,
    (opts, hello): (&Options, Option<&Hello>),
    what: &str,
    wait: Duration,
) -> Result<Conn, Failure> {
    let until = Instant::now() + wait;
    loop {
        match ep.connect(opts, hello).await {
            Ok(c) => return Ok(c.conn),
            Err(e) if Instant::now() >= until => {
                return Err(Failure::new(format!(
                    "cannot connect the {what} channel to {ep} within {wait:?}: {e}"
                )));
            }
            Err(_) => tokio::time::sleep(DIAL_RETRY).await,
        }
    }
}

impl Ctx {
    /// The contract's limits with this run's time scale applied: what the implementation
    /// under test is expected to keep.
    pub fn limits(&self) -> contract::Limits {
        self.wire.limits().clone().time_scaled(self.opts.time_scale)
    }

    /// A context for one check.
    pub fn new(wire: Arc<Wire>, role: &str, other: &str, opts: Opts, target: Arc<Target>) -> Self {
        let token = opts.param("token").map(str::to_string);
        Ctx {
            wire,
            role: role.to_string(),
            other: other.to_string(),
            opts,
            target,
            #[cfg(unix)]
            children: Vec::new(),
            dirs: Vec::new(),
            last: None,
            notes: Vec::new(),
            subject: None,
            kept: None,
            opener: None,
            on_end: None,
            closed_code: None,
            aliases: Vec::new(),
            alternates: Vec::new(),
            again: None,
            held: Vec::new(),
            token,
            door: None,
        }
    }

    /// A deadline `self.opts.deadline` from now.
    pub fn soon(&self) -> Instant {
        Instant::now() + self.opts.deadline
    }

    fn peer(&self, control: Conn, data: Option<Conn>) -> Result<Peer, Failure> {
        Peer::new(&self.wire, &self.role, &self.other, control, data)
    }

    /// Open a fresh session with the implementation (launching it if the target says so),
    /// by the hand-written suite's [`Opener`] when it has one (it may hand back to
    /// [`Ctx::open_plain`] for a target it has nothing to add to).
    pub async fn open(&mut self) -> Result<Peer, Failure> {
        match self.opener {
            Some(open) => open(self).await,
            None => self.open_plain().await,
        }
    }

    /// [`Ctx::open`] without the suite's opener: the target reached as written.
    pub async fn open_plain(&mut self) -> Result<Peer, Failure> {
        let opts = endpoint_options(&self.wire, &self.opts.tls);
        let target = self.target.clone();
        match &*target {
            Target::Dial { control, data } => {
                let wait = self.opts.deadline;
                self.reach(Link::Dial(control.clone(), data.clone()), wait)
                    .await
            }
            Target::Accept { control, data } => {
                let wait = self.opts.deadline;
                self.reach(Link::Accept(control.clone(), data.clone()), wait)
                    .await
            }
            Target::Pipe(ep) => {
                let connected = ep
                    .connect(&opts, None)
                    .await
                    .map_err(|e| Failure::new(format!("cannot start {ep}: {e}")))?;
                #[cfg(unix)]
                if let Some(child) = connected.child {
                    self.children.push(child);
                }
                self.last = Some(Link::Pipe);
                self.peer(connected.conn, None)
            }
            Target::Launch {
                argv,
                suite_listens,
                sockets,
            } => self.launch(argv, *suite_listens, *sockets, &opts).await,
            Target::Template { .. } => Err(Failure::new(
                "this target's placeholders belong to the contract's suite, which launches it itself",
            )),
        }
    }

    /// Both channels over `link` (dialed, or accepted, control first) within `wait`, as this
    /// session's way to the implementation, remembered for [`Ctx::reopen`].
    async fn reach(&mut self, link: Link, wait: Duration) -> Result<Peer, Failure> {
        let opts = endpoint_options(&self.wire, &self.opts.tls);
        let hello = match &link {
            Link::Dial(c, _) => self.hello(c),
            _ => None,
        };
        let both = connect_both(&link, (&opts, hello.as_ref()), wait);
        // A launched process that failed before it connected never will: say so at once
        // rather than after the wait (a bad command line fails in milliseconds, not once
        // per check after the deadline). One that exits 0 may have handed over to a
        // daemon of its own, so the wait goes on.
        let (c, d) = self.unless_failed(both).await?;
        self.last = Some(link);
        self.peer(c, d)
    }

    /// `fut`, or a failure as soon as the most recently launched process exits with an
    /// error code: waiting for it to connect goes on only while it can.
    pub(crate) async fn unless_failed<T>(
        &mut self,
        fut: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        #[cfg(unix)]
        let child = self.children.last_mut();
        #[cfg(not(unix))]
        let child: Option<&mut ()> = None;
        tokio::select! {
            // A connection made as the process ended is still the session's.
            biased;
            r = fut => r,
            code = failed_exit(child) => Err(Failure::new(format!(
                "the target exited with {code} before it connected"
            ))),
        }
    }

    /// The handshake the suite's WebSocket dial to `ep` offers: the framing's subprotocols
    /// and, where the channel's upgrade wants one, the session's Bearer token.
    pub(crate) fn hello(&self, ep: &Endpoint) -> Option<Hello> {
        let Endpoint::Ws { path, .. } = ep else {
            return None;
        };
        let (control, _) = channels(&self.wire);
        let ch = self.wire.contract().channels.get(&control)?;
        let bearer = ch.upgrade.as_ref().is_some_and(|u| u.bearer.is_some());
        let subprotocols = ch.framing.subprotocols().to_vec();
        Some(Hello {
            path: path.clone(),
            subprotocols,
            authorization: self
                .token
                .as_ref()
                .filter(|_| bearer)
                .map(|t| format!("Bearer {t}")),
        })
    }

    /// The target the command line named.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The target, shared: to match on while `self` changes.
    pub(crate) fn target_arc(&self) -> Arc<Target> {
        self.target.clone()
    }

    /// Start `argv` (placeholders already filled in) as an implementation process of this
    /// check: stdin an open pipe, stderr the suite's, stdout read as it comes (so its writes
    /// never block) and kept as `stdout` says. [`Ctx::child_exit`] watches it,
    /// [`Ctx::signal_child`] signals it and [`Ctx::finish`] ends it.
    #[cfg(unix)]
    pub fn spawn(&mut self, argv: &[String], stdout: Stdout) -> Result<Spawned, Failure> {
        let (mut io, child) =
            spawn_exec(argv).map_err(|e| Failure::new(format!("cannot launch the target: {e}")))?;
        let pid = child.pid();
        self.children.push(child);
        let keep = match stdout {
            Stdout::Discard => 0,
            Stdout::Keep(n) => n,
        };
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = tokio::io::AsyncReadExt::read(&mut io, &mut buf).await {
                if n == 0 {
                    break;
                }
                let mut o = sink
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let room = keep.saturating_sub(o.len()).min(n);
                o.extend_from_slice(&buf[..room]);
            }
        });
        Ok(Spawned { pid, stdout: out })
    }

    /// Launching needs a unix platform.
    #[cfg(not(unix))]
    pub fn spawn(&mut self, _argv: &[String], _stdout: Stdout) -> Result<Spawned, Failure> {
        Err(Failure::new("launching a target needs a unix platform"))
    }

    #[cfg(unix)]
    async fn launch(
        &mut self,
        argv: &[String],
        suite_listens: bool,
        sockets: SocketKind,
        opts: &Options,
    ) -> Result<Peer, Failure> {
        let link = self.launch_link(argv, suite_listens, sockets, opts).await?;
        // A process that just started pays for its start-up before it connects.
        self.reach(link, self.opts.deadline.max(STARTUP)).await
    }

    /// Start a launched target with fresh endpoints (and a fresh `{token}`), and say how
    /// to reach it, without reaching it yet.
    #[cfg(unix)]
    pub(crate) async fn launch_link(
        &mut self,
        argv: &[String],
        suite_listens: bool,
        sockets: SocketKind,
        opts: &Options,
    ) -> Result<Link, Failure> {
        let (control, data) = match sockets {
            SocketKind::Unix => {
                let dir = self.private_dir()?;
                (
                    Endpoint::Unix(dir.join("control.sock")),
                    Endpoint::Unix(dir.join("data.sock")),
                )
            }
            SocketKind::Tcp if !suite_listens => (
                Endpoint::Tcp(format!("127.0.0.1:{}", free_port().await?)),
                Endpoint::Tcp(format!("127.0.0.1:{}", free_port().await?)),
            ),
            SocketKind::Tcp => (
                Endpoint::Tcp("127.0.0.1:0".into()),
                Endpoint::Tcp("127.0.0.1:0".into()),
            ),
            SocketKind::Ws if !suite_listens => (
                loopback_ws(free_port().await?),
                loopback_ws(free_port().await?),
            ),
            SocketKind::Ws => (loopback_ws(0), loopback_ws(0)),
        };
        // A contract with one channel gets `{control}` only: nothing listens for, or dials, a
        // second channel it does not have.
        let two = channels(&self.wire).1.is_some();
        let listeners = if suite_listens {
            let bind = |e: &Endpoint| {
                let e = e.clone();
                let opts = opts.clone();
                async move {
                    e.listen(&opts).await.map(Arc::new).map_err(|e| {
                        Failure::new(format!("cannot listen for the implementation: {e}"))
                    })
                }
            };
            let data = match two {
                true => Some(bind(&data).await?),
                false => None,
            };
            Some((bind(&control).await?, data))
        } else {
            None
        };
        // A TCP listener on port 0 tells its real port only once bound.
        let shown = |l: Option<&Arc<Listener>>, e: &Endpoint| -> String {
            l.map(|l| l.local()).unwrap_or_else(|| e.to_string())
        };
        let c_text = shown(listeners.as_ref().map(|l| &l.0), &control);
        let d_text = shown(listeners.as_ref().and_then(|l| l.1.as_ref()), &data);
        let token = fresh("token");
        if argv.iter().any(|a| a.contains("{token}")) {
            self.token = Some(token.clone());
        }
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                a.replace("{control}", &c_text)
                    .replace("{data}", &d_text)
                    .replace("{token}", &token)
            })
            .collect();
        self.spawn(&argv, Stdout::Discard)?;
        Ok(match listeners {
            Some((lc, ld)) => Link::Accept(lc, ld),
            None => {
                let c: Endpoint = c_text.parse().map_err(|e| Failure::new(format!("{e}")))?;
                let d: Endpoint = d_text.parse().map_err(|e| Failure::new(format!("{e}")))?;
                Link::Dial(c, two.then_some(d))
            }
        })
    }

    #[cfg(not(unix))]
    async fn launch(
        &mut self,
        _argv: &[String],
        _suite_listens: bool,
        _sockets: SocketKind,
        _opts: &Options,
    ) -> Result<Peer, Failure> {
        Err(Failure::new("launching a target needs a unix platform"))
    }

    #[cfg(not(unix))]
    pub(crate) async fn launch_link(
        &mut self,
        _argv: &[String],
        _suite_listens: bool,
        _sockets: SocketKind,
        _opts: &Options,
    ) -> Result<Link, Failure> {
        Err(Failure::new("launching a target needs a unix platform"))
    }

    /// A new session with the same implementation (same process, same endpoints), as after
    /// a reconnect; `None` when the target cannot be reached twice (a pipe).
    pub async fn reopen(&mut self) -> Result<Option<Peer>, Failure> {
        match self.last.take() {
            None => Ok(None),
            Some(Link::Pipe) => {
                self.last = Some(Link::Pipe);
                Ok(None)
            }
            Some(link) => self.reach(link, self.opts.deadline).await.map(Some),
        }
    }

    /// One more connection to the implementation the last [`Ctx::open`] reached, beside
    /// the ones open: the opener's way ([`Ctx::again`]), or a dialed target dialed again;
    /// `None` where the target is reached once per session (launched, or dialing in).
    pub async fn open_again(&mut self) -> Result<Option<Peer>, Failure> {
        self.again_or(|l| matches!(l, Link::Dial(..))).await
    }

    /// The implementation's next dial once the connection the last [`Ctx::open`] reached
    /// has ended (a dialer coming back): the opener's way ([`Ctx::again`]), or the next
    /// connection to the listeners that connection came to; `None` where the
    /// implementation does not dial in.
    pub async fn next_dial(&mut self) -> Result<Option<Peer>, Failure> {
        self.again_or(|l| matches!(l, Link::Accept(..))).await
    }

    /// A connection the opener's way ([`Ctx::again`]) where it set one, else the last link
    /// reached once more where it `fits`; `None` otherwise.
    async fn again_or(&mut self, fits: fn(&Link) -> bool) -> Result<Option<Peer>, Failure> {
        if let Some(again) = self.again.take() {
            let peer = again(self).await;
            self.again = Some(again);
            return peer.map(Some);
        }
        match &self.last {
            Some(l) if fits(l) => self.reopen().await,
            _ => Ok(None),
        }
    }

    /// Keep `thing` alive until the check's sessions end ([`Ctx::finish`]).
    pub fn hold(&mut self, thing: impl Send + 'static) {
        self.held.push(Kept::new(thing));
    }

    /// Let go of what [`Ctx::hold`] kept, now.
    pub fn release(&mut self) {
        self.held.clear();
    }

    /// A fresh private (0700) directory, removed when the check ends.
    #[cfg(unix)]
    pub fn private_dir(&mut self) -> Result<PathBuf, Failure> {
        let dir = fresh_dir()?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    /// End the most recently launched process now (SIGTERM, then SIGKILL after `grace`) and
    /// return its exit code (128 + signal); `None` without one or when it cannot be ended.
    #[cfg(unix)]
    pub async fn terminate_last(&mut self, grace: Duration) -> Option<i32> {
        let child = self.children.last_mut()?;
        if let Ok(Some(st)) = child.wait_timeout(Duration::ZERO).await {
            return Some(contract_transport::endpoint::process::status_code(st));
        }
        match child.terminate(grace).await {
            Ok(st) => Some(contract_transport::endpoint::process::status_code(st)),
            Err(e) => {
                self.notes.push(format!("could not end the target: {e}"));
                None
            }
        }
    }

    /// Whether sessions are launched processes (whose exit the suite can watch).
    pub fn launches(&self) -> bool {
        matches!(
            &*self.target,
            Target::Launch { .. } | Target::Pipe(_) | Target::Template { .. }
        )
    }

    /// Wait up to `limit` for the most recently launched process to exit: `None` without
    /// one, `Some(None)` if it is still running, else its exit code (128 + signal).
    pub async fn child_exit(&mut self, limit: Duration) -> Option<Option<i32>> {
        #[cfg(unix)]
        {
            let child = self.children.last_mut()?;
            match child.wait_timeout(limit).await {
                Ok(Some(st)) => Some(Some(contract_transport::endpoint::process::status_code(st))),
                Ok(None) => Some(None),
                Err(e) => {
                    self.notes.push(format!("waiting for the target: {e}"));
                    Some(None)
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = limit;
            None
        }
    }

    /// A session over a control connection the suite obtained itself (e.g. a descriptor a
    /// launched implementation handed over), validated like any other.
    pub fn peer_on(&self, control: Conn) -> Result<Peer, Failure> {
        self.peer(control, None)
    }

    /// Send `sig` to the most recently launched process (a CLI's cancel: SIGINT, SIGTERM).
    #[cfg(unix)]
    pub fn signal_child(&self, sig: nix::sys::signal::Signal) -> Result<(), Failure> {
        let child = self
            .children
            .last()
            .ok_or_else(|| Failure::new("no launched process to signal"))?;
        child
            .signal(sig)
            .map_err(|e| Failure::new(format!("cannot signal the target: {e}")))
    }

    /// End every launched process and remove the socket directories.
    pub async fn finish(&mut self) {
        // First, so a launcher's helper (rukh's handoff) exits and its parent need not
        // wait out its own stop deadline for it.
        self.release();
        #[cfg(unix)]
        for mut child in self.children.drain(..) {
            match child.wait_timeout(Duration::ZERO).await {
                Ok(Some(st)) => {
                    let code = contract_transport::endpoint::process::status_code(st);
                    if code != 0 {
                        self.notes
                            .push(format!("the target ({}) exited with {code}", child.name()));
                    }
                }
                _ => {
                    if let Err(e) = child.terminate(TERM_GRACE).await {
                        self.notes.push(format!("could not end the target: {e}"));
                    }
                }
            }
        }
        for d in self.dirs.drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// What the suite keeps of a launched process's stdout; the rest is read and discarded.
#[derive(Debug, Clone, Copy)]
pub enum Stdout {
    /// Nothing (the output is not part of the protocol).
    Discard,
    /// The first this many bytes (shown when the process fails a check).
    Keep(usize),
}

/// A process [`Ctx::spawn`] launched.
pub struct Spawned {
    /// Its process id.
    pub pid: u32,
    /// The stdout kept so far (see [`Stdout`]).
    pub stdout: Arc<std::sync::Mutex<Vec<u8>>>,
}

enum ControlIo {
    /// An oversize frame of the implementation's is skipped unread and comes out as its
    /// error: a receiver the contract keeps the channel open for reads on (the kernel).
    Stream(Framed<BoxIo, SkipOversize>),
    Msg(BoxMsg),
}

enum DataIo {
    Stream(Framed<BoxIo, BinaryCodec>),
    Msg(BoxMsg, BinaryCodec),
}

/// A message the suite's party (`me`) was about to send that the contract rejects: a bug of
/// the suite, never of the implementation under test.
pub(crate) fn unsendable(me: &str, v: &Violation, bytes: &[u8]) -> Failure {
    Failure::new(format!(
        "suite bug: the {me} it plays would send a message the contract rejects ({}): {}",
        v.class.name(),
        v.reason
    ))
    .with("the message", bytes)
}

/// `f`, with what came while its wait ran and nobody took (answers to other requests,
/// rejected messages), each labelled with what it answered or why it was rejected: a
/// misdirected reply is the usual reason a wait fails.
pub(crate) fn with_meanwhile(mut f: Failure, got: Vec<Got>) -> Failure {
    if !got.is_empty() {
        let n = got.len();
        f.why += &format!("; {n} other answer(s) or rejected message(s) came meanwhile");
    }
    for g in got {
        let label = match &g.msg {
            Err(v) => format!("came meanwhile, rejected: {}", v.reason),
            Ok(m) => {
                let kind = match m.kind {
                    Kind::Response => "response",
                    Kind::Error => "error",
                    _ => "message",
                };
                match &m.correlation {
                    Some(c) => format!("came meanwhile: a {kind} to {c}"),
                    None => format!("came meanwhile: a {kind} answering nothing"),
                }
            }
        };
        // A frame skipped unread has no bytes to show.
        match g.raw.is_empty() {
            true => f.notes.push(label),
            false => f = f.with(label, &g.raw),
        }
    }
    f
}

/// One control frame received.
#[derive(Debug, Clone)]
pub struct Got {
    /// The frame as it crossed the wire (length prefix included on byte streams).
    pub raw: Bytes,
    /// The message, or the contract's verdict on it.
    pub msg: Result<Message, Box<Violation>>,
    /// When it arrived.
    pub at: Instant,
}

impl Got {
    /// A one-line description, for notes and failures: kind, method and id.
    pub fn brief(&self) -> String {
        let what = match (&self.msg, self.method()) {
            (Err(v), _) => format!(
                "a frame the contract rejects ({}: {})",
                v.class.name(),
                v.reason
            ),
            (Ok(m), Some(method)) => format!("{:?} {method}", m.kind).to_lowercase(),
            (Ok(m), None) => format!("{:?}", m.kind).to_lowercase(),
        };
        match self
            .value()
            .and_then(|v| v.get("id"))
            .and_then(Value::as_str)
        {
            Some(id) => format!("{what} (id {id})"),
            None => what,
        }
    }

    /// The decoded message's value, or what could be parsed of a rejected one.
    pub fn value(&self) -> Option<&Value> {
        match &self.msg {
            Ok(m) => Some(&m.value),
            Err(v) => v.partial.as_ref().map(|p| &p.value),
        }
    }

    /// The method, if readable.
    pub fn method(&self) -> Option<&str> {
        self.value()
            .and_then(|v| v.get("method"))
            .and_then(Value::as_str)
    }

    /// The message, when the contract accepts it.
    pub fn ok(&self) -> Option<&Message> {
        self.msg.as_ref().ok()
    }

    /// Whether this is a valid `kind` message of `method`.
    pub fn is(&self, kind: Kind, method: &str) -> bool {
        self.ok()
            .is_some_and(|m| m.kind == kind && m.method.as_deref() == Some(method))
    }

    /// A member by JSON pointer.
    pub fn at_ptr(&self, ptr: &str) -> Option<&Value> {
        self.value().and_then(|v| v.pointer(ptr))
    }
}

/// What [`Peer::next`] yields.
#[derive(Debug)]
pub enum Incoming {
    /// A control frame.
    Control(Box<Got>),
    /// A data frame, with its exact bytes.
    Data {
        /// Decoded header and payload.
        frame: BinaryFrame,
        /// The frame as on the wire.
        raw: Bytes,
        /// When it arrived.
        at: Instant,
    },
    /// The control channel ended (EOF or error, with the reason).
    ControlEnd(String),
    /// The data channel ended.
    DataEnd(String),
    /// Nothing arrived before the deadline.
    Timeout,
}

/// The suite's end of one session: both channels, validating every message.
pub struct Peer {
    /// The party the suite plays.
    pub me: String,
    /// The party under test.
    pub other: String,
    wire: Arc<Wire>,
    control_ch: String,
    control: Option<ControlIo>,
    data: Option<DataIo>,
    json_codec: Option<JsonCodec>,
    data_codec: Option<BinaryCodec>,
    pending: Correlator,
    next_id: u64,
    prefix: String,
    /// Every control frame received, in order (bounded).
    pub log: Vec<Got>,
    /// Frames received beyond the log's bound.
    pub unlogged: u64,
    /// Every message the suite sent with [`Peer::send`], when, in order (bounded as `log`).
    pub sent: Vec<(Instant, Message)>,
    /// When the session's channels were open.
    pub opened: Instant,
    /// The close the implementation ended a message transport with (`Some(None)`: one
    /// without a code), once it did.
    pub closed_with: Option<Option<CloseFrame>>,
    /// While set, [`Peer::next`] leaves the data channel unread (a consumer that stalls).
    pub pause_data: bool,
    /// The engine judging the session's traffic, once [`Peer::judge`] started it.
    pub judge: Option<Judge>,
    /// What was read and handed back unhandled ([`Peer::unread`]): [`Peer::next`] yields
    /// it again first.
    held: std::collections::VecDeque<Incoming>,
}

impl Peer {
    fn new(
        wire: &Arc<Wire>,
        me: &str,
        other: &str,
        control: Conn,
        data: Option<Conn>,
    ) -> Result<Self, Failure> {
        let (control_ch, data_ch) = channels(wire);
        let json_codec = JsonCodec::for_channel(wire, &control_ch).ok();
        let data_codec = match data_ch.as_deref().map(|d| wire.codec(d)) {
            Some(Ok(ChannelCodec::Binary(c))) => Some(c),
            _ => None,
        };
        let control = match control {
            Conn::Stream(io) => {
                let codec = json_codec.clone().ok_or_else(|| {
                    Failure::new(format!("channel {control_ch} has no stream framing"))
                })?;
                ControlIo::Stream(Framed::new(io, SkipOversize::new(codec)))
            }
            Conn::Messages(m) => ControlIo::Msg(m),
        };
        let data = match (data, &data_codec) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(Failure::new("the second channel is not binary-framed"));
            }
            (Some(Conn::Stream(io)), Some(c)) => Some(DataIo::Stream(Framed::new(io, c.clone()))),
            (Some(Conn::Messages(m)), Some(c)) => Some(DataIo::Msg(m, c.clone())),
        };
        Ok(Peer {
            me: me.to_string(),
            other: other.to_string(),
            wire: wire.clone(),
            control_ch,
            control: Some(control),
            data,
            json_codec,
            data_codec,
            pending: Correlator::new(contract::io::DEFAULT_PENDING),
            next_id: 0,
            prefix: me.chars().next().unwrap_or('x').to_string(),
            log: Vec::new(),
            unlogged: 0,
            sent: Vec::new(),
            opened: Instant::now(),
            closed_with: None,
            pause_data: false,
            judge: None,
            held: std::collections::VecDeque::new(),
        })
    }

    /// From now on, every message and data frame either party sends goes through the
    /// policy engine ([`Judge`]); what it rules about the implementation's is kept there.
    pub fn judge(&mut self) {
        let (_, data) = channels(&self.wire);
        let data = data.filter(|_| self.data.is_some());
        let judge = Judge::new(
            &self.wire,
            &self.me,
            &self.other,
            &self.control_ch,
            data.as_deref(),
        );
        self.judge = Some(judge);
    }

    /// Whether the session has a data channel.
    pub fn has_data(&self) -> bool {
        self.data.is_some()
    }

    /// A fresh message id (`s-0001` when playing the shell, K-5).
    pub fn id(&mut self) -> String {
        self.next_id += 1;
        format!("{}-{:04}", self.prefix, self.next_id)
    }

    /// The bytes `payload` takes on the control channel (prefix included on byte streams).
    pub fn framed(&self, payload: &[u8]) -> Bytes {
        match (&self.control, &self.json_codec) {
            (Some(ControlIo::Stream(_)), Some(c)) => {
                let mut buf = BytesMut::new();
                match c.clone().encode(Bytes::copy_from_slice(payload), &mut buf) {
                    Ok(()) => buf.freeze(),
                    Err(_) => Bytes::copy_from_slice(payload),
                }
            }
            _ => Bytes::copy_from_slice(payload),
        }
    }

    fn track(&mut self, m: &Message, outgoing: bool) {
        let (sender, other) = if outgoing {
            (self.me.clone(), self.other.clone())
        } else {
            (self.other.clone(), self.me.clone())
        };
        match m.kind {
            Kind::Request => {
                if let (Some(id), Some(method)) = (&m.id, &m.method) {
                    let _ = self.pending.open(&sender, id, method);
                }
            }
            Kind::Response | Kind::Error => {
                if let Some(id) = &m.correlation {
                    let _ = self.pending.close(&other, id);
                }
            }
            _ => {}
        }
    }

    /// Validate `msg` as the suite's party's message and send it.
    pub async fn send(&mut self, msg: &Value) -> Result<Message, Failure> {
        let bytes = serde_json::to_vec(msg).map_err(|e| Failure::new(e.to_string()))?;
        let m = {
            let pending = &self.pending;
            let other = self.other.clone();
            self.wire
                .decode_with(&self.control_ch, &self.me, &bytes, &|id| {
                    pending.peek(&other, id)
                })
                .map_err(|v| unsendable(&self.me, &v, &bytes))?
        };
        self.send_raw(&bytes).await?;
        self.track(&m, true);
        if self.sent.len() < LOG_MAX {
            self.sent.push((Instant::now(), m.clone()));
        }
        if let Some(j) = self.judge.as_mut() {
            j.sent(&m, bytes.len());
        }
        Ok(m)
    }

    /// Send bytes as one control frame, unvalidated (for checks that send bad messages).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.send_as(bytes, false).await
    }

    /// Send `bytes` as one binary message, where the control channel is a message
    /// transport (a WebSocket); a byte stream has no message types to break.
    pub async fn send_binary(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.send_as(bytes, true).await
    }

    async fn send_as(&mut self, bytes: &[u8], binary: bool) -> Result<(), Failure> {
        let wait = Duration::from_secs(10);
        let b = Bytes::copy_from_slice(bytes);
        let r = match self.control.as_mut() {
            None => return Err(Failure::new("the control channel is closed")),
            Some(ControlIo::Stream(_)) if binary => {
                return Err(Failure::new("suite bug: a binary message on a byte stream"));
            }
            Some(ControlIo::Stream(f)) => tokio::time::timeout(wait, f.send(b))
                .await
                .map(|r| r.map_err(|e| e.to_string())),
            Some(ControlIo::Msg(m)) => {
                let msg = if binary { Msg::Binary(b) } else { Msg::Text(b) };
                tokio::time::timeout(wait, m.send(msg))
                    .await
                    .map(|r| r.map_err(|e| e.to_string()))
            }
        };
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new(format!("the suite could not send: {e}"))),
            Err(_) => Err(Failure::new(format!(
                "the suite could not send a control frame within {wait:?} (the implementation does not read)"
            ))),
        }
    }

    /// Write `bytes` to the control stream exactly as given, with no framing (split frames,
    /// bad length prefixes, stalled frames); byte-stream control channels only.
    pub async fn write_bytes(&mut self, bytes: &[u8], wait: Duration) -> Result<(), Failure> {
        let r = match self.control.as_mut() {
            None => return Err(Failure::new("the control channel is closed")),
            Some(ControlIo::Msg(_)) => {
                return Err(Failure::new(
                    "raw bytes need a byte-stream control channel, not a message transport",
                ));
            }
            Some(ControlIo::Stream(f)) => {
                let io = f.get_mut();
                tokio::time::timeout(wait, async {
                    io.write_all(bytes).await?;
                    io.flush().await
                })
                .await
            }
        };
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new(format!("the suite could not write: {e}"))),
            Err(_) => Err(Failure::new(format!(
                "the suite could not write {} bytes within {wait:?} (the implementation does not read)",
                bytes.len()
            ))),
        }
    }

    /// The control channel's frame cap (payload bytes, or UTF-16 units for such lines).
    pub fn control_cap(&self) -> Option<u64> {
        self.wire.codec(&self.control_ch).ok().map(|c| c.cap())
    }

    /// Send `payload` as one control frame framed as any other but for the cap: the
    /// frame-cap checks send one byte over it.
    pub async fn send_uncapped(&mut self, payload: &[u8]) -> Result<(), Failure> {
        if let Some(ControlIo::Msg(_)) = &self.control {
            return self.send_raw(payload).await;
        }
        let codec = self.wire.codec(&self.control_ch);
        let mut buf = BytesMut::new();
        codec
            .map_err(|e| Failure::new(e.to_string()))?
            .with_cap(u64::MAX)
            .encode_json(payload, &mut buf)
            .map_err(|e| Failure::new(format!("the suite could not frame its probe: {e}")))?;
        self.write_bytes(&buf, Duration::from_secs(10)).await
    }

    /// The exact bytes of a data frame.
    pub fn data_bytes(&self, frame: &BinaryFrame) -> Bytes {
        let mut buf = BytesMut::new();
        match self
            .data_codec
            .clone()
            .map(|mut c| c.encode(frame, &mut buf))
        {
            Some(Ok(())) => buf.freeze(),
            _ => frame.payload.clone(),
        }
    }

    /// Send one data frame.
    pub async fn send_data(
        &mut self,
        fields: Vec<u64>,
        payload: Bytes,
        wait: Duration,
    ) -> Result<(), Failure> {
        let frame = BinaryFrame { fields, payload };
        let raw = self.data_bytes(&frame);
        let r = match self.data.as_mut() {
            None => return Err(Failure::new("no data channel")),
            Some(DataIo::Stream(f)) => tokio::time::timeout(wait, f.send(&frame))
                .await
                .map(|r| r.map_err(|e| e.to_string())),
            Some(DataIo::Msg(m, _)) => tokio::time::timeout(wait, m.send(Msg::Binary(raw.clone())))
                .await
                .map(|r| r.map_err(|e| e.to_string())),
        };
        if let (Ok(Ok(())), Some(j)) = (&r, self.judge.as_mut()) {
            j.data(&frame, &raw, true);
        }
        match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new(format!(
                "the suite could not send a data frame: {e}"
            ))),
            Err(_) => Err(Failure::new(format!(
                "the suite could not send a data frame within {wait:?}"
            ))),
        }
    }

    fn decode(&mut self, payload: Bytes) -> Got {
        let raw = self.framed(&payload);
        let msg = {
            let pending = &self.pending;
            let me = self.me.clone();
            self.wire
                .decode_with(&self.control_ch, &self.other, &payload, &|id| {
                    pending.peek(&me, id)
                })
        };
        let msg = match msg {
            Ok(m) => {
                self.track(&m, false);
                if let Some(j) = self.judge.as_mut() {
                    j.received(&m, &raw);
                }
                Ok(m)
            }
            Err(v) => Err(Box::new(v)),
        };
        self.logged(Got {
            raw,
            msg,
            at: Instant::now(),
        })
    }

    /// `got`, kept for post-hoc checks while the log has room (counted when it has not).
    fn logged(&mut self, got: Got) -> Got {
        if self.log.len() < LOG_MAX {
            self.log.push(got.clone());
        } else {
            self.unlogged += 1;
        }
        got
    }

    /// An oversize frame the codec skipped: a message the contract rejects, kept and
    /// shown like any other when its oversize rule keeps the channel open (the receiver
    /// skips and reports it); else the channel's end, as the rule says.
    fn oversize(&mut self, e: FrameError) -> Incoming {
        let v = self
            .wire
            .violation(ViolationClass::Oversize, format!("{e}, skipped unread"));
        if !matches!(v.action, Some(ActionKind::ReplyError | ActionKind::Ignore)) {
            self.control = None;
            return Incoming::ControlEnd(e.to_string());
        }
        let got = self.logged(Got {
            raw: Bytes::new(),
            msg: Err(Box::new(v)),
            at: Instant::now(),
        });
        Incoming::Control(Box::new(got))
    }

    /// Hand back what [`Peer::next`] yielded, in order, for the next reads: a wait that
    /// only watched (nothing out of place came) leaves the traffic to the wait after it.
    pub fn unread(&mut self, seen: impl IntoIterator<Item = Incoming>) {
        let mut back: Vec<Incoming> = seen.into_iter().collect();
        back.extend(self.held.drain(..));
        self.held.extend(back);
    }

    /// The next thing to arrive on either channel, or [`Incoming::Timeout`] at `until`.
    pub async fn next(&mut self, until: Instant) -> Incoming {
        if let Some(first) = self.held.pop_front() {
            return first;
        }
        enum Raw {
            C(Option<Result<Result<Bytes, FrameError>, Gone>>),
            D(Option<Result<(BinaryFrame, Bytes), String>>),
            T,
        }
        let got = {
            let control = &mut self.control;
            let data = &mut self.data;
            let data_codec = &self.data_codec;
            let read_data = data.is_some() && !self.pause_data;
            tokio::select! {
                c = recv_control(control), if control.is_some() => Raw::C(c),
                d = recv_data(data, data_codec), if read_data => Raw::D(d),
                () = tokio::time::sleep_until(until.into()) => Raw::T,
            }
        };
        match got {
            Raw::T => Incoming::Timeout,
            Raw::C(None) => {
                self.control = None;
                Incoming::ControlEnd("end of stream".into())
            }
            Raw::C(Some(Err(Gone::Failed(e)))) => {
                self.control = None;
                Incoming::ControlEnd(e)
            }
            Raw::C(Some(Err(Gone::Closed(f)))) => {
                self.control = None;
                let why = match &f {
                    Some(f) => format!("closed {} {:?}", f.code, f.reason),
                    None => "closed with no close code".to_string(),
                };
                self.closed_with = Some(f);
                Incoming::ControlEnd(why)
            }
            Raw::C(Some(Ok(Ok(b)))) => Incoming::Control(Box::new(self.decode(b))),
            Raw::C(Some(Ok(Err(e)))) => self.oversize(e),
            Raw::D(None) => {
                self.data = None;
                Incoming::DataEnd("end of stream".into())
            }
            Raw::D(Some(Err(e))) => {
                self.data = None;
                Incoming::DataEnd(e)
            }
            Raw::D(Some(Ok((frame, raw)))) => {
                if let Some(j) = self.judge.as_mut() {
                    j.data(&frame, &raw, false);
                }
                Incoming::Data {
                    frame,
                    raw,
                    at: Instant::now(),
                }
            }
        }
    }

    /// Whether the control channel is still open (no end seen).
    pub fn control_open(&self) -> bool {
        self.control.is_some()
    }

    /// Whether the control channel is a message transport (a WebSocket): frames travel
    /// whole, and its close frame carries a code.
    pub fn carries_messages(&self) -> bool {
        matches!(self.control, Some(ControlIo::Msg(_)))
    }

    /// Close the control channel with `code` and `reason`, then read (and drop) what comes
    /// until the peer's close: dropping a socket with frames unread resets it, and a reset
    /// can destroy the close frame before the peer reads its code.
    pub async fn close_with(&mut self, code: u16, reason: &str) -> Result<(), Failure> {
        let Some(ControlIo::Msg(mut m)) = self.control.take() else {
            return Err(Failure::new(
                "a close code needs a message transport (WebSocket) for the control channel",
            ));
        };
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let wait = Duration::from_secs(2);
        let _ = tokio::time::timeout(wait, async {
            let _ = m.send(Msg::Close(Some(frame))).await;
            while let Some(Ok(got)) = m.next().await {
                if matches!(got, Msg::Close(_)) {
                    break;
                }
            }
            let _ = m.close().await;
        })
        .await;
        Ok(())
    }

    /// Close both channels abruptly (a crash, as the other side sees it).
    pub fn drop_channels(&mut self) {
        self.control = None;
        self.data = None;
    }

    /// Half-close both channels in order (data, then control): an orderly end.
    pub async fn shutdown(&mut self) {
        let wait = Duration::from_secs(2);
        match self.data.as_mut() {
            Some(DataIo::Stream(f)) => {
                let _ = tokio::time::timeout(wait, f.get_mut().shutdown()).await;
            }
            Some(DataIo::Msg(m, _)) => {
                let _ = tokio::time::timeout(wait, m.close()).await;
            }
            None => {}
        }
        match self.control.as_mut() {
            Some(ControlIo::Stream(f)) => {
                let _ = tokio::time::timeout(wait, f.get_mut().shutdown()).await;
            }
            Some(ControlIo::Msg(m)) => {
                let _ = tokio::time::timeout(wait, m.close()).await;
            }
            None => {}
        }
    }
}

/// Why the control channel ended before its end of stream.
enum Gone {
    /// The peer closed the message transport, with its close frame if it sent one.
    Closed(Option<CloseFrame>),
    /// The channel broke.
    Failed(String),
}

/// The next control frame, or a skipped oversize one; `None`: the end of the stream.
async fn recv_control(
    c: &mut Option<ControlIo>,
) -> Option<Result<Result<Bytes, FrameError>, Gone>> {
    match c.as_mut()? {
        ControlIo::Stream(f) => f
            .next()
            .await
            .map(|r| r.map_err(|e| Gone::Failed(e.to_string()))),
        ControlIo::Msg(m) => match m.next().await {
            None => None,
            Some(Ok(Msg::Close(f))) => Some(Err(Gone::Closed(f))),
            Some(Err(e)) => Some(Err(Gone::Failed(e.to_string()))),
            Some(Ok(Msg::Text(b) | Msg::Binary(b))) => Some(Ok(Ok(b))),
        },
    }
}

async fn recv_data(
    d: &mut Option<DataIo>,
    codec: &Option<BinaryCodec>,
) -> Option<Result<(BinaryFrame, Bytes), String>> {
    let reencode = |f: &BinaryFrame| -> Bytes {
        let mut buf = BytesMut::new();
        match codec.clone().map(|mut c| c.encode(f, &mut buf)) {
            Some(Ok(())) => buf.freeze(),
            _ => f.payload.clone(),
        }
    };
    match d.as_mut()? {
        DataIo::Stream(f) => f.next().await.map(|r| {
            r.map(|frame| {
                let raw = reencode(&frame);
                (frame, raw)
            })
            .map_err(|e| e.to_string())
        }),
        DataIo::Msg(m, c) => match m.next().await {
            None | Some(Ok(Msg::Close(_))) => None,
            Some(Err(e)) => Some(Err(e.to_string())),
            Some(Ok(Msg::Text(b) | Msg::Binary(b))) => {
                let mut buf = BytesMut::from(&b[..]);
                Some(match c.decode(&mut buf) {
                    Ok(Some(frame)) if buf.is_empty() => Ok((frame, b)),
                    Ok(_) => Err("a data message is not exactly one frame".into()),
                    Err(e) => Err(e.to_string()),
                })
            }
        },
    }
}
