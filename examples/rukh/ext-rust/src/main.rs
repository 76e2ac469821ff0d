//! `rukh-ext`: the reference Rust extension of issue 8 (contract `schema/contracts/rukh.json`).
//!
//! It takes its control end from the inherited fd (`--fd`, else `RUKH_IPC_FD`,
//! else 3 — the convention `rukh-core` and the proxy's `exec-fd:3` use), marks
//! it close-on-exec so nothing it might launch inherits it, and answers the
//! core through the generated bindings (`contract::Connection` validates every
//! frame): `rukh.initialize` (echo of the pinned context, or -32003 for an
//! unsupported capability), one `rukh.invoke` (execute: one `rukh.log`, then
//! `rukh.call demo.echo` and `rukh.call demo.clock`; describe: help),
//! `rukh.ui.event`, `rukh.cancel` and `rukh.close`. The core's request IDs must
//! be `c:1, c:2, …`; before the handshake only `rukh.initialize` is
//! accepted (-32001, R-38).
//!
//! Execute inputs it understands: `{"exit": N}` (complete command_failed with
//! exit code N and exit N), `{"sleepMs": N}` (work that long; cancellable).
//! `--break id-gap` makes its second request skip one counter (e:1 then e:3);
//! `--break other-session` confirms another session id than the one pinned;
//! `--break any-kind` serves an invoke of another kind than the pinned one;
//! `--break any-capability` confirms a session whatever capabilities it is offered;
//! `--break unoffered-result` completes an execute with a commandResult though the core did
//! not offer command-result/1.

use std::os::fd::{FromRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use contract::io::IoError;
use contract::model::{ActionKind, Kind};
use contract::wire::Message;
use contract_generated::rukh::{self, Channel, Method, Party, types};
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::UnixStream;
use tokio::time::{Instant, sleep_until};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Break {
    /// The second request id skips one counter value.
    IdGap,
    /// The initialize result confirms another session id than the one pinned.
    OtherSession,
    /// An invoke of another kind than the pinned one is served as it comes.
    AnyKind,
    /// A session offering a capability it does not support is confirmed.
    AnyCapability,
    /// An execute completes with a commandResult the core never offered
    /// command-result/1 for.
    UnofferedResult,
}

#[derive(Debug, Parser)]
#[command(name = "rukh-ext")]
struct Args {
    /// Inherited fd of the control channel (default: $RUKH_IPC_FD, else 3).
    #[arg(long)]
    fd: Option<i32>,
    /// Break one rule on purpose.
    #[arg(long = "break", value_enum)]
    brk: Option<Break>,
}

const SUPPORTED_CAPS: &[&str] = &["command-result/1"];

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

fn success(id: &Value, result: impl Serialize) -> anyhow::Result<types::SuccessResponse> {
    Ok(types::SuccessResponse {
        id: serde_json::from_value(id.clone())?,
        jsonrpc: types::JsonRpcVersion::X20,
        result: serde_json::to_value(result)?,
    })
}

fn error(
    id: &Value,
    code: i64,
    message: &str,
    detail: Option<&str>,
) -> anyhow::Result<types::ErrorResponse> {
    let code = rukh::ErrorCode::try_from(code)?.code();
    let data = detail
        .map(|d| serde_json::from_value::<types::ErrorData>(json!({"detail": d})))
        .transpose()?;
    Ok(types::ErrorResponse {
        error: types::JsonRpcError {
            code,
            data,
            message: message.to_string(),
        },
        id: Some(serde_json::from_value(id.clone())?),
        jsonrpc: types::JsonRpcVersion::X20,
    })
}

/// The error answer the contract's agreement `name` prescribes for a mismatch: its code,
/// and its reason as the error's data.reason.
fn mismatch(id: &Value, name: &str) -> anyhow::Result<types::ErrorResponse> {
    let c = rukh::CONTRACT.wire()?.contract();
    let m = &c
        .agreements
        .get(name)
        .context("no such agreement")?
        .mismatch;
    let code = m.code.as_ref().and_then(Value::as_i64).context("no code")?;
    let mut reply = error(id, code, &format!("{name} mismatch"), None)?;
    if let Some(reason) = &m.reason {
        reply.error.data = Some(serde_json::from_value(json!({"reason": reason}))?);
    }
    Ok(reply)
}

/// Take ownership of the inherited control end.
fn inherited(fd: i32) -> anyhow::Result<OwnedFd> {
    if !std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists() {
        bail!("fd {fd} is not open: launch me from a rukh core with the channel as fd {fd}");
    }
    // SAFETY: fd is open (checked above) and nothing else in this process owns
    // it: it was inherited across exec and this is the only place that claims it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = fstat(&owned).context("fstat on the control fd")?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        bail!("fd {fd} is not a socket");
    }
    // The adapter forbids further inheritance before any handler runs.
    fcntl(&owned, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).context("FD_CLOEXEC")?;
    Ok(owned)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Initializing,
    Running,
}

/// Progress of the single invocation's work.
#[derive(Debug, Clone, PartialEq)]
enum Work {
    Idle,
    AwaitEcho(String),
    AwaitClock(String),
    Sleeping,
    Done,
}

struct Ext {
    conn: contract::Connection<UnixStream>,
    brk: Option<Break>,
    phase: Phase,
    core_next: u64,
    next_id: u64,
    sent_requests: u64,
    session_id: String,
    /// The invocation rukh.initialize pinned; each call repeats it with the session.
    invocation_id: String,
    invoke_id: Option<Value>,
    kind: String,
    inputs: serde_json::Map<String, Value>,
    work: Work,
    wake: Option<Instant>,
    exit_code: i32,
    /// Messages the contract says to ignore, counted.
    ignored: u64,
}

/// How the session ended for this process.
enum End {
    Exit(i32),
}

impl Ext {
    fn next_request_id(&mut self) -> String {
        self.sent_requests += 1;
        if self.brk == Some(Break::IdGap) && self.sent_requests == 2 {
            eprintln!("rukh-ext: --break id-gap: skipping e:{}", self.next_id);
            self.next_id += 1;
        }
        let id = format!("e:{}", self.next_id);
        self.next_id += 1;
        id
    }

    async fn call(&mut self, op: &str, input: Value) -> anyhow::Result<String> {
        let id = self.next_request_id();
        let params: types::CallParams = serde_json::from_value(json!({
            "operation": op, "version": "1", "input": input, "sessionId": self.session_id,
            "invocationId": self.invocation_id
        }))?;
        self.conn
            .send(&request(&id, Method::RukhCall, &params)?)
            .await?;
        Ok(id)
    }

    async fn log(&mut self, level: &str, message: &str) -> anyhow::Result<()> {
        let p: types::LogParams =
            serde_json::from_value(json!({"level": level, "message": message}))?;
        let Value::Object(map) = serde_json::to_value(&p)? else {
            bail!("log params")
        };
        let n = types::Notification {
            jsonrpc: types::JsonRpcVersion::X20,
            method: Method::RukhLog.name().parse()?,
            params: Some(types::Params(map)),
        };
        self.conn.send(&n).await?;
        Ok(())
    }

    async fn complete(&mut self) -> anyhow::Result<()> {
        let Some(id) = self.invoke_id.clone() else {
            bail!("no invoke to complete")
        };
        let result: types::InvokeResult = if self.kind == "describe" {
            serde_json::from_value(
                json!({"status": "succeeded", "help": {"summary": "Echo the inputs through core operations", "usage": "demo echo [--exit N] [--sleepMs N]"}}),
            )?
        } else if let Some(code) = self
            .inputs
            .get("exit")
            .and_then(Value::as_i64)
            .filter(|c| *c != 0)
        {
            self.exit_code = i32::try_from(code).unwrap_or(1);
            serde_json::from_value(
                json!({"status": "command_failed", "exitCode": code, "message": "asked to fail"}),
            )?
        } else {
            let mut done = json!({"status": "succeeded", "summary": "echoed"});
            if self.brk == Some(Break::UnofferedResult) {
                eprintln!(
                    "rukh-ext: --break unoffered-result: a commandResult though none was offered"
                );
                done["commandResult"] = json!({"echoed": self.inputs});
            }
            serde_json::from_value(done)?
        };
        self.conn.send(&success(&id, result)?).await?;
        self.work = Work::Done;
        Ok(())
    }

    /// After the echo and clock calls (or right away for describe): sleep if asked, else complete.
    async fn finish_or_sleep(&mut self) -> anyhow::Result<()> {
        match self.inputs.get("sleepMs").and_then(Value::as_u64) {
            Some(ms) if ms > 0 => {
                self.work = Work::Sleeping;
                self.wake = Some(Instant::now() + Duration::from_millis(ms));
                Ok(())
            }
            _ => self.complete().await,
        }
    }

    /// R-10 on the core's requests: prefix c:, gapless from 1.
    fn check_core_id(&mut self, id: &Value) -> anyhow::Result<()> {
        match id
            .as_str()
            .and_then(|s| s.strip_prefix("c:"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(n) if n == self.core_next => {
                self.core_next += 1;
                Ok(())
            }
            _ => bail!(
                "protocol_error request_id_violation: core id {id}, expected c:{}",
                self.core_next
            ),
        }
    }

    async fn on_request(&mut self, msg: Message) -> anyhow::Result<Option<End>> {
        let id = msg.id.clone().unwrap_or(Value::Null);
        // A repeated, skipped or decreasing id: no action, no response, the session ends.
        self.check_core_id(&id)?;
        let method = msg.method.as_deref().unwrap_or("");
        if self.phase == Phase::Initializing && method != Method::RukhInitialize.name() {
            self.conn
                .send(&error(&id, -32001, "not initialized", Some(method))?)
                .await?;
            bail!("protocol_error state_violation: {method} before rukh.initialize");
        }
        let call = rukh::Call::from_parts(method, msg.value.get("params").cloned())
            .map_err(|e| anyhow::anyhow!("params of {method}: {e}"))?;
        match call {
            rukh::Call::RukhInitialize(p) => {
                if self.phase != Phase::Initializing {
                    self.conn
                        .send(&error(&id, -32000, "already initialized", None)?)
                        .await?;
                    return Ok(None);
                }
                if let Some(c) = p
                    .capabilities
                    .iter()
                    .find(|c| !SUPPORTED_CAPS.contains(&c.as_str()))
                    .filter(|_| self.brk != Some(Break::AnyCapability))
                {
                    self.conn
                        .send(&error(
                            &id,
                            -32003,
                            "capability not supported",
                            Some(c.as_str()),
                        )?)
                        .await?;
                    return Ok(Some(End::Exit(125)));
                }
                self.session_id = p.session_id.to_string();
                self.invocation_id = p.invocation_id.to_string();
                self.kind = p.kind.to_string();
                let echoed = match self.brk {
                    Some(Break::OtherSession) => format!("{}-other", p.session_id.as_str()),
                    _ => p.session_id.to_string(),
                };
                let result: types::InitializeResult = serde_json::from_value(json!({
                    "sessionId": echoed, "contract": p.contract, "protocol": p.protocol,
                    "capabilities": p.capabilities, "adapter": {"name": "rukh-ext-rust", "version": env!("CARGO_PKG_VERSION")}
                }))?;
                self.conn.send(&success(&id, result)?).await?;
                self.phase = Phase::Running;
            }
            rukh::Call::RukhInvoke(p) => {
                if self.invoke_id.is_some() {
                    self.conn
                        .send(&error(&id, -32002, "session already invoked", None)?)
                        .await?;
                    return Ok(None);
                }
                let (kind, inputs) = match p {
                    types::InvokeParams::ExecuteInvocation(e) => ("execute", e.inputs),
                    types::InvokeParams::DescribeInvocation(_) => {
                        ("describe", serde_json::Map::new())
                    }
                };
                if kind != self.kind && self.brk != Some(Break::AnyKind) {
                    // The kind is an agreement the extension judges: its mismatch
                    // answer, as the contract words it, then the invocation ends.
                    let reply = mismatch(&id, "kind")?;
                    self.conn.send(&reply).await?;
                    bail!(
                        "protocol_error context_mismatch: invoke kind {kind} but the session pinned {}",
                        self.kind
                    );
                }
                self.invoke_id = Some(id);
                self.inputs = inputs;
                if kind == "describe" {
                    self.finish_or_sleep().await?;
                } else {
                    self.log("info", "demo command started").await?;
                    let input = Value::Object(self.inputs.clone());
                    let cid = self.call("demo.echo", input).await?;
                    self.work = Work::AwaitEcho(cid);
                }
            }
            // After the completion no new UI request is accepted.
            rukh::Call::RukhUiEvent(_) if matches!(self.work, Work::Done) => {
                let code = rukh::ErrorCode::SessionClosing.code();
                self.conn
                    .send(&error(&id, code, "session closing", None)?)
                    .await?;
            }
            rukh::Call::RukhUiEvent(p) => {
                self.conn
                    .send(&success(&id, json!({"sequence": p.sequence}))?)
                    .await?;
            }
            rukh::Call::RukhCancel(p) => {
                eprintln!("rukh-ext: cancelled ({})", p.reason);
                self.conn.send(&success(&id, types::Ack {})?).await?;
                self.conn.close().await?;
                return Ok(Some(End::Exit(130)));
            }
            rukh::Call::RukhClose(_) => {
                self.conn.send(&success(&id, types::Ack {})?).await?;
                self.conn.close().await?;
                return Ok(Some(End::Exit(self.exit_code)));
            }
            other => bail!("protocol_error wrong_direction: {}", other.method()),
        }
        Ok(None)
    }

    async fn on_response(&mut self, msg: Message) -> anyhow::Result<()> {
        let key = msg
            .correlation
            .as_ref()
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match self.work.clone() {
            Work::AwaitEcho(id) if id == key => {
                let cid = self.call("demo.clock", json!({})).await?;
                self.work = Work::AwaitClock(cid);
            }
            Work::AwaitClock(id) if id == key => {
                if msg.kind == Kind::Error {
                    eprintln!("rukh-ext: demo.clock refused: {}", msg.value["error"]);
                }
                self.finish_or_sleep().await?;
            }
            _ => bail!("protocol_error unknown_response_id {key}"),
        }
        Ok(())
    }

    async fn serve(&mut self) -> anyhow::Result<i32> {
        let far = Instant::now() + Duration::from_secs(24 * 3600);
        loop {
            let wake = self.wake.unwrap_or(far);
            tokio::select! {
                m = self.conn.recv() => {
                    let msg = match m {
                        Ok(Some(msg)) => msg,
                        Ok(None) => bail!("early EOF: the core closed the channel"),
                        // What the contract answers with an error (an unknown method,
                        // params that fail their schema: R-20) is answered with the
                        // contract's code, the id consumed, and the session goes on.
                        Err(IoError::Violation(v)) if v.action == Some(ActionKind::ReplyError) => {
                            let id = v.partial.as_ref().and_then(|p| p.id.clone());
                            let code = v.code.as_ref().and_then(Value::as_i64);
                            let (Some(id), Some(code)) = (id, code) else {
                                bail!("protocol_error {}: {}", v.class.name(), v.reason);
                            };
                            self.check_core_id(&id)?;
                            self.conn.send(&error(&id, code, &v.reason, None)?).await?;
                            continue;
                        }
                        // What the contract says to ignore (a notification the core
                        // may not send, R-20) is counted and the session goes on.
                        Err(IoError::Violation(v)) if v.action == Some(ActionKind::Ignore) => {
                            self.ignored += 1;
                            eprintln!("rukh-ext: ignored ({}): {}", v.class.name(), v.reason);
                            continue;
                        }
                        Err(e) => bail!("protocol_error: {e}"),
                    };
                    let end = match msg.kind {
                        Kind::Request => self.on_request(msg).await?,
                        Kind::Response | Kind::Error => { self.on_response(msg).await?; None }
                        Kind::Notification | Kind::Event => None,
                    };
                    if let Some(End::Exit(code)) = end {
                        return Ok(code);
                    }
                }
                _ = sleep_until(wake), if self.work == Work::Sleeping => {
                    self.wake = None;
                    self.complete().await?;
                }
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        Err(e) => {
            eprintln!("rukh-ext: {e:#}");
            std::process::ExitCode::from(125)
        }
    }
}

async fn run() -> anyhow::Result<i32> {
    let args = Args::parse();
    let fd = match args.fd {
        Some(fd) => fd,
        None => std::env::var("RUKH_IPC_FD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3),
    };
    let owned = inherited(fd)?;
    let std_stream = std::os::unix::net::UnixStream::from(owned);
    std_stream.set_nonblocking(true)?;
    let conn = rukh::connect(
        UnixStream::from_std(std_stream)?,
        Channel::Ipc,
        Party::Extension,
    )?;
    let mut ext = Ext {
        conn,
        brk: args.brk,
        phase: Phase::Initializing,
        core_next: 1,
        next_id: 1,
        sent_requests: 0,
        session_id: String::new(),
        invocation_id: String::new(),
        invoke_id: None,
        kind: String::new(),
        inputs: serde_json::Map::new(),
        work: Work::Idle,
        wake: None,
        exit_code: 0,
        ignored: 0,
    };
    ext.serve().await
}
