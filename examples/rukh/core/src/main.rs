//! `rukh-core`: the reference Rukh core of issue 8 (contract `schema/contracts/rukh.json`).
//!
//! It creates an `AF_UNIX`/`SOCK_STREAM` socket pair, launches the extension
//! command with one end as fd 3 (`RUKH_IPC_FD=3` says so too; contract note R-2
//! leaves locating the end to the adapter, and fd 3 is what the proxy's
//! `exec-fd:3` stand-in uses), closes its copy of that end, and speaks the
//! strict JSON-RPC profile through the generated bindings
//! (`contract_generated::rukh`, every frame validated by `contract::Connection`):
//! `rukh.initialize` first, one `rukh.invoke`, answers to `rukh.call`, bounded
//! `rukh.log` intake, `rukh.cancel` on deadline/signal/`--cancel-after-ms`, and
//! `rukh.close` after the completion message. Request IDs are `c:N` (gapless)
//! and the extension's `e:N` are checked.
//!
//! Exit code (P3.3 CLI table, R-24): succeeded 0; command_failed the process's own
//! code; rejected/execution_failed 125; cancelled user_request/owner_shutdown 130,
//! deadline_exceeded 124.
//!
//! `--break before-initialize` sends a `rukh.invoke` before `rukh.initialize`
//! on purpose, so a conformance suite or the proxy can catch it; `--break any-context`
//! serves a rukh.call whatever session or invocation id it repeats;
//! `--break any-result` takes a commandResult it never offered command-result/1 for
//! `--break error-ok` takes an error response to rukh.invoke for a
//! succeeded completion, and `--break eof-ok` an EOF before the completion for a
//! succeeded run.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use command_fds::{CommandFdExt, FdMapping};
use contract::io::IoError;
use contract::model::{ActionKind, Kind};
use contract::wire::{Message, ViolationClass};
use contract_generated::rukh::{self, Channel, Method, Party, limits, types};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::net::UnixStream;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

/// The fd the extension finds its control end on.
const IPC_FD: i32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum KindArg {
    Execute,
    Describe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Break {
    /// Send a request (rukh.invoke) before rukh.initialize.
    BeforeInitialize,
    /// Serve a rukh.call whatever session or invocation id it repeats (no R-15 check).
    AnyContext,
    /// Take a commandResult the core never offered command-result/1 for (no R-12 check).
    AnyResult,
    /// Take an error response to rukh.invoke for a succeeded completion (no R-11 check).
    ErrorOk,
    /// Take an EOF before the completion for a succeeded run (no P3.6 rule 14 check).
    EofOk,
}

/// Launch one extension for one invocation and report the typed outcome as the exit code.
#[derive(Debug, Parser)]
#[command(name = "rukh-core")]
struct Args {
    /// Invocation kind pinned before launch.
    #[arg(long, value_enum, default_value = "execute")]
    kind: KindArg,
    /// Parsed typed inputs (a JSON object) for execute.
    #[arg(long, default_value = "{}")]
    inputs: String,
    /// IDs of the explicitly passed parameters (comma-separated).
    #[arg(long, value_delimiter = ',')]
    explicit: Vec<String>,
    /// Offer the optional capability command-result/1.
    #[arg(long)]
    command_result: bool,
    /// Invocation deadline in ms (expiry: cancel deadline_exceeded, exit 124).
    #[arg(long, default_value_t = 30_000)]
    deadline_ms: u64,
    /// Cancel with user_request this many ms after invoke (exit 130).
    #[arg(long)]
    cancel_after_ms: Option<u64>,
    /// Break one rule on purpose.
    #[arg(long = "break", value_enum)]
    brk: Option<Break>,
    /// The extension command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// The typed result of the invocation (P3.3 outcomes).
#[derive(Debug, Clone)]
enum Outcome {
    Succeeded,
    CommandFailed { reported: Option<i64> },
    ExecutionFailed(String),
    Cancelled(types::CancelReason),
}

/// A protocol error: the invocation ends with execution_failed.
#[derive(Debug)]
struct Protocol(String);

type Conn = contract::Connection<UnixStream>;

const SESSION_ID: &str = "s-ref-0001";
const INVOCATION_ID: &str = "inv-ref-0001";
const CONTRACT_ID: &str = "demo/echo";
const CONTRACT_VERSION: &str = "1.0.0";
const COMMAND_RESULT: &str = "command-result/1";

fn request<P: Serialize>(id: &str, method: Method, params: &P) -> anyhow::Result<types::Request> {
    let Value::Object(map) = serde_json::to_value(params)? else {
        bail!("params of {method} are not an object")
    };
    Ok(types::Request {
        id: id.parse()?,
        jsonrpc: types::JsonRpcVersion::X20,
        method: method.name().parse()?,
        params: Some(types::Params(map)),
    })
}

fn success(id: &Value, result: Value) -> anyhow::Result<types::SuccessResponse> {
    Ok(types::SuccessResponse {
        id: serde_json::from_value(id.clone())?,
        jsonrpc: types::JsonRpcVersion::X20,
        result,
    })
}

fn error(
    id: &Value,
    code: rukh::ErrorCode,
    message: &str,
    data: Option<types::ErrorData>,
) -> anyhow::Result<types::ErrorResponse> {
    Ok(types::ErrorResponse {
        error: types::JsonRpcError {
            code: code.code(),
            data,
            message: message.to_string(),
        },
        id: Some(serde_json::from_value(id.clone())?),
        jsonrpc: types::JsonRpcVersion::X20,
    })
}

/// Counter of `prefix:N`, if `id` has exactly that shape.
fn counter(id: &Value, prefix: &str) -> Option<u64> {
    id.as_str()?.strip_prefix(prefix)?.parse().ok()
}

/// Token buckets of the log intake (R-26: burst = rate, per second).
struct LogIntake {
    window: Instant,
    records: u64,
    bytes: u64,
    accepted: u64,
    dropped: u64,
}

impl LogIntake {
    fn admit(&mut self, size: u64) -> bool {
        let now = Instant::now();
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.records = 0;
            self.bytes = 0;
        }
        let rec_cap = limits::LOG_INTAKE_RECORDS_RATE.amount;
        let byte_cap = limits::LOG_INTAKE_BYTES_RATE.amount;
        if self.records < rec_cap && self.bytes + size <= byte_cap {
            self.records += 1;
            self.bytes += size;
            self.accepted += 1;
            true
        } else {
            self.dropped += 1;
            false
        }
    }
}

struct Core {
    conn: Conn,
    next_id: u64,
    /// Our requests awaiting an answer, by id.
    pending: HashMap<String, Method>,
    /// Our requests whose wait an accepted cancel ended.
    ended: HashSet<String>,
    /// Next counter the extension must use.
    ext_next: u64,
    invoke_id: Option<String>,
    completion: Option<types::InvokeResult>,
    /// After the completion or an accepted cancel: no new work.
    closing: bool,
    confirmed_caps: Vec<String>,
    kind: KindArg,
    logs: LogIntake,
    late: u64,
    unknown_notifications: u64,
    /// Serve calls whatever context they repeat (`--break any-context`).
    any_context: bool,
    /// Take any commandResult (`--break any-result`).
    any_result: bool,
    /// Take an invoke error for a success (`--break error-ok`).
    error_ok: bool,
}

impl Core {
    async fn send_request<P: Serialize>(
        &mut self,
        method: Method,
        params: &P,
    ) -> anyhow::Result<String> {
        let id = format!("c:{}", self.next_id);
        self.next_id += 1;
        self.conn.send(&request(&id, method, params)?).await?;
        self.pending.insert(id.clone(), method);
        Ok(id)
    }

    /// Handle one incoming message after the handshake. `Ok(true)` when the
    /// close acknowledgement arrived.
    async fn on_message(&mut self, msg: Message) -> Result<bool, Protocol> {
        match msg.kind {
            Kind::Request => self.on_request(msg).await.map(|_| false),
            Kind::Notification | Kind::Event => {
                if msg.method.as_deref() == Some(Method::RukhLog.name()) {
                    self.on_log(&msg);
                } else {
                    self.unknown_notifications += 1;
                }
                Ok(false)
            }
            Kind::Response | Kind::Error => self.on_response(msg),
        }
    }

    fn check_ext_id(&mut self, id: Option<&Value>) -> Result<(), Protocol> {
        let Some(id) = id else {
            return Err(Protocol("request without id".into()));
        };
        match counter(id, "e:") {
            Some(n) if n == self.ext_next => {
                self.ext_next += 1;
                Ok(())
            }
            Some(n) => Err(Protocol(format!(
                "request_id_violation: extension id {id} (counter {n}), expected e:{}",
                self.ext_next
            ))),
            None => Err(Protocol(format!(
                "wrong_direction: extension request id {id}"
            ))),
        }
    }

    async fn reply(&mut self, r: anyhow::Result<impl Serialize>) -> Result<(), Protocol> {
        let r = r.map_err(|e| Protocol(format!("building a reply: {e}")))?;
        self.conn
            .send(&r)
            .await
            .map_err(|e| Protocol(format!("sending a reply: {e}")))?;
        Ok(())
    }

    async fn on_request(&mut self, msg: Message) -> Result<(), Protocol> {
        self.check_ext_id(msg.id.as_ref())?;
        let id = msg.id.clone().unwrap_or(Value::Null);
        let params = msg.value.get("params").cloned();
        let call = match rukh::Call::from_parts(msg.method.as_deref().unwrap_or(""), params) {
            Ok(rukh::Call::RukhCall(p)) => p,
            Ok(other) => {
                return Err(Protocol(format!(
                    "wrong_direction: {} from the extension",
                    other.method()
                )));
            }
            Err(e) => {
                let r = error(
                    &id,
                    rukh::ErrorCode::try_from(-32602).map_err(|e| Protocol(e.to_string()))?,
                    &format!("invalid params: {e}"),
                    None,
                );
                return self.reply(r).await;
            }
        };
        // a repeated context field must match exactly; the mismatch is answered
        // -32000 context_mismatch and ends the invocation (the agreements' reaction, R-44).
        let mismatch = call
            .session_id
            .as_ref()
            .is_some_and(|s| s.as_str() != SESSION_ID)
            || call
                .invocation_id
                .as_ref()
                .is_some_and(|s| s.as_str() != INVOCATION_ID);
        if mismatch && !self.any_context {
            let data: types::ErrorData =
                serde_json::from_value(json!({"reason": "context_mismatch"}))
                    .map_err(|e| Protocol(e.to_string()))?;
            let r = error(&id, code(-32000)?, "context mismatch", Some(data));
            self.reply(r).await?;
            return Err(Protocol("context_mismatch in rukh.call".into()));
        }
        if self.closing {
            let r = error(&id, code(-32007)?, "session closing", None);
            return self.reply(r).await;
        }
        // Core operations this reference core registers; everything else is a typed denial.
        let input = Value::Object(call.input.clone());
        let r = match (call.operation.as_str(), call.version.as_str()) {
            ("demo.echo", "1") => success(&id, json!({"output": input})).map(Reply::Ok),
            ("demo.clock", "1") => {
                let ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                success(&id, json!({"output": {"unixMs": ms}})).map(Reply::Ok)
            }
            (op, v) => {
                let data: types::ErrorData = serde_json::from_value(json!({
                    "operationError": {"type": "not_found", "message": format!("no operation {op} version {v}")}
                }))
                .map_err(|e| Protocol(e.to_string()))?;
                error(&id, code(-32004)?, "operation error", Some(data)).map(Reply::Err)
            }
        };
        self.reply(r).await
    }

    fn on_log(&mut self, msg: &Message) {
        let size = serde_json::to_vec(&msg.value)
            .map(|v| v.len() as u64)
            .unwrap_or(u64::MAX);
        if self.logs.admit(size) {
            let p = &msg.value["params"];
            // Diagnostics go to stderr with trusted metadata, never to stdout (command data).
            eprintln!(
                "rukh-core: [ext log session={SESSION_ID}] {} {}",
                p["level"].as_str().unwrap_or("?"),
                p["message"].as_str().unwrap_or("")
            );
        }
    }

    fn on_response(&mut self, msg: Message) -> Result<bool, Protocol> {
        let id = msg
            .correlation
            .clone()
            .or(msg.id.clone())
            .unwrap_or(Value::Null);
        let key = id.as_str().unwrap_or("").to_string();
        if self.invoke_id.as_deref() == Some(key.as_str()) && self.completion.is_some() {
            return Err(Protocol("duplicate_completion for rukh.invoke".into()));
        }
        let Some(method) = self.pending.remove(&key) else {
            if self.ended.remove(&key) {
                self.late += 1;
                return Ok(false);
            }
            return Err(Protocol(format!("unknown_response_id {id}")));
        };
        let is_error = msg.kind == Kind::Error;
        match method {
            Method::RukhInvoke => {
                if is_error && !self.error_ok {
                    return Err(Protocol(format!(
                        "error response to rukh.invoke: {}",
                        msg.value["error"]
                    )));
                }
                let result = match is_error {
                    true => json!({"status": "succeeded"}),
                    false => msg.value["result"].clone(),
                };
                let r: types::InvokeResult = serde_json::from_value(result)
                    .map_err(|e| Protocol(format!("invoke result: {e}")))?;
                let (cr, help) = match &r {
                    types::InvokeResult::SucceededCompletion(s) => {
                        (s.command_result.is_some(), s.help.is_some())
                    }
                    types::InvokeResult::CommandFailedCompletion(f) => {
                        (f.command_result.is_some(), false)
                    }
                };
                // commandResult only with command-result/1 on execute; help only for describe.
                if cr
                    && !self.any_result
                    && (self.kind != KindArg::Execute
                        || !self.confirmed_caps.iter().any(|c| c == COMMAND_RESULT))
                {
                    return Err(Protocol("capability_not_negotiated: commandResult".into()));
                }
                if help && self.kind != KindArg::Describe {
                    return Err(Protocol("help in an execute completion".into()));
                }
                self.completion = Some(r);
                self.closing = true;
                Ok(false)
            }
            Method::RukhClose => Ok(!is_error),
            // Cancel/ui acks carry nothing the core relies on.
            _ => Ok(false),
        }
    }
}

enum Reply {
    Ok(types::SuccessResponse),
    Err(types::ErrorResponse),
}

impl Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Reply::Ok(r) => r.serialize(s),
            Reply::Err(r) => r.serialize(s),
        }
    }
}

fn code(n: i64) -> Result<rukh::ErrorCode, Protocol> {
    rukh::ErrorCode::try_from(n).map_err(|e| Protocol(e.to_string()))
}

/// What a receive error means: a counted log drop, an unknown request to
/// answer, or a protocol error.
enum RecvFault {
    /// Dropped and counted; `log` says whether it was a rukh.log record.
    Drop {
        log: bool,
    },
    Unknown(Value),
    BadParams(Value, String),
    Fatal(String),
}

fn classify(e: IoError) -> RecvFault {
    if let IoError::Violation(v) = &e {
        let method = v.partial.as_ref().and_then(|m| m.method.clone());
        let id = v.partial.as_ref().and_then(|m| m.id.clone());
        // What the contract says to ignore (an unknown notification, a rukh.log
        // over its cap) is dropped and counted, never an error.
        let log = method.as_deref() == Some(Method::RukhLog.name());
        if v.action == Some(ActionKind::Ignore) {
            return RecvFault::Drop { log };
        }
        match v.class {
            ViolationClass::InvalidParams if log => return RecvFault::Drop { log },
            ViolationClass::UnknownRequest => {
                if let Some(id) = id {
                    return RecvFault::Unknown(id);
                }
            }
            ViolationClass::InvalidParams => {
                if let (Some(id), Some(Method::RukhCall)) =
                    (id, method.as_deref().and_then(|m| m.parse::<Method>().ok()))
                {
                    return RecvFault::BadParams(id, v.reason.clone());
                }
            }
            _ => {}
        }
    }
    RecvFault::Fatal(e.to_string())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("rukh-core: execution_failed: {e:#}");
            ExitCode::from(125)
        }
    }
}

async fn run() -> anyhow::Result<u8> {
    let args = Args::parse();
    let inputs: Map<String, Value> =
        serde_json::from_str(&args.inputs).context("--inputs must be a JSON object")?;
    let invocation_deadline = Instant::now() + Duration::from_millis(args.deadline_ms);

    // Signals are ours from before the launch: an interrupt at any point is a
    // cancel with its reason (exit 130), never the default death by signal.
    let mut signals = Signals::new()?;
    // Prepared: both ends exist before launch; only the extension's end crosses exec.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().context("socketpair")?;
    let mut cmd = tokio::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("RUKH_IPC_FD", IPC_FD.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd.fd_mappings(vec![FdMapping {
        parent_fd: OwnedFd::from(theirs),
        child_fd: IPC_FD,
    }])
    .map_err(|_| anyhow::anyhow!("fd mapping collision"))?;
    let mut child = cmd
        .spawn()
        .with_context(|| format!("launching {:?}", args.command))?;
    // Close our copy of the extension's end right after launch, so its exit gives us EOF.
    drop(cmd);
    ours.set_nonblocking(true)?;
    let conn = rukh::connect(UnixStream::from_std(ours)?, Channel::Ipc, Party::Core)?;

    let mut core = Core {
        conn,
        next_id: 1,
        pending: HashMap::new(),
        ended: HashSet::new(),
        ext_next: 1,
        invoke_id: None,
        completion: None,
        closing: false,
        confirmed_caps: Vec::new(),
        kind: args.kind,
        any_context: args.brk == Some(Break::AnyContext),
        any_result: args.brk == Some(Break::AnyResult),
        error_ok: args.brk == Some(Break::ErrorOk),
        logs: LogIntake {
            window: Instant::now(),
            records: 0,
            bytes: 0,
            accepted: 0,
            dropped: 0,
        },
        late: 0,
        unknown_notifications: 0,
    };
    let outcome = session(&mut core, &args, inputs, invocation_deadline, &mut signals).await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => Outcome::ExecutionFailed(format!("{e:#}")),
    };
    // Whatever happened, the channel is ours to close; then the process must stop within the stop deadline.
    let _ = core.conn.close().await;
    drop(core.conn);
    let status = stop(&mut child, &outcome).await;
    eprintln!(
        "rukh-core: logs accepted={} dropped={} late={} unknown_notifications={}",
        core.logs.accepted, core.logs.dropped, core.late, core.unknown_notifications
    );
    Ok(reconcile(outcome, status))
}

/// Voluntary stop within 2 s, forced within the single 5 s stop deadline.
async fn stop(child: &mut tokio::process::Child, outcome: &Outcome) -> Option<ExitStatus> {
    let stop_deadline = Instant::now() + limits::STOP_DEADLINE_SECONDS;
    let voluntary = Instant::now() + limits::VOLUNTARY_STOP_SECONDS;
    if let Ok(Ok(s)) = tokio::time::timeout_at(voluntary, child.wait()).await {
        return Some(s);
    }
    if !matches!(outcome, Outcome::Succeeded | Outcome::CommandFailed { .. }) {
        eprintln!("rukh-core: extension did not stop voluntarily; killing it");
    }
    let _ = child.start_kill();
    match tokio::time::timeout_at(stop_deadline, child.wait()).await {
        Ok(Ok(_)) | Ok(Err(_)) | Err(_) => None,
    }
}

/// Exit status reconciliation (P3.6 rule 15) and the CLI code table.
fn reconcile(outcome: Outcome, status: Option<ExitStatus>) -> u8 {
    let code = status.and_then(|s| s.code());
    let (result, exit) = match outcome {
        Outcome::Cancelled(types::CancelReason::DeadlineExceeded) => {
            ("cancelled(deadline_exceeded)".to_string(), 124)
        }
        Outcome::Cancelled(r) => (format!("cancelled({r})"), 130),
        Outcome::ExecutionFailed(why) => (format!("execution_failed: {why}"), 125),
        Outcome::Succeeded => match code {
            Some(0) => ("succeeded".into(), 0),
            _ => (
                format!("execution_failed: success message but process status {status:?}"),
                125,
            ),
        },
        Outcome::CommandFailed { reported } => match code {
            Some(c) if c != 0 && reported.is_none_or(|r| r == i64::from(c)) => (
                format!("command_failed (exit {c})"),
                u8::try_from(c & 0xff).unwrap_or(125),
            ),
            _ => (
                format!(
                    "execution_failed: command_failed {reported:?} but process status {status:?} (signal {:?})",
                    status.and_then(|s| s.signal())
                ),
                125,
            ),
        },
    };
    eprintln!("rukh-core: result {result}; exit {exit}");
    exit
}

/// SIGINT and SIGTERM, registered once at start-up.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// The cancel reason of the next signal.
    async fn next(&mut self) -> types::CancelReason {
        tokio::select! {
            _ = self.int.recv() => types::CancelReason::UserRequest,
            _ = self.term.recv() => types::CancelReason::OwnerShutdown,
        }
    }
}

async fn session(
    core: &mut Core,
    args: &Args,
    inputs: Map<String, Value>,
    deadline: Instant,
    signals: &mut Signals,
) -> anyhow::Result<Outcome> {
    let caps: Vec<&str> = if args.command_result {
        vec![COMMAND_RESULT]
    } else {
        vec![]
    };
    let kind = match args.kind {
        KindArg::Execute => "execute",
        KindArg::Describe => "describe",
    };
    let invoke_params: types::InvokeParams = match args.kind {
        KindArg::Execute => serde_json::from_value(json!({
            "kind": "execute", "sessionId": SESSION_ID, "inputs": inputs, "explicit": args.explicit,
            "timeoutMs": deadline.saturating_duration_since(Instant::now()).as_millis() as u64
        }))?,
        KindArg::Describe => {
            serde_json::from_value(json!({"kind": "describe", "request": {"topic": "demo"}}))?
        }
    };

    if args.brk == Some(Break::BeforeInitialize) {
        eprintln!(
            "rukh-core: --break before-initialize: sending rukh.invoke before rukh.initialize"
        );
        let id = core
            .send_request(Method::RukhInvoke, &invoke_params)
            .await?;
        core.invoke_id = Some(id);
    }

    // Initializing: only rukh.initialize and its answer (5 s, capped by the invocation deadline).
    let init: types::InitializeParams = serde_json::from_value(json!({
        "sessionId": SESSION_ID, "invocationId": INVOCATION_ID, "kind": kind,
        "command": "demo echo",
        "release": {"name": "rukh-demo", "version": "0.1.0"},
        "contract": {"id": CONTRACT_ID, "version": CONTRACT_VERSION},
        "protocol": {"wire": "rukh-ipc/1", "frame": "u32be-json/1", "interaction": "rukh-interaction/1"},
        "capabilities": caps,
        "limits": {
            "maxFramePayloadBytes": limits::FRAME_PAYLOAD_MAX, "maxLifecyclePayloadBytes": limits::LIFECYCLE_PAYLOAD_MAX,
            "maxDepth": limits::JSON_DEPTH_MAX, "maxItems": limits::JSON_ITEMS_MAX,
            "maxPendingRequests": limits::PENDING_REQUESTS_MAX, "sendQueueFrames": limits::SEND_QUEUE_FRAMES_MAX,
            "sendQueueBytes": limits::SEND_QUEUE_BYTES_MAX, "logRecordsPerSecond": limits::LOG_INTAKE_RECORDS_RATE.amount,
            "logBytesPerSecond": limits::LOG_INTAKE_BYTES_RATE.amount,
            "frameTimeoutMs": limits::INCOMPLETE_FRAME_SECONDS.as_millis() as u64
        }
    }))?;
    let init_id = core.send_request(Method::RukhInitialize, &init).await?;
    let init_deadline = (Instant::now() + limits::INITIALIZE_SECONDS).min(deadline);
    // A signal before the handshake is confirmed cancels before any invoke.
    let waited = tokio::select! {
        r = tokio::time::timeout_at(init_deadline, core.conn.recv()) => r,
        reason = signals.next() => return Ok(Outcome::Cancelled(reason)),
    };
    let reply = match waited {
        Err(_) if init_deadline >= deadline => {
            return Ok(Outcome::Cancelled(types::CancelReason::DeadlineExceeded));
        }
        Err(_) => {
            return Ok(Outcome::ExecutionFailed(
                "initialization deadline expired".into(),
            ));
        }
        Ok(Err(e)) => {
            return Ok(Outcome::ExecutionFailed(format!(
                "during initialization: {e}"
            )));
        }
        Ok(Ok(None)) => {
            return Ok(Outcome::ExecutionFailed(
                "early_eof during initialization".into(),
            ));
        }
        Ok(Ok(Some(m))) => m,
    };
    let answers_init = matches!(reply.kind, Kind::Response | Kind::Error)
        && reply.correlation.as_ref().and_then(Value::as_str) == Some(init_id.as_str());
    if !answers_init {
        return Ok(Outcome::ExecutionFailed(format!(
            "state_violation: {:?} {:?} before the handshake was confirmed",
            reply.kind, reply.method
        )));
    }
    core.pending.remove(&init_id);
    if reply.kind == Kind::Error {
        return Ok(Outcome::ExecutionFailed(format!(
            "initialize refused: {}",
            reply.value["error"]
        )));
    }
    let confirmed: types::InitializeResult = serde_json::from_value(reply.value["result"].clone())?;
    let offered: HashSet<&str> = caps.iter().copied().collect();
    let got: HashSet<&str> = confirmed.capabilities.iter().map(|c| c.as_str()).collect();
    if confirmed.session_id.as_str() != SESSION_ID
        || confirmed.contract.id.as_str() != CONTRACT_ID
        || confirmed.contract.version.as_str() != CONTRACT_VERSION
        || offered != got
        || serde_json::to_value(&confirmed.protocol)? != serde_json::to_value(&init.protocol)?
    {
        return Ok(Outcome::ExecutionFailed(format!(
            "initialize result does not confirm the pinned session: {}",
            reply.value["result"]
        )));
    }
    core.confirmed_caps = confirmed
        .capabilities
        .iter()
        .map(|c| c.to_string())
        .collect();
    eprintln!(
        "rukh-core: handshake confirmed (adapter {:?})",
        confirmed.adapter.map(|a| a.name)
    );

    // Confirmed: exactly one invoke.
    if core.invoke_id.is_none() {
        let id = core
            .send_request(Method::RukhInvoke, &invoke_params)
            .await?;
        core.invoke_id = Some(id);
    }
    let far = Instant::now() + Duration::from_secs(24 * 3600);
    let cancel_at = args
        .cancel_after_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms))
        .unwrap_or(far);
    let mut close_deadline = far;
    let mut close_sent = false;

    loop {
        let cancel = tokio::select! {
            m = core.conn.recv() => {
                match m {
                    Ok(Some(msg)) => match core.on_message(msg).await {
                        Ok(true) => break,
                        Ok(false) => None,
                        Err(Protocol(why)) => return Ok(Outcome::ExecutionFailed(format!("protocol_error: {why}"))),
                    },
                    Ok(None) => {
                        return Ok(if close_sent {
                            Outcome::ExecutionFailed("early_eof before the close acknowledgement".into())
                        } else if args.brk == Some(Break::EofOk) {
                            Outcome::Succeeded
                        } else {
                            Outcome::ExecutionFailed("early_eof before the completion message".into())
                        });
                    }
                    Err(e) => match classify(e) {
                        RecvFault::Drop { log: true } => { core.logs.dropped += 1; None }
                        RecvFault::Drop { log: false } => { core.unknown_notifications += 1; None }
                        RecvFault::Unknown(id) => {
                            if let Err(Protocol(why)) = core.check_ext_id(Some(&id)) {
                                return Ok(Outcome::ExecutionFailed(format!("protocol_error: {why}")));
                            }
                            core.conn.send(&error(&id, code(-32601).map_err(|p| anyhow::anyhow!(p.0))?, "method not found", None)?).await?;
                            None
                        }
                        RecvFault::BadParams(id, why) => {
                            if let Err(Protocol(why)) = core.check_ext_id(Some(&id)) {
                                return Ok(Outcome::ExecutionFailed(format!("protocol_error: {why}")));
                            }
                            core.conn.send(&error(&id, code(-32602).map_err(|p| anyhow::anyhow!(p.0))?, &why, None)?).await?;
                            None
                        }
                        RecvFault::Fatal(why) => return Ok(Outcome::ExecutionFailed(format!("protocol_error: {why}"))),
                    },
                }
            }
            _ = sleep_until(deadline), if core.completion.is_none() => Some(types::CancelReason::DeadlineExceeded),
            _ = sleep_until(cancel_at), if core.completion.is_none() => Some(types::CancelReason::UserRequest),
            reason = signals.next(), if core.completion.is_none() => Some(reason),
            _ = sleep_until(close_deadline) => {
                return Ok(Outcome::ExecutionFailed("stop deadline expired before the close acknowledgement".into()));
            }
        };
        if let Some(reason) = cancel {
            // Accepted cancel: first reason wins; the ack is neither awaited nor proof of the stop.
            core.closing = true;
            let ended: Vec<String> = core.pending.drain().map(|(k, _)| k).collect();
            core.ended.extend(ended);
            let params: types::CancelParams = serde_json::from_value(json!({"reason": reason}))?;
            let id = core.send_request(Method::RukhCancel, &params).await?;
            core.pending.remove(&id);
            core.ended.insert(id.clone());
            eprintln!("rukh-core: cancel accepted ({reason})");
            // Voluntary stop: keep reading (acks, late answers, logs) until the
            // extension closes its end, at most until the voluntary-stop bound.
            let voluntary = Instant::now() + limits::VOLUNTARY_STOP_SECONDS;
            while let Ok(Ok(Some(msg))) = tokio::time::timeout_at(voluntary, core.conn.recv()).await
            {
                match msg.kind {
                    Kind::Response | Kind::Error => {
                        let key = msg
                            .correlation
                            .as_ref()
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string();
                        if core.ended.remove(&key) && key != id {
                            core.late += 1;
                        }
                    }
                    Kind::Notification | Kind::Event => core.on_log(&msg),
                    // Requests after the cancel are not run.
                    Kind::Request => {
                        if let Some(rid) = &msg.id {
                            core.conn
                                .send(&error(
                                    rid,
                                    code(-32007).map_err(|p| anyhow::anyhow!(p.0))?,
                                    "session closing",
                                    None,
                                )?)
                                .await?;
                        }
                    }
                }
            }
            return Ok(Outcome::Cancelled(reason));
        }
        if core.completion.is_some() && !close_sent {
            // Completing: the valid completion message pins the single stop deadline.
            close_deadline = Instant::now() + limits::STOP_DEADLINE_SECONDS;
            let params: types::CloseParams =
                serde_json::from_value(json!({"sessionId": SESSION_ID}))?;
            core.send_request(Method::RukhClose, &params).await?;
            close_sent = true;
        }
    }
    // Close acknowledged: the adapter closes its end; EOF must follow.
    match tokio::time::timeout_at(close_deadline, core.conn.recv()).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(m))) => {
            return Ok(Outcome::ExecutionFailed(format!(
                "state_violation: {:?} after the close acknowledgement",
                m.method
            )));
        }
        Ok(Err(e)) => return Ok(Outcome::ExecutionFailed(format!("after close: {e}"))),
        Err(_) => {
            return Ok(Outcome::ExecutionFailed(
                "no EOF after the close acknowledgement".into(),
            ));
        }
    }
    Ok(match core.completion.take() {
        Some(types::InvokeResult::SucceededCompletion(s)) => {
            if let Some(sum) = s.summary {
                eprintln!("rukh-core: summary: {sum}");
            }
            if let Some(cr) = s.command_result {
                println!("{}", serde_json::to_string(&cr)?);
            }
            if let Some(h) = s.help {
                println!("{}", serde_json::to_string(&h)?);
            }
            Outcome::Succeeded
        }
        Some(types::InvokeResult::CommandFailedCompletion(f)) => {
            eprintln!(
                "rukh-core: command failed: {}",
                f.message.unwrap_or_default()
            );
            Outcome::CommandFailed {
                reported: f.exit_code,
            }
        }
        None => Outcome::ExecutionFailed("closed without a completion message".into()),
    })
}
