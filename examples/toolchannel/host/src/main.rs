//! `toolchannel-host`: the reference api worker-gateway of issue 8 (contract
//! `schema/contracts/toolchannel.json`).
//!
//! It listens for the worker's WebSocket dial (tokio-tungstenite), checks the
//! `Authorization: Bearer` token (HTTP 401 otherwise) and the subprotocol
//! `agentfy.worker.v1` (HTTP 426 listing it otherwise), then runs ONE session:
//! `initialize` (capabilities `{}`), waits for the result (sessionId must equal
//! the token's sub: else close 4002 "-32002 SESSION_MISMATCH …"; MCP version
//! mismatch: close 4001), `notifications/initialized`, `agentfy/ready`, then
//! `tools/list` (session `running`), one `tools/call`, answers
//! `agentfy/heartbeat` (effective channelVersion re-checked: -32001 + 4001),
//! and finally `agentfy/release` (reason explicit) and waits for the release
//! report and the worker's close 4005. Worker requests under `sampling/` are
//! refused -32003 and audited; `elicitation/`, `roots/` and anything undeclared
//! get -32004. Bad frames get -32700/-32600; the tenth closes 4006. Redials:
//! same instanceId with a greater attempt supersedes the live socket (4009 on
//! the old one, tools/list re-run, tool set replaced); anything else is
//! refused with 4002. Host deadlines: 2×handshakeSeconds (4003
//! handshake_timeout), readySeconds (4003 ready_timeout), heartbeat grace +
//! interval (4004), releaseGraceSeconds (outputsFlushed recorded false).
//!
//! Every frame in and out is validated against the contract by the generated
//! bindings (`contract_generated::toolchannel::decode`). The one exception is
//! `--break sampling-accept`: it answers `sampling/createMessage` with a
//! result on purpose, which the contract forbids (result schema `false`), so
//! that reply alone skips the outgoing check. `--break terse-close` closes 4001 on
//! an MCP version it cannot speak without naming the two versions (the contract's
//! `namesBoth`); `--break nameless-timeout` closes a missed handshake 4003 without
//! naming handshake_timeout (the action's `reason`, T-6). `--break any-token` takes an
//! upgrade whatever its token; `--break unlisted` refuses an unspoken major without
//! listing its own (the channel's `upgrade` refusals). `--break any-session` takes an
//! initialize result whatever sessionId it states (the `sessionId` agreement's mismatch);
//! `--break busy-release` releases while its tools/call is in flight (the derived
//! `not-while.agentfy/release`); `--break own-grace` releases with a graceSeconds other
//! than the releaseGraceSeconds its initialize carried (the same check: `limit.repeated`).
//!
//! Exit: 0 when the session was released (release report received), 1 when
//! the session failed (reason printed), 2 for bad usage.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use contract::model::Kind;
use contract::wire::ViolationClass;
use contract_generated::toolchannel::codes::CloseCodes;
use contract_generated::toolchannel::{
    self, Channel, DecodeError, ErrorCode, Method, Party, types,
};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message as Ws, Utf8Bytes};

const SUBPROTOCOL: &str = "agentfy.worker.v1";
const MCP_VERSION: &str = "2025-06-18";
/// The channel version this host speaks unless told another (`--channel-version`).
const HOST_CHANNEL_VERSION: &str = "1.3.0";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Break {
    /// Answer sampling/createMessage with a result instead of -32003.
    SamplingAccept,
    /// Close 4001 on an MCP version it cannot speak without naming the two versions.
    TerseClose,
    /// Close 4003 on a missed handshake without naming handshake_timeout (T-6).
    NamelessTimeout,
    /// Send tools/list as soon as notifications/initialized arrives, without waiting for
    /// agentfy/ready.
    EarlyList,
    /// Let a redial of the live instance supersede whatever its attempt (no attempt rule).
    AnyAttempt,
    /// Take an upgrade whatever its Bearer token, or without one (no 401).
    AnyToken,
    /// Refuse an unspoken major with 426 but without listing the host's own.
    Unlisted,
    /// Take an initialize result whatever sessionId it states (no -32002, no close 4002).
    AnySession,
    /// Release once enough heartbeats arrived, even while the tools/call is in flight.
    BusyRelease,
    /// Release with a graceSeconds one above the releaseGraceSeconds initialize carried.
    OwnGrace,
}

/// Run one toolchannel session as the host.
#[derive(Debug, Parser)]
#[command(name = "toolchannel-host")]
struct Args {
    /// Address to listen on (port 0: pick one; see --port-file).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write the bound port here once listening.
    #[arg(long)]
    port_file: Option<std::path::PathBuf>,
    /// The Bearer token the worker must present.
    #[arg(long)]
    token: String,
    /// The token's `sub`: the session id (the source of truth).
    #[arg(long)]
    session_id: String,
    /// Tool to call once running (default: the first listed).
    #[arg(long)]
    tool: Option<String>,
    /// Arguments of that call (JSON object).
    #[arg(long, default_value = "{}")]
    arguments: String,
    /// Heartbeats to answer while running before releasing.
    #[arg(long, default_value_t = 1)]
    heartbeats: u32,
    /// heartbeatIntervalSeconds sent to the worker (grace = 3 × interval).
    #[arg(long, default_value_t = 10)]
    heartbeat_interval_seconds: u64,
    /// handshakeSeconds (the host waits twice that for notifications/initialized).
    #[arg(long, default_value_t = 10)]
    handshake_seconds: u64,
    /// readySeconds.
    #[arg(long, default_value_t = 30)]
    ready_seconds: u64,
    /// releaseGraceSeconds.
    #[arg(long, default_value_t = 30)]
    release_grace_seconds: u64,
    /// The channel version (minor of the major) this host states in initialize.
    #[arg(long, default_value = HOST_CHANNEL_VERSION)]
    channel_version: String,
    /// Give up when no worker dialled within this many seconds (dialSeconds).
    #[arg(long, default_value_t = 120)]
    dial_seconds: u64,
    /// Break one rule on purpose.
    #[arg(long = "break", value_enum)]
    brk: Option<Break>,
}

type Sink = SplitSink<WebSocketStream<TcpStream>, Ws>;

enum Event {
    Opened(u64, Box<WebSocketStream<TcpStream>>),
    Frame(u64, Ws),
    Gone(u64, String),
    /// A message over the contract's maxMessageBytes, left unread.
    TooBig(u64, String),
}

/// Messages over the contract's cap are refused unread (then closed `MessageTooBig`, note T-32).
fn ws_config() -> WebSocketConfig {
    let cap = usize::try_from(toolchannel::limits::MAX_MESSAGE_BYTES).unwrap_or(usize::MAX);
    WebSocketConfig::default()
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitResult,
    AwaitInitialized,
    AwaitReady,
    AwaitToolsList,
    Serving,
}

struct Conn {
    sink: Sink,
    phase: Phase,
    opened: Instant,
    initialized_at: Option<Instant>,
    early_ready: bool,
    next_id: i64,
    pending: HashMap<String, Method>,
    bad_frames: u32,
    instance: Option<(String, u64)>,
    last_ping: Instant,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Starting,
    Running,
    Releasing { sent: Instant },
    Released { flushed: bool },
    Failed(String),
}

struct Host {
    args: Args,
    budgets: Value,
    conns: HashMap<u64, Conn>,
    live: Option<u64>,
    state: State,
    effective: Option<String>,
    tools: Vec<String>,
    call: CallState,
    heartbeats: u32,
    hb_deadline: Option<Instant>,
    outputs_flushed: Option<bool>,
}

#[derive(Debug, Clone, PartialEq)]
enum CallState {
    NotYet,
    InFlight,
    Done,
}

/// The reason text of a close that an error explains: the error's code and symbol, then `detail`.
fn refused(code: ErrorCode, detail: &str) -> String {
    format!(
        "{} {} {detail}",
        code.code(),
        code.symbol().unwrap_or_default()
    )
}

/// A contract close code as a WebSocket close code (the contract's are all u16).
fn wire(code: CloseCodes) -> u16 {
    u16::try_from(code.value()).unwrap_or(CloseCode::Error.into())
}

fn close_frame(code: u16, reason: &str) -> Ws {
    // RFC 6455: a close reason is at most 123 bytes; values are truncated, never dropped (T-16).
    let mut r = reason.to_string();
    while r.len() > 123 {
        r.pop();
    }
    Ws::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: Utf8Bytes::from(r),
    }))
}

/// Minimal semver ordering for channel minors (`1.3.0` vs `1.1.0`).
fn semver(v: &str) -> Option<(u64, u64, u64)> {
    let mut it = v.split('.').map(|p| p.parse::<u64>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

impl Host {
    fn hb_grace(&self) -> u64 {
        3 * self.args.heartbeat_interval_seconds
    }

    /// Validate `msg` as sent by the host (answering `answers`, for responses) and send it.
    async fn send(&mut self, conn: u64, msg: Value, answers: Option<Method>) -> anyhow::Result<()> {
        let text = serde_json::to_string(&msg)?;
        toolchannel::decode::<types::JsonRpcMessage>(
            Channel::Ws,
            Party::Host,
            text.as_bytes(),
            answers,
        )
        .map_err(|e| anyhow::anyhow!("host refused its own frame: {e}"))?;
        self.send_unchecked(conn, text).await
    }

    async fn send_unchecked(&mut self, conn: u64, text: String) -> anyhow::Result<()> {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.sink.send(Ws::text(text)).await?;
        }
        Ok(())
    }

    async fn request(&mut self, conn: u64, method: Method, params: Value) -> anyhow::Result<()> {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Ok(());
        };
        let id = c.next_id;
        c.next_id += 1;
        c.pending.insert(id.to_string(), method);
        self.send(
            conn,
            json!({"jsonrpc": "2.0", "id": id, "method": method.name(), "params": params}),
            None,
        )
        .await
    }

    /// An error reply with the catalog's `code`; its message is `detail`, or the code's
    /// name when there is none.
    async fn reply_error(
        &mut self,
        conn: u64,
        id: Value,
        code: ErrorCode,
        detail: &str,
    ) -> anyhow::Result<()> {
        let message = match detail {
            "" => code.symbol().unwrap_or_default(),
            d => d,
        };
        let msg =
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.code(), "message": message}});
        // Error replies to unreadable frames carry id null; the schema allows it.
        self.send(conn, msg, None).await
    }

    /// Close `conn` with the contract's `code`; the reason is the code's number, then `what`.
    async fn close(&mut self, conn: u64, code: CloseCodes, what: &str) {
        let reason = format!("{} {what}", code.value());
        self.close_ws(conn, wire(code), &reason).await;
    }

    async fn close_ws(&mut self, conn: u64, code: u16, reason: &str) {
        eprintln!("toolchannel-host: conn#{conn} close {code} {reason}");
        if let Some(mut c) = self.conns.remove(&conn) {
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                let _ = c.sink.send(close_frame(code, reason)).await;
                let _ = c.sink.close().await;
            })
            .await;
        }
        if self.live == Some(conn) {
            self.live = None;
        }
    }

    fn fail(&mut self, reason: &str) {
        if !matches!(self.state, State::Failed(_) | State::Released { .. }) {
            eprintln!(
                "toolchannel-host: session {} failed ({reason})",
                self.args.session_id
            );
            self.state = State::Failed(reason.to_string());
        }
    }

    async fn opened(&mut self, id: u64, sink: Sink) -> anyhow::Result<()> {
        self.conns.insert(
            id,
            Conn {
                sink,
                phase: Phase::AwaitResult,
                opened: Instant::now(),
                initialized_at: None,
                early_ready: false,
                next_id: 1,
                pending: HashMap::new(),
                bad_frames: 0,
                instance: None,
                last_ping: Instant::now(),
            },
        );
        // After 101 the host speaks first: initialize, capabilities {} (no sampling, elicitation, roots).
        let params = json!({
            "protocolVersion": MCP_VERSION,
            "clientInfo": {"name": "agentfy-worker-gateway", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": {},
            "_meta": {"agentfy": {
                "sessionId": self.args.session_id, "channelVersion": self.args.channel_version,
                "profile": "light", "budgets": self.budgets.clone()
            }}
        });
        let _: types::InitializeParams = serde_json::from_value(params.clone())?;
        self.request(id, Method::Initialize, params).await
    }

    async fn bad_frame(&mut self, conn: u64, code: ErrorCode, why: &str) -> anyhow::Result<()> {
        eprintln!(
            "toolchannel-host: conn#{conn} bad frame ({}): {why}",
            code.code()
        );
        self.reply_error(conn, Value::Null, code, why).await?;
        let n = match self.conns.get_mut(&conn) {
            Some(c) => {
                c.bad_frames += 1;
                c.bad_frames
            }
            None => return Ok(()),
        };
        if u64::from(n) >= toolchannel::limits::BAD_FRAMES_MAX {
            self.close(conn, CloseCodes::BadFrames, "too many bad frames")
                .await;
        }
        Ok(())
    }

    async fn frame(&mut self, conn: u64, msg: Ws) -> anyhow::Result<()> {
        let text = match msg {
            Ws::Text(t) => t,
            Ws::Binary(_) => {
                return self
                    .bad_frame(conn, ErrorCode::InvalidRequest, "binary message")
                    .await;
            }
            Ws::Close(f) => {
                let code = f.as_ref().map(|f| u16::from(f.code));
                let why = f
                    .map(|f| format!("{} {}", u16::from(f.code), f.reason))
                    .unwrap_or_default();
                self.gone(conn, code, why).await;
                return Ok(());
            }
            _ => return Ok(()),
        };
        // Which of our requests does it answer? (the id, when it has one, picks the result schema)
        let peek: Option<Value> = serde_json::from_str(text.as_str()).ok();
        let id_key = peek.as_ref().and_then(|v| v.get("id")).map(|id| match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        let is_reply = peek.as_ref().is_some_and(|v| v.get("method").is_none());
        let answers = if is_reply {
            id_key.as_ref().and_then(|k| {
                self.conns
                    .get(&conn)
                    .and_then(|c| c.pending.get(k).copied())
            })
        } else {
            None
        };
        let m = match toolchannel::decode::<types::JsonRpcMessage>(
            Channel::Ws,
            Party::Worker,
            text.as_bytes(),
            answers,
        ) {
            Ok((m, _typed)) => m,
            Err(DecodeError::Violation(v)) => {
                let id = v
                    .partial
                    .as_ref()
                    .and_then(|p| p.id.clone())
                    .unwrap_or(Value::Null);
                let method = v
                    .partial
                    .as_ref()
                    .and_then(|p| p.method.clone())
                    .unwrap_or_default();
                return match v.class {
                    ViolationClass::Parse => {
                        self.bad_frame(conn, ErrorCode::ParseError, &v.reason).await
                    }
                    ViolationClass::Invalid | ViolationClass::Oversize => {
                        self.bad_frame(conn, ErrorCode::InvalidRequest, &v.reason)
                            .await
                    }
                    ViolationClass::UnknownNotification => {
                        eprintln!("toolchannel-host: unknown notification {method} ignored");
                        Ok(())
                    }
                    ViolationClass::UnknownRequest | ViolationClass::WrongDirection
                        if !id.is_null() =>
                    {
                        self.refuse(conn, id, &method).await
                    }
                    ViolationClass::InvalidParams if !id.is_null() => {
                        if method.starts_with("sampling/")
                            || method.starts_with("elicitation/")
                            || method.starts_with("roots/")
                        {
                            self.refuse(conn, id, &method).await
                        } else {
                            self.reply_error(conn, id, ErrorCode::InvalidParams, &v.reason)
                                .await
                        }
                    }
                    _ => {
                        eprintln!("toolchannel-host: dropped {method}: {}", v.reason);
                        Ok(())
                    }
                };
            }
            Err(e) => {
                return self
                    .bad_frame(conn, ErrorCode::InvalidRequest, &e.to_string())
                    .await;
            }
        };
        match m.kind {
            Kind::Request => {
                self.worker_request(
                    conn,
                    m.id.unwrap_or(Value::Null),
                    m.method.unwrap_or_default(),
                    m.value,
                )
                .await
            }
            Kind::Notification | Kind::Event => {
                self.notification(conn, m.method.as_deref().unwrap_or(""), &m.value)
                    .await
            }
            Kind::Response | Kind::Error => {
                let Some(key) = id_key else { return Ok(()) };
                let method = self
                    .conns
                    .get_mut(&conn)
                    .and_then(|c| c.pending.remove(&key));
                match method {
                    Some(method) => {
                        self.response(conn, method, m.kind == Kind::Error, &m.value)
                            .await
                    }
                    None => {
                        eprintln!(
                            "toolchannel-host: conn#{conn} response to unknown id {key} ignored"
                        );
                        Ok(())
                    }
                }
            }
        }
    }

    /// The transport check before dispatch (layer 2): sampling/* → -32003 + audit, anything else undeclared → -32004.
    async fn refuse(&mut self, conn: u64, id: Value, method: &str) -> anyhow::Result<()> {
        if method.starts_with("sampling/") {
            eprintln!(
                "toolchannel-host: AUDIT session={} sampling attempt {method} refused",
                self.args.session_id
            );
            if self.args.brk == Some(Break::SamplingAccept) {
                eprintln!(
                    "toolchannel-host: --break sampling-accept: answering {method} with a result"
                );
                let text = serde_json::to_string(&json!({"jsonrpc": "2.0", "id": id, "result": {
                    "role": "assistant", "content": {"type": "text", "text": "sampled anyway"}, "model": "none"
                }}))?;
                return self.send_unchecked(conn, text).await;
            }
            return self
                .reply_error(conn, id, ErrorCode::SamplingDisabled, "")
                .await;
        }
        self.reply_error(conn, id, ErrorCode::CapabilityNotNegotiated, "")
            .await
    }

    async fn worker_request(
        &mut self,
        conn: u64,
        id: Value,
        method: String,
        value: Value,
    ) -> anyhow::Result<()> {
        match method.parse::<Method>() {
            Ok(Method::AgentfyHeartbeat) => {
                // The session machine allows a heartbeat once the session serves (its
                // outOfPlace error, note T-31); before that the version is not agreed.
                if self
                    .conns
                    .get(&conn)
                    .is_none_or(|c| c.phase != Phase::Serving)
                {
                    return self
                        .reply_error(conn, id, ErrorCode::SessionNotRunning, "")
                        .await;
                }
                let p: types::HeartbeatParams = serde_json::from_value(value["params"].clone())?;
                if p.session_id.as_str() != self.args.session_id {
                    self.reply_error(conn, id, ErrorCode::SessionMismatch, "")
                        .await?;
                    let detail = format!(
                        "expected={} got={}",
                        self.args.session_id,
                        p.session_id.as_str()
                    );
                    let reason = refused(ErrorCode::SessionMismatch, &detail);
                    self.close_ws(conn, wire(CloseCodes::SessionRejected), &reason)
                        .await;
                    self.fail("session_mismatch");
                    return Ok(());
                }
                if self.effective.as_deref() != Some(p.channel_version.as_str()) {
                    self.reply_error(conn, id, ErrorCode::ChannelVersionMismatch, "")
                        .await?;
                    let detail = format!(
                        "host={} worker={}",
                        self.effective.clone().unwrap_or_default(),
                        p.channel_version.as_str()
                    );
                    let reason = refused(ErrorCode::ChannelVersionMismatch, &detail);
                    self.close_ws(conn, wire(CloseCodes::VersionUnsupported), &reason)
                        .await;
                    self.fail("channel_version");
                    return Ok(());
                }
                // Budgets can only be lowered (T-17); the host keeps the frame's values.
                let result = json!({"continue": true, "idleBudgetSeconds": self.budgets["idleSeconds"], "execBudgetSeconds": self.budgets["maxExecSeconds"]});
                self.send(
                    conn,
                    json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Some(Method::AgentfyHeartbeat),
                )
                .await?;
                if self.state == State::Running && self.live == Some(conn) {
                    self.heartbeats += 1;
                    self.hb_deadline = Some(
                        Instant::now()
                            + Duration::from_secs(
                                self.hb_grace() + self.args.heartbeat_interval_seconds,
                            ),
                    );
                    eprintln!(
                        "toolchannel-host: heartbeat #{} idle={}s exec={}s",
                        self.heartbeats, p.idle_seconds, p.exec_seconds
                    );
                    self.maybe_release(conn).await?;
                }
                Ok(())
            }
            _ => self.refuse(conn, id, &method).await,
        }
    }

    async fn notification(&mut self, conn: u64, method: &str, value: &Value) -> anyhow::Result<()> {
        let Some(phase) = self.conns.get(&conn).map(|c| c.phase) else {
            return Ok(());
        };
        match method {
            "notifications/initialized" if phase == Phase::AwaitInitialized => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.phase = Phase::AwaitReady;
                    c.initialized_at = Some(Instant::now());
                }
                let early = self.conns.get(&conn).is_some_and(|c| c.early_ready);
                if early || self.args.brk == Some(Break::EarlyList) {
                    self.ready(conn).await?;
                }
                Ok(())
            }
            "agentfy/ready" if phase == Phase::AwaitReady => self.ready(conn).await,
            "agentfy/ready" if matches!(phase, Phase::AwaitResult | Phase::AwaitInitialized) => {
                // The host never sends tools/list before notifications/initialized (rule 14): hold it.
                eprintln!(
                    "toolchannel-host: conn#{conn} agentfy/ready before notifications/initialized: held until it arrives"
                );
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.early_ready = true;
                }
                Ok(())
            }
            "notifications/tools/list_changed" if phase == Phase::Serving => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.phase = Phase::AwaitToolsList;
                }
                self.request(conn, Method::ToolsList, json!({})).await
            }
            "notifications/message" | "notifications/progress" => {
                eprintln!("toolchannel-host: worker {method}: {}", value["params"]);
                Ok(())
            }
            other => {
                eprintln!(
                    "toolchannel-host: conn#{conn} {other} out of order in {phase:?}: logged and ignored"
                );
                Ok(())
            }
        }
    }

    async fn ready(&mut self, conn: u64) -> anyhow::Result<()> {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.phase = Phase::AwaitToolsList;
        }
        self.request(conn, Method::ToolsList, json!({})).await
    }

    async fn response(
        &mut self,
        conn: u64,
        method: Method,
        is_error: bool,
        value: &Value,
    ) -> anyhow::Result<()> {
        if is_error {
            eprintln!("toolchannel-host: {method} refused: {}", value["error"]);
            if method == Method::Initialize || method == Method::ToolsList {
                self.close(conn, CloseCodes::HandshakeDeadline, "handshake refused")
                    .await;
                self.fail("handshake_timeout");
            } else if method == Method::ToolsCall {
                self.call = CallState::Done;
                self.maybe_release(conn).await?;
            }
            return Ok(());
        }
        let result = &value["result"];
        match method {
            Method::Initialize => self.initialize_result(conn, result).await,
            Method::ToolsList => {
                let r: types::ListToolsResult = serde_json::from_value(result.clone())?;
                // Replace, never add (a superseding redial re-runs tools/list).
                self.tools = r.tools.iter().map(|t| t.name.to_string()).collect();
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.phase = Phase::Serving;
                }
                if self.state == State::Starting {
                    self.state = State::Running;
                }
                self.hb_deadline = Some(
                    Instant::now()
                        + Duration::from_secs(
                            self.hb_grace() + self.args.heartbeat_interval_seconds,
                        ),
                );
                eprintln!(
                    "toolchannel-host: session {} running; tools {:?}",
                    self.args.session_id, self.tools
                );
                if self.call == CallState::NotYet {
                    let Some(tool) = self
                        .args
                        .tool
                        .clone()
                        .or_else(|| self.tools.first().cloned())
                    else {
                        self.call = CallState::Done;
                        return self.maybe_release(conn).await;
                    };
                    let arguments: Value =
                        serde_json::from_str(&self.args.arguments).context("--arguments")?;
                    self.call = CallState::InFlight;
                    self.request(
                        conn,
                        Method::ToolsCall,
                        json!({"name": tool, "arguments": arguments}),
                    )
                    .await?;
                }
                Ok(())
            }
            Method::ToolsCall => {
                let r: types::CallToolResult = serde_json::from_value(result.clone())?;
                println!("{}", serde_json::to_string(&r)?);
                self.call = CallState::Done;
                self.maybe_release(conn).await
            }
            Method::AgentfyRelease => {
                let r: types::ReleaseResult = serde_json::from_value(result.clone())?;
                eprintln!(
                    "toolchannel-host: release report accepted={} outputsFlushed={} outputs={}",
                    r.accepted,
                    r.outputs_flushed,
                    r.outputs.len()
                );
                if r.accepted {
                    self.outputs_flushed = Some(r.outputs_flushed);
                } else {
                    self.state = State::Running;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn initialize_result(&mut self, conn: u64, result: &Value) -> anyhow::Result<()> {
        let r: types::InitializeResult = serde_json::from_value(result.clone())?;
        if r.protocol_version.as_str() != MCP_VERSION {
            let mut what = format!(
                "mcp host={MCP_VERSION} worker={}",
                r.protocol_version.as_str()
            );
            if self.args.brk == Some(Break::TerseClose) {
                eprintln!(
                    "toolchannel-host: --break terse-close: a close reason naming no version"
                );
                what = "mcp version unsupported".into();
            }
            self.close(conn, CloseCodes::VersionUnsupported, &what)
                .await;
            self.fail("channel_version");
            return Ok(());
        }
        let meta = &result["_meta"]["agentfy"];
        let sid = meta["sessionId"].as_str().unwrap_or("");
        if sid != self.args.session_id && self.args.brk == Some(Break::AnySession) {
            eprintln!("toolchannel-host: --break any-session: taking sessionId {sid}");
        } else if sid != self.args.session_id {
            let detail = format!("expected={} got={sid}", self.args.session_id);
            let reason = refused(ErrorCode::SessionMismatch, &detail);
            self.close_ws(conn, wire(CloseCodes::SessionRejected), &reason)
                .await;
            self.fail("session_mismatch");
            return Ok(());
        }
        let worker_cv = meta["channelVersion"].as_str().unwrap_or("");
        // Major versions must agree; an unreadable one is a mismatch too.
        let own = self.args.channel_version.clone();
        let (h, w) = match (semver(&own), semver(worker_cv)) {
            (Some(h), Some(w)) if h.0 == w.0 => (h, w),
            _ => {
                let detail = format!("host={own} worker={worker_cv}");
                let reason = refused(ErrorCode::ChannelVersionMismatch, &detail);
                self.close_ws(conn, wire(CloseCodes::VersionUnsupported), &reason)
                    .await;
                self.fail("channel_version");
                return Ok(());
            }
        };
        let effective = if w < h { worker_cv.to_string() } else { own };
        let instance = meta["instanceId"].as_str().unwrap_or("").to_string();
        let attempt = meta["attempt"].as_u64().unwrap_or(0);
        // One live connection per session: supersede (4009) or refuse (4002).
        if let Some(old) = self.live.filter(|l| *l != conn) {
            let current = self.conns.get(&old).and_then(|c| c.instance.clone());
            match current {
                Some((inst, att))
                    if inst == instance
                        && (attempt > att || self.args.brk == Some(Break::AnyAttempt)) =>
                {
                    let lost = self
                        .conns
                        .get(&old)
                        .is_some_and(|c| c.pending.values().any(|m| *m == Method::ToolsCall));
                    self.close(old, CloseCodes::Superseded, "superseded").await;
                    if lost {
                        // Its answer can no longer arrive; requests are not repeated on the new socket.
                        eprintln!(
                            "toolchannel-host: the in-flight tools/call went with the superseded socket; not retried"
                        );
                        self.call = CallState::Done;
                    }
                }
                Some((inst, att)) => {
                    let why = if inst != instance {
                        "different instanceId"
                    } else {
                        "attempt not greater"
                    };
                    let what = format!(
                        "duplicate connection: {why} (live {inst}#{att}, new {instance}#{attempt})"
                    );
                    self.close(conn, CloseCodes::SessionRejected, &what).await;
                    return Ok(());
                }
                None => self.close(old, CloseCodes::Superseded, "superseded").await,
            }
        }
        self.live = Some(conn);
        self.effective = Some(effective);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.instance = Some((instance.clone(), attempt));
            c.phase = Phase::AwaitInitialized;
        }
        eprintln!(
            "toolchannel-host: conn#{conn} bound: instance {instance} attempt {attempt}, effective channel {}",
            self.effective.clone().unwrap_or_default()
        );
        Ok(())
    }

    /// Release once the call returned and enough heartbeats arrived; never during a call (rule 15).
    async fn maybe_release(&mut self, conn: u64) -> anyhow::Result<()> {
        if self.state == State::Running
            && (self.call == CallState::Done || self.args.brk == Some(Break::BusyRelease))
            && self.heartbeats >= self.args.heartbeats
            && self.live == Some(conn)
        {
            self.state = State::Releasing {
                sent: Instant::now(),
            };
            let grace = match self.args.brk {
                Some(Break::OwnGrace) => self.args.release_grace_seconds + 1,
                _ => self.args.release_grace_seconds,
            };
            let params = json!({"sessionId": self.args.session_id, "reason": "explicit", "graceSeconds": grace});
            self.request(conn, Method::AgentfyRelease, params).await?;
        }
        Ok(())
    }

    /// The worker ended `conn`, with close `code` when it sent one.
    async fn gone(&mut self, conn: u64, code: Option<u16>, why: String) {
        let was_live = self.live == Some(conn);
        self.conns.remove(&conn);
        if was_live {
            self.live = None;
        }
        eprintln!("toolchannel-host: conn#{conn} closed by the worker: {why}");
        let releasing =
            matches!(self.state, State::Releasing { .. }) && self.outputs_flushed.is_some();
        if was_live && (code == Some(wire(CloseCodes::Released)) || releasing) {
            self.finish_release();
        }
        // Anything else: the worker may redial within its window; our timers keep running.
    }

    fn finish_release(&mut self) {
        if let Some(flushed) = self.outputs_flushed {
            self.state = State::Released { flushed };
        } else if matches!(self.state, State::Releasing { .. }) {
            self.state = State::Released { flushed: false };
        }
    }

    async fn tick(&mut self, started: Instant) {
        let now = Instant::now();
        let hs = Duration::from_secs(2 * self.args.handshake_seconds);
        let ready = Duration::from_secs(self.args.ready_seconds);
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        for id in ids {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            let (phase, opened, init_at) = (c.phase, c.opened, c.initialized_at);
            if matches!(phase, Phase::AwaitResult | Phase::AwaitInitialized) && now > opened + hs {
                let reason = match self.args.brk {
                    Some(Break::NamelessTimeout) => "timeout",
                    _ => "handshake_timeout",
                };
                self.close(id, CloseCodes::HandshakeDeadline, reason).await;
                self.fail("handshake_timeout");
            } else if matches!(phase, Phase::AwaitReady | Phase::AwaitToolsList)
                && init_at.is_some_and(|t| now > t + ready)
            {
                self.close(id, CloseCodes::HandshakeDeadline, "ready_timeout")
                    .await;
                self.fail("ready_timeout");
            } else if let Some(c) = self.conns.get_mut(&id)
                && now > c.last_ping + toolchannel::limits::WS_PING_INTERVAL_SECONDS
            {
                c.last_ping = now;
                let _ = c.sink.send(Ws::Ping(Default::default())).await;
            }
        }
        if self.state == State::Running
            && let Some(d) = self.hb_deadline
            && now > d
        {
            if let Some(l) = self.live {
                self.close(l, CloseCodes::HeartbeatLost, "heartbeat lost")
                    .await;
            }
            self.fail("heartbeat_timeout");
        }
        if let State::Releasing { sent } = self.state
            && now > sent + Duration::from_secs(self.args.release_grace_seconds)
        {
            eprintln!(
                "toolchannel-host: no release report within grace: deleting the sandbox, outputsFlushed=false"
            );
            self.outputs_flushed = Some(false);
            self.state = State::Released { flushed: false };
        }
        let bound = Duration::from_secs(
            self.args.dial_seconds + 2 * self.args.handshake_seconds + self.args.ready_seconds,
        );
        if self.state == State::Starting
            && self.conns.is_empty()
            && now > started + Duration::from_secs(self.args.dial_seconds)
        {
            self.fail("dial_timeout");
        } else if self.state == State::Starting && now > started + bound {
            self.fail("handshake_timeout");
        }
    }
}

/// HTTP upgrade checks: Bearer token (401) and subprotocol major (426).
#[allow(clippy::result_large_err)] // tungstenite's handshake callback type, not ours
fn upgrade_check(
    token: String,
    brk: Option<Break>,
) -> impl FnOnce(&Request, Response) -> Result<Response, ErrorResponse> {
    move |req: &Request, mut resp: Response| {
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if auth.strip_prefix("Bearer ") != Some(token.as_str()) && brk != Some(Break::AnyToken) {
            let mut e = ErrorResponse::new(Some("invalid or missing Bearer token".into()));
            *e.status_mut() = StatusCode::UNAUTHORIZED;
            return Err(e);
        }
        let offered = req
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !offered.split(',').any(|p| p.trim() == SUBPROTOCOL) {
            let mut e = ErrorResponse::new(Some(format!(
                "unsupported channel major {offered:?}; host speaks {SUBPROTOCOL}"
            )));
            *e.status_mut() = StatusCode::UPGRADE_REQUIRED;
            if brk != Some(Break::Unlisted) {
                e.headers_mut().insert(
                    "sec-websocket-protocol",
                    HeaderValue::from_static(SUBPROTOCOL),
                );
            }
            return Err(e);
        }
        resp.headers_mut().insert(
            "sec-websocket-protocol",
            HeaderValue::from_static(SUBPROTOCOL),
        );
        Ok(resp)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("toolchannel-host: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn run() -> anyhow::Result<u8> {
    let args = Args::parse();
    let interval = args.heartbeat_interval_seconds.max(1);
    let budgets = json!({
        "handshakeSeconds": args.handshake_seconds, "readySeconds": args.ready_seconds, "readyAckSeconds": (args.ready_seconds / 2).max(1),
        "heartbeatIntervalSeconds": interval, "heartbeatGraceSeconds": 3 * interval,
        "idleSeconds": 90, "maxExecSeconds": 900, "releaseGraceSeconds": args.release_grace_seconds, "reconnectWindowSeconds": 60
    });
    let _: types::Budgets = serde_json::from_value(budgets.clone()).context("budgets")?;
    let listener = TcpListener::bind(args.listen).await.context("bind")?;
    let port = listener.local_addr()?.port();
    eprintln!(
        "toolchannel-host: listening on ws://{}:{port}/worker",
        args.listen.ip()
    );
    if let Some(f) = &args.port_file {
        std::fs::write(f, format!("{port}\n"))?;
    }
    let token = args.token.clone();
    let brk = args.brk;
    let (tx, mut rx) = mpsc::channel::<Event>(64);
    let accept_tx = tx.clone();
    tokio::spawn(async move {
        let mut next = 1u64;
        while let Ok((tcp, peer)) = listener.accept().await {
            let id = next;
            next += 1;
            let tx = accept_tx.clone();
            let token = token.clone();
            tokio::spawn(async move {
                let up = tokio::time::timeout(
                    Duration::from_secs(10),
                    tokio_tungstenite::accept_hdr_async_with_config(
                        tcp,
                        upgrade_check(token, brk),
                        Some(ws_config()),
                    ),
                )
                .await;
                match up {
                    Ok(Ok(ws)) => {
                        eprintln!("toolchannel-host: conn#{id} upgraded from {peer}");
                        let _ = tx.send(Event::Opened(id, Box::new(ws))).await;
                    }
                    Ok(Err(e)) => {
                        eprintln!("toolchannel-host: conn#{id} from {peer} refused at upgrade: {e}")
                    }
                    Err(_) => {
                        eprintln!("toolchannel-host: conn#{id} from {peer}: upgrade timed out")
                    }
                }
            });
        }
    });

    let mut host = Host {
        budgets,
        conns: HashMap::new(),
        live: None,
        state: State::Starting,
        effective: None,
        tools: Vec::new(),
        call: CallState::NotYet,
        heartbeats: 0,
        hb_deadline: None,
        outputs_flushed: None,
        args,
    };
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        match &host.state {
            State::Released { flushed } => {
                eprintln!(
                    "toolchannel-host: session {} released (outputsFlushed={flushed})",
                    host.args.session_id
                );
                for id in host.conns.keys().copied().collect::<Vec<_>>() {
                    host.close_ws(id, CloseCode::Normal.into(), "session over")
                        .await;
                }
                return Ok(0);
            }
            State::Failed(reason) => {
                let reason = reason.clone();
                for id in host.conns.keys().copied().collect::<Vec<_>>() {
                    host.close(id, CloseCodes::HandshakeDeadline, &reason).await;
                }
                eprintln!(
                    "toolchannel-host: session {} failed: failureReason={reason}",
                    host.args.session_id
                );
                return Ok(1);
            }
            _ => {}
        }
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Event::Opened(id, ws)) => {
                    let (sink, mut stream) = (*ws).split();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let why = loop {
                            match stream.next().await {
                                Some(Ok(m)) => {
                                    let close = matches!(m, Ws::Close(_));
                                    if tx.send(Event::Frame(id, m)).await.is_err() || close {
                                        break String::new();
                                    }
                                }
                                Some(Err(WsError::Capacity(e))) => {
                                    let _ = tx.send(Event::TooBig(id, e.to_string())).await;
                                    break String::new();
                                }
                                Some(Err(e)) => break format!("transport break: {e}"),
                                None => break "transport break".to_string(),
                            }
                        };
                        if !why.is_empty() {
                            let broke = CloseCodes::TransportBreak.value();
                            let _ = tx.send(Event::Gone(id, format!("{broke} {why}"))).await;
                        }
                    });
                    host.opened(id, sink).await?;
                }
                Some(Event::Frame(id, m)) => host.frame(id, m).await?,
                Some(Event::TooBig(id, why)) => host.close(id, CloseCodes::MessageTooBig, &why).await,
                Some(Event::Gone(id, why)) => {
                    if host.conns.contains_key(&id) {
                        host.gone(id, None, why).await;
                    }
                }
                None => anyhow::bail!("event channel closed"),
            },
            _ = tick.tick() => host.tick(started).await,
        }
    }
}
