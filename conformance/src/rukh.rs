//! The hand-written rukh checks (ADR-0003 process IPC, seed 003): what rukh's data
//! cannot speak. The strict-JSON rules, the frame cap, the `violations` table and id
//! reuse are checked by the suite derived from the contract, which runs first; here
//! are the lifecycle-frame cap, split frames, stalled frames, the request-ID rules
//! beyond reuse, the handshake, one invocation per session, cancellation, log
//! intake, the outcomes and the CLI exit codes, played as the core
//! against a real extension (`--play core`) or as the extension against a real
//! core (`--play extension`).
//!
//! **Playing the core**, the target is the extension, launched afresh for every
//! session with the channel as an inherited socketpair end (`exec-fd:3:CMD`,
//! the convention of the reference core and extensions) or as its stdio
//! (`exec:CMD`). A black-box extension can only be steered through its invoke
//! inputs, so the suite uses the reference extensions' conventions
//! (docs/conformance.md): `{"exit": N}` completes `command_failed` with exit
//! code N, `{"sleepMs": N}` keeps the command running that long.
//!
//! **Playing the extension**, the target is a core, and a core launches its
//! extension itself: `--target 'exec:rukh-core … -- {extension}'`. Per check the
//! suite listens on a private unix socket, launches the core with
//! `{extension}` replaced by the handoff (`contract-proxy handoff`, [`crate::handoff`])
//! and receives, over that socket, the very channel end the core passed the
//! handoff (`SCM_RIGHTS`); the handoff closes its copy and later exits with the
//! code the suite names, so the core sees a real extension process whose exit
//! status the suite controls (the outcome checks need exactly that).
//! `{deadline_ms}` in the command, if present, is replaced by the invocation
//! deadline a check needs (short for the deadline check, long otherwise).
//! Cancellation from the CLI is SIGINT (user_request) and SIGTERM
//! (owner_shutdown), sent to the core process.
//!
//! The derived checks' sessions playing the extension open the same way ([`OPENER`]).
//!
//! One rule, one failing check: request-ID gaps of the implementation under test
//! fail only `rukh.ids.own`, and a core's message before `rukh.initialize` only
//! `rukh.derived.handshake`; the other checks tolerate both, so that each
//! reference peer's `--break` fails exactly its check.

// The launchers (socketpairs, fd passing, signals) are unix-only; elsewhere the checks
// report that they need a unix platform, and the helpers they would use go unused.
#![cfg_attr(not(unix), allow(dead_code, unused_imports, unused_mut))]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::model::{Kind, Part};
use contract::wire::Wire;
use serde_json::{Map, Value, json};

use super::{Body, Check, Ctx, Failure, Got, Incoming, Peer, Row, Stdout, Verdict};

/// Session identity the suite pins when it plays the core (correlation only, R-32).
const SESSION_ID: &str = "s-conformance-0001";
const INVOCATION_ID: &str = "inv-conformance-0001";
/// The exit code the suite asks a command to fail with (any normal non-zero code).
const PROBE_EXIT: i64 = 3;
/// The reference extensions' invoke-input triggers (docs/conformance.md).
const EXIT_INPUT: &str = "exit";
const SLEEP_INPUT: &str = "sleepMs";
/// How long a check watches for messages that must not come (a quiet period).
const QUIET: Duration = Duration::from_millis(300);
/// Scheduling slack added to the contract's deadlines (a loaded CI machine).
const SLACK: Duration = Duration::from_millis(1500);
/// The deadline-check invocation deadline, when the core command has `{deadline_ms}`.
const SHORT_DEADLINE: Duration = Duration::from_millis(1500);
/// Bytes of a launched core's stdout kept for failure reports.
const STDOUT_KEEP: usize = 64 * 1024;
/// Log records sent per flood burst and the pause between bursts.
const FLOOD_BURST: u64 = 20;
const FLOOD_PAUSE: Duration = Duration::from_millis(20);
/// Placeholders in a core's command line.
const EXTENSION: &str = "{extension}";
const DEADLINE_MS: &str = "{deadline_ms}";

// ---------------------------------------------------------------------------
// What the contract says: limits, codes, identifiers.

/// Values the checks take from the contract (never written here).
#[derive(Clone)]
struct Spec {
    /// The compiled contract: its limits and its error catalog.
    wire: Arc<Wire>,
    /// CLI exit codes by outcome or cancel reason.
    exits: HashMap<String, i64>,
    /// The pinned protocol identifiers (first value of each `ProtocolVersions` enum).
    protocol: Value,
    /// A contract example of the initialize params (the suite's template).
    init_example: Value,
}

impl Spec {
    fn new(cx: &Ctx) -> Result<Spec, Failure> {
        let c = cx.wire.contract();
        let mut exits = HashMap::new();
        for table in c.codes.values() {
            for v in &table.values {
                if let (Some(name), Some(code)) = (
                    v.value.as_str(),
                    v.maps.get("cliExitCodes").and_then(Value::as_i64),
                ) {
                    exits.insert(name.to_string(), code);
                }
            }
        }
        let root = serde_json::to_value(c.as_ref()).map_err(|e| Failure::new(e.to_string()))?;
        let mut protocol = Map::new();
        if let Some(props) = root
            .pointer("/$defs/ProtocolVersions/properties")
            .and_then(Value::as_object)
        {
            for (k, p) in props {
                if let Some(v) = p.pointer("/enum/0") {
                    protocol.insert(k.clone(), v.clone());
                }
            }
        }
        let init_example = c
            .methods
            .get("rukh.initialize")
            .and_then(|m| m.examples.iter().find(|e| e.part == Part::Call))
            .and_then(|e| e.message.get("params").cloned())
            .ok_or_else(|| Failure::new("the contract has no rukh.initialize call example"))?;
        Ok(Spec {
            wire: cx.wire.clone(),
            exits,
            protocol: Value::Object(protocol),
            init_example,
        })
    }

    /// A size or count cap (a rate's amount per period, too).
    fn count(&self, name: &str) -> Result<usize, Failure> {
        let n = self.wire.limits().cap(name)?;
        usize::try_from(n).map_err(|_| Failure::new(format!("limit {name} = {n} is too large")))
    }

    fn secs(&self, name: &str) -> Result<Duration, Failure> {
        Ok(self.wire.limits().duration(name)?)
    }

    fn error(&self, name: &str) -> Result<i64, Failure> {
        super::int_error(self.wire.contract(), name)
    }

    fn exit(&self, name: &str) -> Result<i64, Failure> {
        self.exits
            .get(name)
            .copied()
            .ok_or_else(|| Failure::new(format!("the contract maps no CLI exit code to {name}")))
    }

    /// The effective limits the suite pins (the base limits: nothing tightened).
    fn session_limits(&self) -> Result<Value, Failure> {
        Ok(json!({
            "maxFramePayloadBytes": self.count("framePayloadMax")?,
            "maxLifecyclePayloadBytes": self.count("lifecyclePayloadMax")?,
            "maxDepth": self.count("jsonDepthMax")?,
            "maxItems": self.count("jsonItemsMax")?,
            "maxPendingRequests": self.count("pendingRequestsMax")?,
            "sendQueueFrames": self.count("sendQueueFramesMax")?,
            "sendQueueBytes": self.count("sendQueueBytesMax")?,
            "logRecordsPerSecond": self.count("logIntakeRecordsRate")?,
            "logBytesPerSecond": self.count("logIntakeBytesRate")?,
            "frameTimeoutMs": self.secs("incompleteFrameSeconds")?.as_millis(),
        }))
    }
}

// ---------------------------------------------------------------------------
// Frames and strict-JSON cases.

fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// `msg` with the member `key` of the object at `ptr` set to `value`.
fn with(mut msg: Value, ptr: &str, key: &str, value: Value) -> Value {
    if let Some(Value::Object(o)) = msg.pointer_mut(ptr) {
        o.insert(key.to_string(), value);
    }
    msg
}

/// `msg` whose string at `ptr`/`key` is padded with `x` so the payload is exactly `size` bytes.
fn sized(msg: &Value, ptr: &str, key: &str, size: usize) -> Result<Vec<u8>, Failure> {
    let empty = to_bytes(&with(msg.clone(), ptr, key, json!("")));
    let pad = size.checked_sub(empty.len()).ok_or_else(|| {
        Failure::new(format!(
            "suite bug: cannot size a frame to {size} bytes (it needs {})",
            empty.len()
        ))
    })?;
    Ok(to_bytes(&with(
        msg.clone(),
        ptr,
        key,
        json!("x".repeat(pad)),
    )))
}

/// The frame of `payload`: 4-byte big-endian length, then the payload (P3.1).
fn framed(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

// ---------------------------------------------------------------------------
// Reading.

enum Ev {
    Msg(Box<Got>),
    End(String),
    Timeout,
}

async fn next_ev(peer: &mut Peer, until: Instant) -> Ev {
    loop {
        match peer.next(until).await {
            Incoming::Control(g) => return Ev::Msg(g),
            Incoming::ControlEnd(e) => return Ev::End(e),
            Incoming::Timeout => return Ev::Timeout,
            // rukh has one channel; nothing arrives on another.
            Incoming::Data { .. } | Incoming::DataEnd(_) => continue,
        }
    }
}

fn kind(g: &Got) -> Option<Kind> {
    g.ok().map(|m| m.kind)
}

fn id_of(g: &Got) -> Option<String> {
    g.value()
        .and_then(|v| v.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn is_success(g: &Got) -> bool {
    g.value().is_some_and(|v| v.get("result").is_some())
}

/// An answer that must be a success; anything else fails with `why`, its bytes as `label`.
fn success(g: &Got, label: &str, why: impl Into<String>) -> Result<(), Failure> {
    if is_success(g) {
        Ok(())
    } else {
        Err(Failure::new(why).with(label, &g.raw))
    }
}

// ---------------------------------------------------------------------------
// Playing the core: the extension is under test.

/// How the suite, as core, answers the extension's `rukh.call`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallPolicy {
    /// `{"output": input}`.
    Echo,
    /// A typed operation error (an ordinary denial).
    Deny,
}

struct CoreSide {
    peer: Peer,
    sp: Spec,
    wait: Duration,
    next: u64,
    policy: CallPolicy,
    /// Ids of the extension's requests, in arrival order.
    ext_ids: Vec<String>,
    /// Log records received.
    logs: u64,
    /// Frames of the extension the contract rejects.
    invalid: Vec<Got>,
}

impl CoreSide {
    async fn open(cx: &mut Ctx) -> Result<CoreSide, Failure> {
        let sp = Spec::new(cx)?;
        let peer = cx.open().await?;
        Ok(CoreSide {
            peer,
            sp,
            wait: cx.opts.deadline,
            next: 1,
            policy: CallPolicy::Echo,
            ext_ids: Vec::new(),
            logs: 0,
            invalid: Vec::new(),
        })
    }

    /// A session whose handshake is done (initialize confirmed, c:1).
    async fn confirmed(cx: &mut Ctx) -> Result<CoreSide, Failure> {
        let mut s = CoreSide::open(cx).await?;
        s.confirm().await?;
        Ok(s)
    }

    fn soon(&self) -> Instant {
        Instant::now() + self.wait
    }

    fn id(&mut self) -> String {
        let id = format!("c:{}", self.next);
        self.next += 1;
        id
    }

    /// The contract's initialize params, pinned to the suite's session, offering no capability.
    fn init_params(&self) -> Result<Value, Failure> {
        let mut p = self.sp.init_example.clone();
        if let Value::Object(o) = &mut p {
            o.insert("sessionId".into(), json!(SESSION_ID));
            o.insert("invocationId".into(), json!(INVOCATION_ID));
            o.insert("kind".into(), json!("execute"));
            o.insert("protocol".into(), self.sp.protocol.clone());
            o.insert("capabilities".into(), json!([]));
            o.insert("limits".into(), self.sp.session_limits()?);
        }
        Ok(p)
    }

    fn request(&mut self, method: &str, params: Value) -> (String, Value) {
        let id = self.id();
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id, msg)
    }

    /// The invoke message for execute with `inputs` (id not yet assigned: `c:0`).
    fn invoke_msg(id: &str, inputs: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "rukh.invoke",
               "params": {"kind": "execute", "sessionId": SESSION_ID, "inputs": inputs, "explicit": []}})
    }

    async fn send(&mut self, method: &str, params: Value) -> Result<String, Failure> {
        let (id, msg) = self.request(method, params);
        self.peer.send(&msg).await?;
        Ok(id)
    }

    /// Handle what the extension sends on its own: answer `rukh.call`, count logs.
    async fn serve(&mut self, g: &Got) -> Result<(), Failure> {
        let Some(m) = g.ok() else {
            // An unknown request is answered like a conforming core would.
            if let Err(v) = &g.msg
                && v.class == contract::wire::ViolationClass::UnknownRequest
                && let Some(id) = id_of(g)
            {
                self.ext_ids.push(id.clone());
                let code = self.sp.error("method_not_found")?;
                let msg = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "method not found"}});
                self.peer.send(&msg).await?;
                return Ok(());
            }
            self.invalid.push(g.clone());
            return Ok(());
        };
        match (m.kind, m.method.as_deref()) {
            (Kind::Request, Some("rukh.call")) => {
                let id = id_of(g).unwrap_or_default();
                self.ext_ids.push(id.clone());
                let msg = match self.policy {
                    CallPolicy::Echo => {
                        let input = m
                            .value
                            .pointer("/params/input")
                            .cloned()
                            .unwrap_or(json!({}));
                        json!({"jsonrpc": "2.0", "id": id, "result": {"output": input}})
                    }
                    CallPolicy::Deny => {
                        let code = self.sp.error("operation_error")?;
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "operation denied",
                            "data": {"operationError": {"type": "denied", "message": "denied by the conformance suite"}}}})
                    }
                };
                self.peer.send(&msg).await?;
            }
            (Kind::Request, _) => {
                if let Some(id) = id_of(g) {
                    self.ext_ids.push(id);
                }
            }
            (Kind::Notification | Kind::Event, Some("rukh.log")) => self.logs += 1,
            _ => {}
        }
        Ok(())
    }

    /// Wait for the answer to `id`, serving the extension meanwhile.
    async fn reply(&mut self, id: &str, what: &str, until: Instant) -> Result<Box<Got>, Failure> {
        loop {
            match next_ev(&mut self.peer, until).await {
                Ev::Timeout => {
                    return Err(Failure::new(format!(
                        "no answer to {what} ({id}) within {:?}",
                        self.wait
                    )));
                }
                Ev::End(e) => {
                    return Err(self.last(Failure::new(format!(
                        "the extension ended the session before answering {what} ({id}): {e}"
                    ))));
                }
                Ev::Msg(g) => {
                    let answers = matches!(kind(&g), Some(Kind::Response | Kind::Error))
                        && id_of(&g).as_deref() == Some(id);
                    if answers {
                        return Ok(g);
                    }
                    self.serve(&g).await?;
                }
            }
        }
    }

    /// The last frame received, as evidence.
    fn last(&self, f: Failure) -> Failure {
        match self.peer.log.last() {
            Some(g) => f.with(
                format!("last frame from the extension: {}", g.brief()),
                &g.raw,
            ),
            None => f,
        }
    }

    /// initialize → a success result that confirms the pinned session exactly.
    async fn confirm(&mut self) -> Result<Box<Got>, Failure> {
        let params = self.init_params()?;
        let id = self.send("rukh.initialize", params).await?;
        let until = Instant::now() + self.wait;
        let g = self.reply(&id, "rukh.initialize", until).await?;
        success(
            &g,
            "its answer",
            "the extension refused a compatible rukh.initialize",
        )?;
        Ok(g)
    }

    /// Send an execute invoke and serve the extension until its completion.
    async fn invoke(&mut self, inputs: Value, until: Instant) -> Result<Box<Got>, Failure> {
        let id = self.id();
        let msg = Self::invoke_msg(&id, inputs);
        self.peer.send(&msg).await?;
        self.reply(&id, "rukh.invoke", until).await
    }

    /// rukh.close → acknowledgement → end of the channel; how long the end took after the ack.
    async fn close(&mut self) -> Result<Duration, Failure> {
        let id = self.send("rukh.close", json!({})).await?;
        let until = Instant::now() + self.wait;
        let ack = self.reply(&id, "rukh.close", until).await?;
        success(&ack, "the answer", "rukh.close was not acknowledged")?;
        let acked = Instant::now();
        let bound = self.sp.secs("voluntaryStopSeconds")? + SLACK;
        match next_ev(&mut self.peer, acked + bound).await {
            Ev::End(_) => Ok(acked.elapsed()),
            Ev::Timeout => Err(Failure::new(format!(
                "the extension did not close its end within {bound:?} of acknowledging rukh.close"
            ))),
            Ev::Msg(g) => Err(Failure::new(
                "the extension sent a frame after acknowledging rukh.close",
            )
            .with(g.brief(), &g.raw)),
        }
    }

    /// The extension's frames the contract rejects, as a failure.
    fn invalid_failure(&self) -> Option<Failure> {
        let g = self.invalid.first()?;
        Some(
            Failure::new(format!(
                "the extension sent {} invalid frame(s); the first: {}",
                self.invalid.len(),
                g.brief()
            ))
            .with("that frame", &g.raw),
        )
    }
}

/// Wait for the launched extension to exit; its code.
async fn ext_exit(cx: &mut Ctx, limit: Duration) -> Result<i32, Failure> {
    match cx.child_exit(limit).await {
        Some(Some(code)) => Ok(code),
        Some(None) => Err(Failure::new(format!(
            "the extension process did not exit within {limit:?} after the session ended"
        ))),
        None => Err(Failure::new(
            "the target is not a launched process: its exit cannot be judged (use exec-fd:N:CMD)",
        )),
    }
}

async fn core_denial(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = CoreSide::open(cx).await?;
    s.policy = CallPolicy::Deny;
    s.confirm().await?;
    let g = s.invoke(json!({}), s.soon()).await?;
    if s.ext_ids.is_empty() {
        return Ok(Verdict::Skip(
            "the extension made no rukh.call to deny".into(),
        ));
    }
    success(
        &g,
        "the invoke answer",
        "after an ordinary denial the invocation did not complete normally (a denial keeps a healthy session, R-30)",
    )?;
    s.close().await?;
    Ok(Verdict::Pass(format!(
        "{} rukh.call denied with a typed operation error; the invocation still completed",
        s.ext_ids.len()
    )))
}

async fn core_cancel(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = CoreSide::confirmed(cx).await?;
    let long = (cx.opts.check_deadline.as_millis() as u64).saturating_mul(2);
    let inv = s.id();
    s.peer
        .send(&CoreSide::invoke_msg(&inv, json!({ SLEEP_INPUT: long })))
        .await?;
    // Serve the extension until it falls quiet (its work is running).
    let until = Instant::now() + s.wait;
    loop {
        match next_ev(&mut s.peer, (Instant::now() + QUIET).min(until)).await {
            Ev::Msg(g) => {
                if id_of(&g).as_deref() == Some(inv.as_str()) {
                    return Ok(Verdict::Skip(format!(
                        "the extension completed at once; it ignores the {{\"{SLEEP_INPUT}\": N}} trigger"
                    )));
                }
                s.serve(&g).await?;
            }
            Ev::End(e) => return Err(s.last(Failure::new(format!("the session ended: {e}")))),
            Ev::Timeout => break,
        }
    }
    let reason = cx
        .wire
        .contract()
        .codes
        .get("cancelReasons")
        .and_then(|t| t.values.first())
        .map(|v| v.value.clone())
        .ok_or_else(|| Failure::new("the contract has no cancel reasons"))?;
    let cancel = s.send("rukh.cancel", json!({ "reason": reason })).await?;
    let sent = Instant::now();
    let bound = s.sp.secs("voluntaryStopSeconds")? + SLACK;
    let mut acked = false;
    loop {
        match next_ev(&mut s.peer, sent + bound).await {
            Ev::End(_) => break,
            Ev::Timeout => {
                return Err(Failure::new(format!(
                    "the extension did not end the session within {bound:?} of rukh.cancel (voluntary stop, P3.5)"
                )));
            }
            Ev::Msg(g) => {
                if kind(&g) == Some(Kind::Request) {
                    return Err(Failure::new(format!(
                        "the extension started new work after rukh.cancel: {}",
                        g.brief()
                    ))
                    .with("that frame", &g.raw));
                }
                if id_of(&g).as_deref() == Some(cancel.as_str()) {
                    acked = true;
                }
            }
        }
    }
    let left = (sent + bound).saturating_duration_since(Instant::now());
    let code = ext_exit(cx, left.max(Duration::from_millis(100))).await?;
    Ok(Verdict::Pass(format!(
        "{}channel closed and process exited ({code}) {} ms after rukh.cancel",
        if acked { "acknowledged; " } else { "" },
        sent.elapsed().as_millis()
    )))
}

async fn core_outcome(cx: &mut Ctx, fail: bool) -> Result<Verdict, Failure> {
    let mut s = CoreSide::confirmed(cx).await?;
    let inputs = if fail {
        json!({ EXIT_INPUT: PROBE_EXIT })
    } else {
        json!({})
    };
    let g = s.invoke(inputs, s.soon()).await?;
    let status = g
        .at_ptr("/result/status")
        .and_then(Value::as_str)
        .map(str::to_string);
    let reported = g.at_ptr("/result/exitCode").and_then(Value::as_i64);
    let Some(status) = status else {
        return Err(
            Failure::new("rukh.invoke ended without a completion message")
                .with("the answer", &g.raw),
        );
    };
    if fail && status != "command_failed" {
        return Ok(Verdict::Skip(format!(
            "the extension completed {status}; it ignores the {{\"{EXIT_INPUT}\": N}} trigger"
        )));
    }
    let took = s.close().await?;
    let bound = s.sp.secs("voluntaryStopSeconds")? + SLACK;
    let code = ext_exit(cx, bound.saturating_sub(took)).await?;
    if let Some(f) = s.invalid_failure() {
        return Err(f);
    }
    let ok = match status.as_str() {
        "succeeded" => code == 0,
        _ => code != 0 && reported.is_none_or(|r| r == i64::from(code)),
    };
    if !ok {
        return Err(Failure::new(format!(
            "completion {status} (exitCode {reported:?}) but the process exited {code}: success needs 0, command_failed a non-zero code equal to the reported one (P3.6 rule 15)"
        ))
        .with("the completion", &g.raw));
    }
    Ok(Verdict::Pass(format!(
        "completion {status}{}; close acknowledged; process exited {code} ({} log records, {} calls)",
        reported
            .map(|r| format!(" (exitCode {r})"))
            .unwrap_or_default(),
        s.logs,
        s.ext_ids.len()
    )))
}

// ---------------------------------------------------------------------------
// Playing the extension: the core is under test.

/// Single-quote `s` for a POSIX shell.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The core's command line from `--target`, if it is `exec:` with `{extension}`.
fn core_argv(cx: &Ctx) -> Result<Vec<String>, Failure> {
    let usage = || {
        Failure::new(format!(
            "playing the extension, --target must be exec:CORE-COMMAND with {EXTENSION} where the core takes its extension's command (see docs/conformance.md)"
        ))
    };
    match cx.target() {
        // `exec:` with a placeholder other than {control}/{data} is a template target.
        super::Target::Template { argv }
        | super::Target::Pipe(contract_transport::endpoint::Endpoint::Exec(argv))
            if argv.iter().any(|a| a.contains(EXTENSION)) =>
        {
            Ok(argv.clone())
        }
        _ => Err(usage()),
    }
}

fn has_deadline_placeholder(cx: &Ctx) -> bool {
    core_argv(cx).is_ok_and(|a| a.iter().any(|s| s.contains(DEADLINE_MS)))
}

/// The derived checks' session playing the extension: the core launched with the handoff
/// in place of `{extension}`, as the hand-written checks launch it.
#[cfg(unix)]
pub const OPENER: Option<super::Opener> = Some(open_core);
/// Playing the extension needs descriptor passing (unix).
#[cfg(not(unix))]
pub const OPENER: Option<super::Opener> = None;

#[cfg(unix)]
fn open_core(cx: &mut Ctx) -> super::BodyFutureOf<'_, Peer> {
    Box::pin(async move {
        // Only a template launches the core with the handoff; any other target as written.
        if !matches!(cx.target(), super::Target::Template { .. }) {
            return cx.open_plain().await;
        }
        let side = launch_core(cx, None).await?;
        cx.hold((ExitsZero(side.link), side.stdout));
        cx.on_end = Some(core_failed);
        Ok(side.peer)
    })
}

/// The handoff's instruction socket of a derived session: once the suite lets go of the
/// session, the extension it played exits 0, as one whose channel is done; the core's
/// outcome is then its own reading of the session, not of a failed process.
#[cfg(unix)]
struct ExitsZero(Option<std::os::unix::net::UnixStream>);

#[cfg(unix)]
impl Drop for ExitsZero {
    fn drop(&mut self) {
        use std::io::Write;
        if let Some(l) = self.0.as_mut() {
            let _ = writeln!(l, "0");
        }
    }
}

/// After a protocol error ended the session, the core reports `execution_failed`: its
/// exit code is the one the contract maps that outcome to.
#[cfg(unix)]
fn core_failed(cx: &mut Ctx) -> super::BodyFutureOf<'_, String> {
    Box::pin(async move {
        let want = Spec::new(cx)?.exit("execution_failed")?;
        // The handoff exits now, as an extension whose channel ended would.
        cx.release();
        let wait = cx.opts.deadline;
        match cx.child_exit(wait).await {
            Some(Some(code)) if i64::from(code) == want => {
                Ok(format!("the core exited {code} (execution_failed)"))
            }
            Some(Some(code)) => Err(Failure::new(format!(
                "the core exited {code}; a protocol error is execution_failed, exit {want}"
            ))),
            Some(None) => Err(Failure::new(format!(
                "the core was still running {wait:?} after the session ended"
            ))),
            None => Ok("no core process to watch".into()),
        }
    })
}

/// The suite's end of a core session, with the handoff process it talks through.
#[cfg(unix)]
struct ExtSide {
    peer: Peer,
    sp: Spec,
    wait: Duration,
    next: u64,
    /// The handoff's instruction socket.
    link: Option<std::os::unix::net::UnixStream>,
    stdout: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// Valid requests of the core, in arrival order (before they are handled).
    core_reqs: Vec<Got>,
    /// The initialize request, once seen.
    init: Option<(String, Value)>,
    /// The invoke request, once seen (even if it came before initialize).
    invoke: Option<(String, Value)>,
    /// The cancel request and when it came.
    cancel: Option<(String, Value, Instant)>,
    /// The close request.
    close: Option<String>,
}

/// Launch the core for one session, with `deadline` as its invocation deadline if the
/// command takes one, and take over the channel end it hands its extension.
#[cfg(unix)]
async fn launch_core(cx: &mut Ctx, deadline: Option<Duration>) -> Result<ExtSide, Failure> {
    use tokio::net::UnixListener;
    let sp = Spec::new(cx)?;
    let wait = cx.opts.deadline;
    let argv = core_argv(cx)?;
    // Removed when the check ends, after the core it launched is gone.
    let sock = cx.private_dir()?.join("link.sock");
    let listener = UnixListener::bind(&sock)
        .map_err(|e| Failure::new(format!("cannot listen on {}: {e}", sock.display())))?;
    let mut link_words = crate::handoff::command().map_err(|e| Failure::new(e.to_string()))?;
    link_words.extend([
        "--socket".into(),
        sock.to_string_lossy().to_string(),
        "--wait".into(),
        format!("{}", cx.opts.check_deadline.as_secs_f64()),
    ]);
    let quoted = link_words
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let deadline_ms = deadline
        .unwrap_or(cx.opts.check_deadline * 2)
        .as_millis()
        .to_string();
    let mut full = Vec::new();
    for a in &argv {
        if a == EXTENSION {
            full.extend(link_words.iter().cloned());
        } else {
            full.push(
                a.replace(EXTENSION, &quoted)
                    .replace(DEADLINE_MS, &deadline_ms),
            );
        }
    }
    let stdout = cx.spawn(&full, Stdout::Keep(STDOUT_KEEP))?.stdout;
    let conn = match tokio::time::timeout(wait, listener.accept()).await {
        Ok(Ok((conn, _))) => conn,
        Ok(Err(e)) => {
            return Err(Failure::new(format!("accepting the handoff process: {e}")));
        }
        Err(_) => {
            let why = match cx.child_exit(Duration::ZERO).await {
                Some(Some(code)) => format!("the core exited with {code} without launching it"),
                _ => "the core is still running".into(),
            };
            return Err(Failure::new(format!(
                "the core did not launch its extension within {wait:?} ({why})"
            )));
        }
    };
    let std_link = conn
        .into_std()
        .map_err(|e| Failure::new(format!("the handoff's socket: {e}")))?;
    let (std_link, fd) = tokio::task::spawn_blocking(move || {
        let r = std_link
            .set_nonblocking(false)
            .and_then(|()| std_link.set_read_timeout(Some(wait)))
            .and_then(|()| crate::handoff::receive(&std_link));
        r.map(|fd| (std_link, fd))
    })
    .await
    .map_err(|e| Failure::new(format!("receiving the channel end: {e}")))?
    .map_err(|e| Failure::new(format!("receiving the channel end from the handoff: {e}")))?;
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream
        .set_nonblocking(true)
        .map_err(|e| Failure::new(e.to_string()))?;
    let stream =
        tokio::net::UnixStream::from_std(stream).map_err(|e| Failure::new(e.to_string()))?;
    let peer = cx.peer_on(contract_transport::conn::Conn::Stream(Box::new(stream)))?;
    Ok(ExtSide {
        peer,
        sp,
        wait,
        next: 1,
        link: Some(std_link),
        stdout,
        core_reqs: Vec::new(),
        init: None,
        invoke: None,
        cancel: None,
        close: None,
    })
}

#[cfg(unix)]
impl ExtSide {
    fn id(&mut self) -> String {
        let id = format!("e:{}", self.next);
        self.next += 1;
        id
    }

    /// The next event; UI events are acknowledged and requests recorded on the way.
    async fn recv(&mut self, until: Instant) -> Result<Ev, Failure> {
        let ev = next_ev(&mut self.peer, until).await;
        if let Ev::Msg(g) = &ev
            && let Some(m) = g.ok()
            && m.kind == Kind::Request
        {
            self.core_reqs.push((**g).clone());
            let id = id_of(g).unwrap_or_default();
            let params = m.value.get("params").cloned().unwrap_or(json!({}));
            match m.method.as_deref() {
                Some("rukh.initialize") => self.init = Some((id, params)),
                // The first invoke is the invocation's (a second fails rukh.invoke.once).
                Some("rukh.invoke") if self.invoke.is_none() => self.invoke = Some((id, params)),
                Some("rukh.ui.event") => {
                    let seq = params.get("sequence").cloned().unwrap_or(json!(1));
                    let ack = json!({"jsonrpc": "2.0", "id": id, "result": {"sequence": seq}});
                    self.peer.send(&ack).await?;
                }
                Some("rukh.cancel") => self.cancel = Some((id, params, Instant::now())),
                Some("rukh.close") => self.close = Some(id),
                _ => {}
            }
        }
        Ok(ev)
    }

    /// Read until `done` holds; fail on the end of the channel or the deadline.
    async fn until(&mut self, what: &str, done: impl Fn(&ExtSide) -> bool) -> Result<(), Failure> {
        let until = Instant::now() + self.wait;
        while !done(self) {
            match self.recv(until).await? {
                Ev::Msg(_) => {}
                Ev::End(e) => {
                    return Err(self.last(Failure::new(format!(
                        "the core ended the session before {what}: {e}"
                    ))));
                }
                Ev::Timeout => {
                    return Err(Failure::new(format!(
                        "the core sent no {what} within {:?}",
                        self.wait
                    )));
                }
            }
        }
        Ok(())
    }

    fn last(&self, f: Failure) -> Failure {
        match self.peer.log.last() {
            Some(g) => f.with(format!("last frame from the core: {}", g.brief()), &g.raw),
            None => f,
        }
    }

    /// The exact echo of the pinned session.
    fn echo(params: &Value) -> Value {
        json!({
            "sessionId": params.get("sessionId").cloned().unwrap_or(json!("")),
            "contract": params.get("contract").cloned().unwrap_or(json!({})),
            "protocol": params.get("protocol").cloned().unwrap_or(json!({})),
            "capabilities": params.get("capabilities").cloned().unwrap_or(json!([])),
            "adapter": {"name": "contract-proxy-conformance", "version": env!("CARGO_PKG_VERSION")},
        })
    }

    async fn initialize(&mut self) -> Result<(String, Value), Failure> {
        self.until("rukh.initialize", |s| s.init.is_some()).await?;
        self.init
            .clone()
            .ok_or_else(|| Failure::new("suite bug: initialize lost"))
    }

    /// initialize → exact echo → the invoke (which a broken core may have sent first).
    async fn ready(&mut self) -> Result<(String, Value), Failure> {
        let (id, params) = self.initialize().await?;
        let result = Self::echo(&params);
        self.respond(&id, result).await?;
        self.until("rukh.invoke", |s| s.invoke.is_some()).await?;
        self.invoke
            .clone()
            .ok_or_else(|| Failure::new("suite bug: invoke lost"))
    }

    async fn respond(&mut self, id: &str, result: Value) -> Result<(), Failure> {
        let msg = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.peer.send(&msg).await.map(drop)
    }

    async fn complete(&mut self, result: Value) -> Result<(), Failure> {
        let id = self
            .invoke
            .as_ref()
            .map(|i| i.0.clone())
            .ok_or_else(|| Failure::new("suite bug: no invoke to complete"))?;
        self.respond(&id, result).await
    }

    /// An honest end: the succeeded completion, then [`ExtSide::closing`] with exit 0.
    async fn wrap_up(&mut self) -> Result<(), Failure> {
        self.complete(succeeded()).await?;
        self.closing(0).await
    }

    /// The id of the invoke (empty before it came).
    fn invoke_id(&self) -> String {
        self.invoke
            .as_ref()
            .map(|i| i.0.clone())
            .unwrap_or_default()
    }

    /// Send a `rukh.call` with `input`; its id and the core's answer.
    async fn call(&mut self, input: Value) -> Result<(String, Box<Got>), Failure> {
        let (id, msg) = self.call_msg(input);
        self.peer.send(&msg).await?;
        let g = self.answer(&id).await?;
        Ok((id, g))
    }

    /// After a cancel the extension ignores (at `cancelled`): the core must exit with the
    /// code of `outcome` within the stop deadline.
    async fn stopped(
        &mut self,
        cx: &mut Ctx,
        cancelled: Instant,
        outcome: &str,
        what: &str,
    ) -> Result<Verdict, Failure> {
        let e = self.expect_exit(cx, outcome, what).await?;
        let bound = self.sp.secs("stopDeadlineSeconds")? + SLACK;
        if cancelled.elapsed() > bound {
            return Err(Failure::new(format!(
                "the core took {:?} to stop an extension that ignores rukh.cancel (stop deadline {bound:?})",
                cancelled.elapsed()
            )));
        }
        Ok(Verdict::Pass(format!(
            "{e}, {} ms after the cancel it ignored",
            cancelled.elapsed().as_millis()
        )))
    }

    /// Wait for rukh.close, acknowledge it, then end: channel closed, handoff exits `code`.
    async fn closing(&mut self, code: i64) -> Result<(), Failure> {
        let until = Instant::now() + self.wait;
        while self.close.is_none() {
            match self.recv(until).await? {
                Ev::Msg(_) => {}
                Ev::End(_) => break,
                Ev::Timeout => {
                    return Err(Failure::new(format!(
                        "the core sent no rukh.close within {:?} of the completion",
                        self.wait
                    )));
                }
            }
        }
        if let Some(id) = self.close.clone() {
            self.respond(&id, json!({})).await?;
        }
        self.release(code);
        Ok(())
    }

    /// Close the suite's end and let the handoff exit with `code`.
    fn release(&mut self, code: i64) {
        use std::io::Write;
        self.peer.drop_channels();
        if let Some(mut l) = self.link.take() {
            let _ = l.set_write_timeout(Some(self.wait));
            let _ = writeln!(l, "{code}");
        }
    }

    /// The core's exit code (it must exit within the stop deadline and the wait).
    async fn exit(&mut self, cx: &mut Ctx) -> Result<i32, Failure> {
        let limit = self.sp.secs("stopDeadlineSeconds")? + self.wait;
        match cx.child_exit(limit).await {
            Some(Some(code)) => Ok(code),
            _ => Err(Failure::new(format!(
                "the core did not exit within {limit:?}"
            ))),
        }
    }

    fn stdout_text(&self) -> Vec<u8> {
        self.stdout.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Judge the core's exit code against the CLI exit code of `outcome`.
    async fn expect_exit(
        &mut self,
        cx: &mut Ctx,
        outcome: &str,
        what: &str,
    ) -> Result<String, Failure> {
        let want = self.sp.exit(outcome)?;
        let code = self.exit(cx).await?;
        if i64::from(code) != want {
            let mut f = Failure::new(format!("{what}: the core exited {code}, want {want}"));
            let out = self.stdout_text();
            if !out.is_empty() {
                f = f.with("the core's stdout", &out);
            }
            if let Some(g) = self.peer.log.last() {
                f = f.with(format!("last frame from the core: {}", g.brief()), &g.raw);
            }
            return Err(f);
        }
        Ok(format!("{what}: exit {code}"))
    }

    /// A `rukh.call` message with `input`.
    fn call_msg(&mut self, input: Value) -> (String, Value) {
        let id = self.id();
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "rukh.call",
                         "params": {"operation": "conformance.probe", "version": "1", "input": input}});
        (id, msg)
    }

    /// Wait for the answer to our request `id`.
    async fn answer(&mut self, id: &str) -> Result<Box<Got>, Failure> {
        let until = Instant::now() + self.wait;
        loop {
            match self.recv(until).await? {
                Ev::Msg(g) => {
                    if matches!(kind(&g), Some(Kind::Response | Kind::Error))
                        && id_of(&g).as_deref() == Some(id)
                    {
                        return Ok(g);
                    }
                }
                Ev::End(e) => {
                    return Err(self.last(Failure::new(format!(
                        "the core ended the session before answering {id}: {e}"
                    ))));
                }
                Ev::Timeout => {
                    return Err(Failure::new(format!(
                        "the core did not answer {id} within {:?}",
                        self.wait
                    )));
                }
            }
        }
    }

    /// After a bad frame: the core must not answer it with a result, must end the
    /// session and exit with the not-executed code.
    async fn rejected(
        &mut self,
        cx: &mut Ctx,
        offending: Option<&str>,
        what: &str,
    ) -> Result<String, Failure> {
        let until = Instant::now() + self.wait;
        let start = Instant::now();
        loop {
            match self.recv(until).await? {
                Ev::Msg(g) => {
                    let answers = offending.is_some() && id_of(&g).as_deref() == offending;
                    if answers && is_success(&g) {
                        return Err(Failure::new(format!(
                            "the core acted on {what}: it answered with a result"
                        ))
                        .with("the answer", &g.raw));
                    }
                    // A rukh.close may cross a bad frame that follows a valid completion
                    // (duplicate completion); it is not acknowledged, the exit code judges.
                }
                Ev::End(_) => break,
                Ev::Timeout => {
                    return Err(Failure::new(format!(
                        "the core kept the session open {:?} after {what}: a protocol error ends the invocation (R-19)",
                        self.wait
                    )));
                }
            }
        }
        let took = start.elapsed();
        self.release(0);
        let e = self.expect_exit(cx, "execution_failed", what).await?;
        Ok(format!("{e} (session ended after {} ms)", took.as_millis()))
    }
}

/// The result of a successful completion.
fn succeeded() -> Value {
    json!({"status": "succeeded"})
}

/// Launch, confirm, take the invoke; then `then` acts; `Ok` carries the pass detail.
#[cfg(unix)]
async fn ext_ready(cx: &mut Ctx) -> Result<ExtSide, Failure> {
    let mut s = launch_core(cx, None).await?;
    s.ready().await?;
    Ok(s)
}

/// A full honest session; the completion and exit code given.
#[cfg(unix)]
async fn ext_session(cx: &mut Ctx, result: Value, code: i64) -> Result<i32, Failure> {
    let mut s = ext_ready(cx).await?;
    s.complete(result).await?;
    s.closing(code).await?;
    s.exit(cx).await
}

/// After the invoke, send `frames` (raw payloads) and expect the core to fail the invocation.
#[cfg(unix)]
async fn ext_reject_after_invoke(
    cx: &mut Ctx,
    build: impl FnOnce(&mut ExtSide) -> (Option<String>, Vec<Vec<u8>>),
    what: &str,
) -> Result<String, Failure> {
    let mut s = ext_ready(cx).await?;
    let (offending, frames) = build(&mut s);
    for f in &frames {
        s.peer.send_raw(f).await?;
    }
    s.rejected(cx, offending.as_deref(), what)
        .await
        .map_err(|e| {
            frames.iter().fold(e, |e, f| {
                e.with(
                    format!("the frame with {what}"),
                    &framed(&f[..f.len().min(256)]),
                )
            })
        })
}

#[cfg(unix)]
async fn ext_kind(cx: &mut Ctx) -> Result<Verdict, Failure> {
    ext_reject_after_invoke(
        cx,
        |s| {
            let id = s.invoke_id();
            let help = json!({"jsonrpc": "2.0", "id": id,
                              "result": {"status": "succeeded", "help": {"summary": "describe data"}}});
            (None, vec![to_bytes(&help)])
        },
        "a describe completion (help) in an execute session",
    )
    .await
    .map(Verdict::Pass)
}

/// Log records: a burst over the rate, a malformed one and one over the lifecycle cap.
#[cfg(unix)]
async fn ext_log_intake(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = ext_ready(cx).await?;
    let rate = s.sp.count("logIntakeRecordsRate")? as u64;
    let cap = s.sp.count("lifecyclePayloadMax")?;
    let rec = json!({"jsonrpc": "2.0", "method": "rukh.log", "params": {"level": "info", "message": "conformance flood"}});
    let n = rate * 3;
    for _ in 0..n {
        s.peer.send(&rec).await?;
    }
    let bad = json!({"jsonrpc": "2.0", "method": "rukh.log", "params": {"message": "no level"}});
    s.peer.send_raw(&to_bytes(&bad)).await?;
    let big = sized(&rec, "/params", "message", cap + 1)?;
    s.peer.send_raw(&big).await?;
    // The core still answers us and completes normally.
    let (id, _) = s.call(json!({})).await?;
    let answered_logs = s
        .peer
        .log
        .iter()
        .filter(|g| {
            matches!(kind(g), Some(Kind::Response | Kind::Error))
                && id_of(g).as_deref() != Some(id.as_str())
        })
        .count();
    if answered_logs > 0 {
        return Err(Failure::new(format!(
            "the core answered {answered_logs} log notification(s): records are never answered"
        )));
    }
    s.wrap_up().await?;
    let e = s
        .expect_exit(
            cx,
            "succeeded",
            &format!(
                "{n} records at once, a malformed one and a {}-byte one",
                cap + 1
            ),
        )
        .await?;
    Ok(Verdict::Pass(e))
}

/// Log records in a continuous stream until the core cancels.
#[cfg(unix)]
async fn ext_flood_until_cancel(
    s: &mut ExtSide,
    until: Instant,
) -> Result<Option<Duration>, Failure> {
    let rec = json!({"jsonrpc": "2.0", "method": "rukh.log", "params": {"level": "debug", "message": "conformance stream"}});
    let start = Instant::now();
    while s.cancel.is_none() {
        if Instant::now() >= until {
            return Ok(None);
        }
        for _ in 0..FLOOD_BURST {
            s.peer.send(&rec).await?;
        }
        match s.recv((Instant::now() + FLOOD_PAUSE).min(until)).await? {
            Ev::End(e) => {
                return Err(s.last(Failure::new(format!("the core ended the session: {e}"))));
            }
            Ev::Msg(_) | Ev::Timeout => {}
        }
    }
    Ok(Some(start.elapsed()))
}

#[cfg(unix)]
async fn ext_cancel_flood(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let mut s = ext_ready(cx).await?;
    let until = Instant::now() + s.wait;
    // Stream for a moment, then the user cancels; keep streaming.
    let pre = Instant::now() + QUIET;
    ext_flood_until_cancel(&mut s, pre).await?;
    cx.signal_child(nix::sys::signal::Signal::SIGINT)?;
    let Some(_) = ext_flood_until_cancel(&mut s, until).await? else {
        return Err(Failure::new(format!(
            "no rukh.cancel within {:?} of SIGINT while logs streamed (lifecycle reserve, P3.7 item 7)",
            s.wait
        )));
    };
    let (id, _, _) = s
        .cancel
        .clone()
        .ok_or_else(|| Failure::new("suite bug: cancel lost"))?;
    s.respond(&id, json!({})).await?;
    s.release(0);
    let e = s
        .expect_exit(cx, "user_request", "cancelled under a log stream")
        .await?;
    Ok(Verdict::Pass(e))
}

/// A running invocation the user interrupts with `sig`; the session, the cancel's id and
/// its reason.
#[cfg(unix)]
async fn ext_interrupted(
    cx: &mut Ctx,
    sig: nix::sys::signal::Signal,
) -> Result<(ExtSide, String, String), Failure> {
    let mut s = ext_ready(cx).await?;
    // The user interrupts a running command, not one still being set up.
    tokio::time::sleep(QUIET).await;
    cx.signal_child(sig)?;
    let (id, reason) = ext_await_cancel(&mut s).await?;
    Ok((s, id, reason))
}

/// Keep the invocation running until the core cancels; the cancel's reason.
#[cfg(unix)]
async fn ext_await_cancel(s: &mut ExtSide) -> Result<(String, String), Failure> {
    s.until("rukh.cancel", |s| s.cancel.is_some()).await?;
    let (id, params, _) = s
        .cancel
        .clone()
        .ok_or_else(|| Failure::new("suite bug: cancel lost"))?;
    let reason = params
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok((id, reason))
}

#[cfg(unix)]
async fn ext_exit_signal(
    cx: &mut Ctx,
    sig: nix::sys::signal::Signal,
    reason: &str,
) -> Result<Verdict, Failure> {
    let (mut s, id, got) = ext_interrupted(cx, sig).await?;
    if got != reason {
        return Err(Failure::new(format!(
            "{sig} was announced with reason {got:?}, want {reason}"
        ))
        .with(
            "the rukh.cancel",
            &s.core_reqs
                .last()
                .map(|g| g.raw.to_vec())
                .unwrap_or_default(),
        ));
    }
    s.respond(&id, json!({})).await?;
    s.release(0);
    let e = s
        .expect_exit(cx, reason, &format!("{sig} → rukh.cancel {reason}"))
        .await?;
    Ok(Verdict::Pass(e))
}

#[cfg(unix)]
async fn ext_exit_user(cx: &mut Ctx) -> Result<Verdict, Failure> {
    ext_exit_signal(cx, nix::sys::signal::Signal::SIGINT, "user_request").await
}

#[cfg(unix)]
async fn ext_exit_owner(cx: &mut Ctx) -> Result<Verdict, Failure> {
    ext_exit_signal(cx, nix::sys::signal::Signal::SIGTERM, "owner_shutdown").await
}

#[cfg(unix)]
async fn ext_exit_deadline(cx: &mut Ctx) -> Result<Verdict, Failure> {
    if !has_deadline_placeholder(cx) {
        return Ok(Verdict::Skip(format!(
            "the core command has no {DEADLINE_MS} placeholder for its invocation deadline"
        )));
    }
    let mut s = launch_core(cx, Some(SHORT_DEADLINE)).await?;
    s.ready().await?;
    let (_, got) = ext_await_cancel(&mut s).await?;
    if got != "deadline_exceeded" {
        return Err(Failure::new(format!(
            "the invocation deadline was announced with reason {got:?}, want deadline_exceeded"
        )));
    }
    // The extension ignores the cancel: the core must stop it within the single stop deadline.
    let cancelled = Instant::now();
    s.stopped(
        cx,
        cancelled,
        "deadline_exceeded",
        "invocation deadline, cancel ignored",
    )
    .await
}

#[cfg(unix)]
async fn ext_cancel_stop(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (mut s, _, _) = ext_interrupted(cx, nix::sys::signal::Signal::SIGINT).await?;
    // Ignore the cancel entirely: no ack, channel open, process alive.
    let cancelled = Instant::now();
    s.stopped(
        cx,
        cancelled,
        "user_request",
        "cancel ignored by the extension",
    )
    .await
}

#[cfg(unix)]
async fn ext_precedence(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let (mut s, id, _) = ext_interrupted(cx, nix::sys::signal::Signal::SIGINT).await?;
    // A late success after the accepted cancel: discarded, counted; cancelled stays.
    s.complete(succeeded()).await?;
    s.respond(&id, json!({})).await?;
    s.release(0);
    let e = s
        .expect_exit(
            cx,
            "user_request",
            "succeeded completion after the accepted cancel",
        )
        .await?;
    Ok(Verdict::Pass(e))
}

#[cfg(unix)]
async fn ext_outcome(cx: &mut Ctx, fail: bool) -> Result<Verdict, Failure> {
    let sp = Spec::new(cx)?;
    if !fail {
        let code = ext_session(cx, succeeded(), 0).await?;
        let want = sp.exit("succeeded")?;
        if i64::from(code) != want {
            return Err(Failure::new(format!(
                "succeeded completion and exit 0: the core exited {code}, want {want}"
            )));
        }
        return Ok(Verdict::Pass(format!("succeeded → exit {code}")));
    }
    // The command's own code, also one that equals a CLI code (one number never decides).
    let own = [PROBE_EXIT, sp.exit("deadline_exceeded")?];
    let mut seen = Vec::new();
    for c in own {
        let done =
            json!({"status": "command_failed", "exitCode": c, "message": "conformance failure"});
        let code = ext_session(cx, done, c).await?;
        if i64::from(code) != c {
            return Err(Failure::new(format!(
                "command_failed with exitCode {c} and process exit {c}: the core exited {code}, want {c}"
            )));
        }
        seen.push(format!("command_failed {c} → exit {code}"));
    }
    Ok(Verdict::Pass(seen.join("; ")))
}

#[cfg(unix)]
async fn ext_exit_mismatch(cx: &mut Ctx) -> Result<Verdict, Failure> {
    let sp = Spec::new(cx)?;
    let want = sp.exit("execution_failed")?;
    let cases = [
        (
            json!({"status": "command_failed", "exitCode": PROBE_EXIT}),
            PROBE_EXIT + 1,
            format!(
                "command_failed reporting {PROBE_EXIT} but exit {}",
                PROBE_EXIT + 1
            ),
        ),
        (
            succeeded(),
            PROBE_EXIT,
            format!("succeeded but exit {PROBE_EXIT}"),
        ),
        (
            json!({"status": "command_failed"}),
            0,
            "command_failed but exit 0".to_string(),
        ),
    ];
    let mut seen = Vec::new();
    for (done, exit, what) in cases {
        let code = ext_session(cx, done, exit).await?;
        if i64::from(code) != want {
            return Err(Failure::new(format!(
                "{what}: the core exited {code}, want {want} (P3.6 rule 15)"
            )));
        }
        seen.push(format!("{what} → {code}"));
    }
    Ok(Verdict::Pass(seen.join("; ")))
}

// ---------------------------------------------------------------------------
// The table.

bodies! { cx;
    c_denial => core_denial(cx),
    c_cancel => core_cancel(cx),
    c_ok => core_outcome(cx, false),
    c_failed => core_outcome(cx, true),
}

#[cfg(unix)]
bodies! { cx;
    e_kind => ext_kind(cx),
    e_log => ext_log_intake(cx),
    e_flood => ext_cancel_flood(cx),
    e_cancel => ext_cancel_stop(cx),
    e_prec => ext_precedence(cx),
    e_ok => ext_outcome(cx, false),
    e_failed => ext_outcome(cx, true),
    e_mismatch_exit => ext_exit_mismatch(cx),
    e_user => ext_exit_user(cx),
    e_owner => ext_exit_owner(cx),
    e_deadline => ext_exit_deadline(cx),
}

/// A body playing the extension (descriptor passing needs unix).
macro_rules! ext {
    ($f:ident) => {{
        #[cfg(unix)]
        let b: Result<Body, &'static str> = Ok($f);
        #[cfg(not(unix))]
        let b: Result<Body, &'static str> =
            Err("playing the extension needs descriptor passing (unix)");
        b
    }};
}

/// Why the extension's side of the kind rule has no hand-written check.
const KIND_DERIVED: &str = "an invoke of another kind than the pinned one is the derived rukh.derived.agreement.kind (R-45); a help completion binds the core: run --play extension";
/// Why a check binds only the extension (run it playing the core).
const ONLY_EXT: &str = "the rule binds the extension; run --play core against an extension";
/// Why a check binds only the core (run it playing the extension).
const ONLY_CORE: &str = "the rule binds the core; run --play extension against a core";

/// The suite for `role` (`core` or `extension`), in order; `None` for another role.
pub fn checks(role: &str) -> Option<Vec<Check>> {
    let rows: Vec<Row> = vec![
        (
            "rukh.invoke.kind",
            "an execute invocation cannot complete with describe's help (the invoke's own kind: the derived agreement.kind, R-45)",
            "Frame format and value representation; P3.6 rule 11 (R-13)",
            Err(KIND_DERIVED),
            ext!(e_kind),
        ),
        (
            "rukh.call.denial",
            "an ordinary denial (typed operation error) keeps the session healthy",
            "Requests, responses and events; P3.7 item 10 (R-30)",
            Ok(c_denial),
            Err(ONLY_EXT),
        ),
        (
            "rukh.log.intake",
            "log floods, malformed and over-cap records are dropped and counted, never a command error",
            "Load, log and UI events; P3.6 rule 12; P3.7 item 7 (R-16, R-26, R-41)",
            Err(ONLY_CORE),
            ext!(e_log),
        ),
        (
            "rukh.log.cancel-under-flood",
            "cancel goes through while the extension streams logs (lifecycle reserve)",
            "Load, log and UI events; P3.7 item 7",
            Err(ONLY_CORE),
            ext!(e_flood),
        ),
        (
            "rukh.cancel.stop",
            "after rukh.cancel the extension stops within the voluntary stop; one that ignores it is stopped within the stop deadline",
            "Completion and transport errors; P3.5 (voluntaryStopSeconds, stopDeadlineSeconds); P3.7 item 13",
            Ok(c_cancel),
            ext!(e_cancel),
        ),
        (
            "rukh.cancel.precedence",
            "a cancel accepted before the result wins over a late succeeded completion (discarded as late)",
            "Completion and transport errors; P3.4 precedence 1, 2; P3.2 late responses",
            Err(ONLY_CORE),
            ext!(e_prec),
        ),
        (
            "rukh.outcome.succeeded",
            "succeeded completion, close acknowledged, process exit 0 → CLI exit 0",
            "Completion and transport errors; P3.6 rule 15; P3.7 item 15",
            Ok(c_ok),
            ext!(e_ok),
        ),
        (
            "rukh.outcome.command-failed",
            "command_failed with the command's own exit code, which the CLI reports (even 124)",
            "Completion and transport errors (CLI exit codes); P3.6 rule 15; P3.7 item 15 (R-14, R-24)",
            Ok(c_failed),
            ext!(e_failed),
        ),
        (
            "rukh.outcome.exit-mismatch",
            "a completion that contradicts the exit status is execution_failed (125)",
            "Completion and transport errors; P3.6 rule 15 (R-14)",
            Err(ONLY_CORE),
            ext!(e_mismatch_exit),
        ),
        (
            "rukh.exit.user-request",
            "SIGINT → rukh.cancel user_request → CLI exit 130",
            "Completion and transport errors (CLI exit codes); P3.7 item 15",
            Err(ONLY_CORE),
            ext!(e_user),
        ),
        (
            "rukh.exit.owner-shutdown",
            "SIGTERM → rukh.cancel owner_shutdown → CLI exit 130",
            "Completion and transport errors (CLI exit codes); P3.7 item 15",
            Err(ONLY_CORE),
            ext!(e_owner),
        ),
        (
            "rukh.exit.deadline",
            "the invocation deadline → rukh.cancel deadline_exceeded → CLI exit 124, within the stop deadline",
            "Completion and transport errors (CLI exit codes); P3.5; P3.7 item 15",
            Err(ONLY_CORE),
            ext!(e_deadline),
        ),
    ];
    super::table(role, ["core", "extension"], rows)
}
