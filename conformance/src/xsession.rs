//! The xsession suite (seed 001, cross-session messaging; digest P1): the
//! registry, inbox, auth, delivery_status and admission rules, played as the
//! sender against a real recipient session (`--play sender`) or as the
//! recipient against a real sending session (`--play recipient`).
//!
//! A session is launched afresh for every check from `exec:CMD` with the
//! suite's placeholders (docs/conformance.md): `{registry}` (the registry
//! directory), `{name}` (the name it registers under), `{socket}` (where it
//! binds its inbox), `{peer}` (the suite's name, the address it sends to),
//! and the optional `{count}` (how many messages to send) and `{summary}` (a
//! JSON file it writes on exit with the state of every msgId it sent). The
//! suite is a session too: it binds its own inbox (the `from` of its frames,
//! where statuses come back on new connections) and, playing the recipient,
//! publishes its own registry record (temp file + rename, 0600, fresh).
//!
//! One rule, one failing check: every check plays a conforming party for the
//! rules it does not judge (an auth line missing from the target's connection
//! fails `xsession.3.auth` only; the other recipient checks note it and go on).
//! Statuses are best-effort (§5): a check whose rule shows only through
//! statuses skips, with the reason, when not even its positive control gets one.

#[cfg(not(unix))]
use super::{BodyFuture, Ctx, Failure};
use super::{Check, Row};

/// Off unix every body reports that the suite needs unix sockets (`imp` is unix-only).
#[cfg(not(unix))]
macro_rules! bodies {
    ($($name:ident => $f:path),* $(,)?) => {
        $(fn $name(_cx: &mut Ctx) -> BodyFuture<'_> {
            Box::pin(async { Err(Failure::new("the xsession suite needs unix sockets")) })
        })*
    };
}

bodies! {
    s_record => imp::sender_record,
    s_symlink => imp::sender_symlink,
    s_removed => imp::sender_removed,
    r_freshness => imp::recipient_freshness,
    r_cleanup => imp::recipient_cleanup,
    s_misaddressed => imp::sender_misaddressed,
    s_socket => imp::sender_socket,
    s_one_way => imp::sender_one_way, r_one_way => imp::recipient_one_way,
    s_auth => imp::sender_auth, r_auth => imp::recipient_auth,
    r_user_frame => imp::recipient_user_frame,
    s_transitions => imp::sender_transitions, r_transitions => imp::recipient_transitions,
    r_per_sender => imp::recipient_per_sender_rate,
}

/// The derived checks' sessions ([`imp::open_session`]).
#[cfg(unix)]
pub const OPENER: Option<super::Opener> = Some(imp::open_session);
/// Off unix the derived checks have no way to reach an inbox.
#[cfg(not(unix))]
pub const OPENER: Option<super::Opener> = None;

const RECIPIENT_ONLY: &str =
    "it binds the recipient's inbox; run --play sender against a recipient";
const SENDER_ONLY: &str = "it binds the sender; run --play recipient against a sender";
const DERIVED_RATES: &str = "the recipient's admission buckets are limits the derived rate.perSenderRate and rate.globalRate checks judge; run --play recipient for the sender's own";
const NOT_ON_WIRE_POLICY: &str = "the outcome depends on the recipient's own configuration (agents.crossSessionInbound, agents.crossSessionHeldExpiry) or on its session consuming its queue, which nothing on the wire sets";

/// The suite for `role` (`sender` or `recipient`), in the seed's order; `None` for another role.
pub fn checks(role: &str) -> Option<Vec<Check>> {
    let rows: Vec<Row> = vec![
        (
            "xsession.1.record",
            "the session publishes a fresh record: <pid>[-<8 hex>].json matching pid, mode 0600 in a 0700 directory, v1 fields, never seen half-written, ipcPath dialable",
            "§1 L11-L37 (P1.7 items 1, 2, 4; X-12, X-22, X-23)",
            Ok(s_record),
            Err(
                "a sender need not publish a record (§1 L33: only a program that wants to be discovered); run --play sender",
            ),
        ),
        (
            "xsession.1.symlink",
            "the record is never written through a symlink planted at its path",
            "§1 L33 (P1.7 item 1)",
            Ok(s_symlink),
            Err("a sender need not publish a record; run --play sender"),
        ),
        (
            "xsession.1.removed",
            "the record is deleted when the session exits (SIGTERM)",
            "§1 L33 (P1.7 item 1)",
            Ok(s_removed),
            Err("a sender need not publish a record; run --play sender"),
        ),
        (
            "xsession.1.freshness",
            "only fresh records are used: zero-padded names, pid/name mismatch, bad suffix, schemaVersion 2, another pidNs or boot id, a dead PID or other start ticks are ignored; <pid>-<8 hex>.json and procStart null are accepted",
            "§1 L14, L37, §7 (P1.7 items 2-4; X-22)",
            Err("the recipient never reads the registry; run --play recipient"),
            Ok(r_freshness),
        ),
        (
            "xsession.1.cleanup",
            "a record is deleted by a listing session only when procStart proves its owner gone: a dead PID's record goes; schemaVersion 2, foreign pidNs or boot id and procStart null stay",
            "§1 L33, §7 (P1.7 items 3, 5; X-22)",
            Err("the recipient never reads the registry; run --play recipient"),
            Ok(r_cleanup),
        ),
        (
            "xsession.1.misaddressed",
            "a toSessionId naming no session behind the inbox is answered misaddressed; without toSessionId a single-session inbox processes the frame",
            "§1 L41 (P1.7 item 12; X-16)",
            Ok(s_misaddressed),
            Err(RECIPIENT_ONLY),
        ),
        (
            "xsession.2.socket",
            "the inbox socket has mode 0600 in a 0700 directory and answers a dial",
            "§2 L51 (P1.7 item 6)",
            Ok(s_socket),
            Err(RECIPIENT_ONLY),
        ),
        (
            "xsession.2.one-way",
            "the listener never writes on an accepted connection; statuses come on a new connection to `from`, auth line first with the frame's replyToken",
            "§2 L55, §5 L90 (P1.7 item 11; X-28, X-31)",
            Ok(s_one_way),
            Ok(r_one_way),
        ),
        (
            "xsession.3.auth",
            "the auth line with the record's ipcToken is the first line; a missing, wrong or garbled one drops the connection silently, with no status",
            "§3 L59-L65 (P1.7 item 10; X-3, X-25)",
            Ok(s_auth),
            Ok(r_auth),
        ),
        (
            "xsession.4.user-frame",
            "the sender writes valid user frames (msgV, unique msgId, message) with from, replyToken and the target's toSessionId, then half-closes",
            "§2 L55, §4, §5 L113 (X-11, X-27)",
            Err(SENDER_ONLY),
            Ok(r_user_frame),
        ),
        (
            "xsession.5.transitions",
            "delivery_status is a state machine: statuses follow the deliveryStatus table, a resent decided msgId repeats its verdict, repeats and non-table statuses are ignored",
            "§5 L105-L111, §6 step 2 (P1.7 items 15, 21; X-6, X-14)",
            Ok(s_transitions),
            Ok(r_transitions),
        ),
        (
            "xsession.6.per-sender-rate",
            "a sender mirrors the per-sender bucket: asked for more, it writes a burst of perSenderRate.burst, then one per perSeconds (the recipient's buckets: the derived rate.perSenderRate and rate.globalRate)",
            "§6 step 1, L125 (P1.7 item 13; X-19, X-29)",
            Err(DERIVED_RATES),
            Ok(r_per_sender),
        ),
        (
            "xsession.6.policy",
            "policy: unset → held unless fromMode names the recipient's class; refuse → refused; accept → delivered",
            "§6 step 3 (P1.7 item 16)",
            Err(NOT_ON_WIRE_POLICY),
            Err(NOT_ON_WIRE_POLICY),
        ),
        (
            "xsession.6.hold-capacity",
            "the hold buffer keeps holdCapacity messages; the next is dropped/queue-full, none evicted; held messages expire per agents.crossSessionHeldExpiry",
            "§6 step 4 (P1.7 items 17, 18)",
            Err(NOT_ON_WIRE_POLICY),
            Err(NOT_ON_WIRE_POLICY),
        ),
        (
            "xsession.6.input-queue",
            "the input queue keeps inputQueueCapacity peer messages; the next accepted one is dropped/queue-full",
            "§6 step 5 (P1.7 item 19)",
            Err(NOT_ON_WIRE_POLICY),
            Err(NOT_ON_WIRE_POLICY),
        ),
        (
            "xsession.6.exemptions",
            "own-process and controller connections are exempt from the duplicate check and accepted by the default policy",
            "§3, §6 (P1.7 item 14; M1-1, X-2)",
            Err(
                "own-process and controller tokens are issued out of band (the seed lost their list, M1-1); the suite holds only the record's token",
            ),
            Err(
                "own-process and controller tokens are issued out of band; a sender is not told which kind it holds",
            ),
        ),
        (
            "xsession.6.presentation",
            "a delivered message is shown as <cross_session_message from=… name=…> with origin from the connection; the token never reaches a model or a log",
            "§1 L31, §6 L127-L133 (P1.7 items 23, 25; X-32)",
            Err("presentation and logging are recipient-internal; the suite sees the wire only"),
            Err("presentation and logging are session-internal; the suite sees the wire only"),
        ),
    ];
    super::table(role, ["sender", "recipient"], rows)
}

#[cfg(unix)]
mod imp {
    use std::collections::{HashMap, HashSet};
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use bytes::Bytes;
    use contract::Contract;
    use contract::io::JsonCodec;
    use contract::wire::{FrameError, Wire};
    use futures_util::StreamExt;
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{UnixListener, UnixStream};
    use tokio::sync::mpsc;
    use tokio::task::JoinHandle;
    use tokio_util::codec::FramedRead;

    use super::super::{Ctx, Failure, Stdout, Target, Verdict, pass, skip};

    /// The contract's first channel (the only one of a single-channel contract).
    fn first_channel(wire: &Wire) -> Result<String, Failure> {
        let first = wire.contract().channels.keys().next().cloned();
        first.ok_or_else(|| Failure::new("the contract has no channel"))
    }

    mod open;
    use contract_transport::endpoint::Endpoint;
    pub(super) use open::open_session;

    /// The name the suite's own session registers under (the target's `{peer}`).
    const SUITE_NAME: &str = "conformance-suite";
    /// The name the target registers under (`{name}`).
    const TARGET_NAME: &str = "conformance-target";
    /// Registry name decoys and bystanders use (playing the recipient).
    const BYSTANDER: &str = "conformance-bystander";
    /// The approval class the suite claims: the only value the seed shows (§4).
    const FROM_MODE: &str = "prompting";
    /// Registry polling while waiting for the target's record (fast enough to catch a torn write).
    const POLL: Duration = Duration::from_millis(5);
    /// After the fence's status: how long a status that must not come may still be on its way.
    const STATUS_GRACE: Duration = Duration::from_millis(700);
    /// Bytes kept as evidence from a connection.
    const EVIDENCE_MAX: usize = 512;
    /// Lines kept per connection (more are counted as one note).
    const LINES_MAX: usize = 64;
    /// A registry file read is never larger than this (a shared directory).
    const RECORD_READ_MAX: u64 = 1 << 20;

    // ---------------------------------------------------------------- contract values

    /// A token bucket: `burst` at once, then one per `per` seconds.
    struct Rate {
        burst: u64,
        per: f64,
    }

    struct Lim {
        per_sender: Rate,
        reg_dir_mode: u32,
        reg_file_mode: u32,
        sock_dir_mode: u32,
        sock_file_mode: u32,
        suffix_hex: usize,
        token_hex: usize,
    }

    fn lim(c: &Contract) -> Result<Lim, Failure> {
        let l = c.evaluated_limits();
        let rate = |name: &str| -> Result<Rate, Failure> {
            let r = l.rate(name)?;
            let (period, _) = r
                .token_period()
                .ok_or_else(|| Failure::new(format!("limit {name} is not a token bucket")))?;
            Ok(Rate {
                burst: r.burst,
                per: period.as_secs_f64(),
            })
        };
        let chars = |name: &str| -> Result<usize, Failure> { Ok(l.count(name)? as usize) };
        Ok(Lim {
            per_sender: rate("perSenderRate")?,
            reg_dir_mode: l.mode("registryDirMode")?,
            reg_file_mode: l.mode("registryFileMode")?,
            sock_dir_mode: l.mode("socketDirMode")?,
            sock_file_mode: l.mode("socketFileMode")?,
            suffix_hex: chars("registrySuffixHexChars")?,
            token_hex: chars("ipcTokenHexChars")?,
        })
    }

    /// The sender's deliveryStatus machine and the status vocabulary.
    struct Sm {
        machine: contract::model::StateMachine,
        known: HashSet<String>,
    }

    impl Sm {
        fn allowed(&self, from: &str, to: &str) -> bool {
            self.machine.allows(from, to)
        }
    }

    fn sm(c: &Contract) -> Result<Sm, Failure> {
        let m = c.machine("deliveryStatus")?;
        let known: HashSet<String> = c
            .code_table("deliveryStatus")?
            .values
            .iter()
            .filter_map(|v| v.value.as_str().map(str::to_string))
            .collect();
        Ok(Sm {
            machine: m.clone(),
            known,
        })
    }

    /// A value of a code table, checked to be there (the suite names codes, the contract owns them).
    fn code(c: &Contract, table: &str, value: &str) -> Result<String, Failure> {
        c.code(table, value)
            .map_err(|e| Failure::new(format!("suite bug: {e}")))?;
        Ok(value.to_string())
    }

    /// A state of the deliveryStatus machine, checked to be there.
    fn state(sm: &Sm, s: &str) -> Result<String, Failure> {
        if sm.known.contains(s) {
            Ok(s.to_string())
        } else {
            Err(Failure::new(format!(
                "suite bug: the contract's deliveryStatus has no {s:?}"
            )))
        }
    }

    fn version(c: &Contract, name: &str) -> Value {
        c.versions
            .iter()
            .find(|v| v.name == name)
            .and_then(|v| v.values.iter().max_by_key(|x| x.as_u64()).cloned())
            .unwrap_or(json!(1))
    }

    /// Everything a check works with.
    struct Env {
        wire: Arc<Wire>,
        channel: String,
        me: String,
        other: String,
        lim: Lim,
        sm: Sm,
        msg_v: Value,
        schema_v: Value,
        wait: Duration,
        dir: PathBuf,
        codec: JsonCodec,
    }

    fn env(cx: &mut Ctx) -> Result<Env, Failure> {
        let c = cx.wire.contract().clone();
        let channel = first_channel(&cx.wire)?;
        let codec = JsonCodec::for_channel(&cx.wire, &channel)
            .map_err(|e| Failure::new(format!("channel {channel}: {e}")))?;
        Ok(Env {
            wire: cx.wire.clone(),
            channel,
            me: cx.role.clone(),
            other: cx.other.clone(),
            lim: lim(&c)?,
            sm: sm(&c)?,
            msg_v: version(&c, "msgV"),
            schema_v: version(&c, "schemaVersion"),
            wait: cx.opts.deadline,
            dir: cx.private_dir()?,
            codec,
        })
    }

    impl Env {
        fn contract(&self) -> &Contract {
            self.wire.contract()
        }

        fn soon(&self) -> Instant {
            Instant::now() + self.wait
        }

        /// The registry directory the target is given (`{registry}`).
        fn registry(&self) -> PathBuf {
            self.dir.join("registry")
        }

        /// Where the target writes its summary on exit (`{summary}`).
        fn summary(&self) -> PathBuf {
            self.dir.join("summary.json")
        }

        /// The method `from` sent, per the contract, or why the line is not valid.
        fn decode(&self, from: &str, line: &[u8]) -> Result<String, String> {
            self.wire
                .decode_with(&self.channel, from, line, &|_| None)
                .map(|m| m.method.unwrap_or_default())
                .map_err(|v| format!("{} ({})", v.reason, v.class.name()))
        }

        /// A line the suite sends as its own party, validated first (a failure is a suite bug).
        fn line(&self, v: &Value) -> Result<Vec<u8>, Failure> {
            let mut b = serde_json::to_vec(v).map_err(|e| Failure::new(e.to_string()))?;
            if let Err(why) = self.decode(&self.me, &b) {
                return Err(Failure::new(format!(
                    "suite bug: the contract rejects the {} frame the suite would send: {why}",
                    self.me
                ))
                .with("the frame", &b));
            }
            b.push(b'\n');
            Ok(b)
        }

        /// A deliberately broken or foreign line, sent unvalidated.
        fn raw(v: &Value) -> Vec<u8> {
            let mut b = serde_json::to_vec(v).unwrap_or_default();
            b.push(b'\n');
            b
        }

        fn auth(&self, token: &str) -> Result<Vec<u8>, Failure> {
            self.line(&json!({"msgV": self.msg_v, "type": "auth", "token": token}))
        }
    }

    // ---------------------------------------------------------------- small helpers

    fn random(n: usize) -> Vec<u8> {
        use ring::rand::SecureRandom;
        let mut b = vec![0u8; n];
        if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
            // Uniqueness only matters within one run: fall back to the clock.
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            for (i, x) in b.iter_mut().enumerate() {
                *x = (t >> ((i % 16) * 8)) as u8 ^ i as u8;
            }
        }
        b
    }

    fn hex(n: usize) -> String {
        random(n.div_ceil(2))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()[..n]
            .to_string()
    }

    /// A random (version 4) UUID.
    fn uuid() -> String {
        let mut b = random(16);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    fn boot_id() -> Result<String, Failure> {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .map_err(|e| Failure::new(format!("cannot read the boot id: {e}")))
    }

    /// Field 22 (starttime) of /proc/<pid>/stat; `None` when the PID is not alive.
    fn start_ticks(pid: u64) -> Option<u64> {
        let data = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
        // comm may hold spaces and parentheses: fields resume after the last ')'.
        let close = data.iter().rposition(|b| *b == b')')?;
        let rest = std::str::from_utf8(data.get(close + 2..)?).ok()?;
        rest.split_whitespace().nth(19)?.parse().ok()
    }

    fn pid_ns() -> Result<u64, Failure> {
        std::fs::metadata("/proc/self/ns/pid")
            .map(|m| m.ino())
            .map_err(|e| Failure::new(format!("cannot read the PID namespace: {e}")))
    }

    /// The suite's own process identity, as its record states it.
    struct Me {
        pid: u64,
        boot: String,
        ticks: u64,
        ns: u64,
    }

    fn me() -> Result<Me, Failure> {
        let pid = u64::from(std::process::id());
        Ok(Me {
            pid,
            boot: boot_id()?,
            ticks: start_ticks(pid).ok_or_else(|| Failure::new("cannot read own start ticks"))?,
            ns: pid_ns()?,
        })
    }

    /// PIDs that just ended (reaped children): a record naming one is provably stale.
    async fn dead_pids(n: usize) -> Result<Vec<u64>, Failure> {
        let mut out = Vec::new();
        for _ in 0..n {
            let mut child = tokio::process::Command::new("true")
                .spawn()
                .map_err(|e| Failure::new(format!("cannot start `true` for a dead PID: {e}")))?;
            let pid = child.id().map(u64::from);
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            match pid {
                Some(p) if start_ticks(p).is_none() => out.push(p),
                _ => return Err(Failure::new("cannot obtain a dead PID")),
            }
        }
        Ok(out)
    }

    fn mode_of(p: &Path) -> Option<u32> {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| m.permissions().mode() & 0o777)
    }

    /// The PID digits of a registry file name (`<pid>.json`, `<pid>-<8 hex>.json`), canonical only.
    fn name_pid(fname: &str, suffix_hex: usize) -> Option<&str> {
        let stem = fname.strip_suffix(".json")?;
        let (pid, suffix) = match stem.split_once('-') {
            Some((p, s)) => (p, Some(s)),
            None => (stem, None),
        };
        if pid.is_empty() || pid.starts_with('0') || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if let Some(s) = suffix
            && (s.len() != suffix_hex || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        {
            return None;
        }
        Some(pid)
    }

    /// Faults of `v` against the contract's registry record schema (type, const, minimum,
    /// minLength and required: the keywords that schema uses).
    fn record_faults(c: &Contract, v: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let Some(mut schema) = c.files.values().next().map(|f| &f.schema) else {
            return vec!["the contract has no registry file schema".into()];
        };
        for _ in 0..8 {
            match schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/$defs/"))
                .and_then(|n| c.defs.get(n))
            {
                Some(s) => schema = s,
                None => break,
            }
        }
        let Some(obj) = v.as_object() else {
            return vec!["not a JSON object".into()];
        };
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(r) {
                out.push(format!("required field {r} is missing"));
            }
        }
        let props = schema.get("properties").and_then(Value::as_object);
        for (k, p) in props.into_iter().flatten() {
            let Some(x) = obj.get(k) else { continue };
            let types: Vec<&str> = match p.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let is = |t: &str| match t {
                "integer" => x.is_i64() || x.is_u64(),
                "number" => x.is_number(),
                "string" => x.is_string(),
                "null" => x.is_null(),
                "boolean" => x.is_boolean(),
                "object" => x.is_object(),
                "array" => x.is_array(),
                _ => true,
            };
            if !types.is_empty() && !types.iter().any(|t| is(t)) {
                out.push(format!("{k}: {x} is not {}", types.join(" or ")));
            }
            if let Some(cv) = p.get("const")
                && cv != x
            {
                out.push(format!("{k}: {x} is not {cv}"));
            }
            if let (Some(min), Some(n)) = (p.get("minimum").and_then(Value::as_f64), x.as_f64())
                && n < min
            {
                out.push(format!("{k}: {n} is below {min}"));
            }
            if let (Some(min), Some(s)) = (p.get("minLength").and_then(Value::as_u64), x.as_str())
                && (s.encode_utf16().count() as u64) < min
            {
                out.push(format!("{k}: shorter than {min}"));
            }
        }
        out
    }

    /// Write a registry record the way §1 asks: temp file in the same directory, created
    /// with the file mode, renamed over the target.
    fn write_record(
        env: &Env,
        registry: &Path,
        fname: &str,
        v: &Value,
    ) -> Result<PathBuf, Failure> {
        let target = registry.join(fname);
        let tmp = registry.join(format!(".{fname}.{}.tmp", hex(8)));
        let data = serde_json::to_vec(v).map_err(|e| Failure::new(e.to_string()))?;
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(env.lim.reg_file_mode)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &target)
        };
        write().map_err(|e| Failure::new(format!("cannot write {}: {e}", target.display())))?;
        Ok(target)
    }

    fn make_dir(p: &Path, mode: u32) -> Result<(), Failure> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(mode)
            .create(p)
            .and_then(|()| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)))
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", p.display())))
    }

    // ---------------------------------------------------------------- launching

    const USAGE: &str = "the xsession suite launches its target per check: --target 'exec:CMD …' with {registry}, {name} and {socket} (and, playing the recipient, {peer}; optional {count} and {summary}); see docs/conformance.md";

    struct Launched {
        pid: u32,
        has_count: bool,
        has_summary: bool,
    }

    /// Launch the target for this check: its registry, inbox socket and summary file in the
    /// check's private directory, `count` messages to send (a sender).
    fn launch(cx: &mut Ctx, env: &Env, count: u64) -> Result<Launched, Failure> {
        let argv = match cx.target() {
            // `exec:` with placeholders other than {control}/{data} is a template target.
            Target::Template { argv } | Target::Pipe(Endpoint::Exec(argv))
                if argv.iter().any(|a| a.contains("{registry}")) =>
            {
                argv.clone()
            }
            _ => return Err(Failure::new(USAGE)),
        };
        let has = |p: &str| argv.iter().any(|a| a.contains(p));
        let (has_count, has_summary) = (has("{count}"), has("{summary}"));
        let registry = env.registry().display().to_string();
        let socket = env.dir.join("t").join("inbox.sock").display().to_string();
        let summary = env.summary().display().to_string();
        let count = count.to_string();
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                a.replace("{registry}", &registry)
                    .replace("{name}", TARGET_NAME)
                    .replace("{socket}", &socket)
                    .replace("{peer}", SUITE_NAME)
                    .replace("{count}", &count)
                    .replace("{summary}", &summary)
            })
            .collect();
        // Its stdout is not part of the protocol.
        let pid = cx.spawn(&argv, Stdout::Discard)?.pid;
        Ok(Launched {
            pid,
            has_count,
            has_summary,
        })
    }

    /// Launch the target (one message to send) and wait for the record it publishes under
    /// its name; `torn` collects what was read of a record while it was being written.
    async fn published(
        cx: &mut Ctx,
        env: &Env,
        torn: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<Record, Failure> {
        launch(cx, env, 1)?;
        await_record(env, &env.registry(), TARGET_NAME, env.soon(), torn).await
    }

    /// Dial `ipc` until it answers or `until` passes; the last refusal then.
    async fn dialable(ipc: &str, until: Instant) -> Result<(), std::io::Error> {
        loop {
            match UnixStream::connect(ipc).await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= until => return Err(e),
                Err(_) => tokio::time::sleep(POLL * 10).await,
            }
        }
    }

    // ---------------------------------------------------------------- the suite's inbox

    enum End {
        Eof,
        TooLong(String, Vec<u8>),
        Timeout,
        Error(String),
    }

    impl End {
        fn text(&self) -> String {
            match self {
                End::Eof => "half-closed".into(),
                End::TooLong(e, _) => e.clone(),
                End::Timeout => "still open at the deadline".into(),
                End::Error(e) => e.clone(),
            }
        }
    }

    /// One connection to the suite's inbox, read to its end.
    struct InConn {
        /// Which of the suite's sockets it came to.
        path: PathBuf,
        lines: Vec<Bytes>,
        end: End,
        at: Instant,
    }

    /// The suite's inbox: one or more listening sockets feeding one queue.
    struct Inbox {
        paths: Vec<PathBuf>,
        token: String,
        rx: mpsc::UnboundedReceiver<InConn>,
        tasks: Vec<JoinHandle<()>>,
    }

    impl Drop for Inbox {
        fn drop(&mut self) {
            for t in &self.tasks {
                t.abort();
            }
        }
    }

    impl Inbox {
        fn bind(env: &Env, paths: Vec<PathBuf>) -> Result<Self, Failure> {
            let (tx, rx) = mpsc::unbounded_channel();
            let mut tasks = Vec::new();
            for p in &paths {
                let l = UnixListener::bind(p)
                    .map_err(|e| Failure::new(format!("cannot bind {}: {e}", p.display())))?;
                let _ = std::fs::set_permissions(
                    p,
                    std::fs::Permissions::from_mode(env.lim.sock_file_mode),
                );
                tasks.push(tokio::spawn(serve(
                    l,
                    p.clone(),
                    env.codec.clone(),
                    env.wait,
                    tx.clone(),
                )));
            }
            Ok(Inbox {
                paths,
                token: hex(env.lim.token_hex),
                rx,
                tasks,
            })
        }

        fn path(&self) -> String {
            self.paths
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        }

        async fn next(&mut self, until: Instant) -> Option<InConn> {
            tokio::time::timeout_at(until.into(), self.rx.recv())
                .await
                .ok()
                .flatten()
        }
    }

    async fn serve(
        l: UnixListener,
        path: PathBuf,
        codec: JsonCodec,
        wait: Duration,
        tx: mpsc::UnboundedSender<InConn>,
    ) {
        while let Ok((stream, _)) = l.accept().await {
            let (codec, tx, path) = (codec.clone(), tx.clone(), path.clone());
            tokio::spawn(async move {
                let at = Instant::now();
                let (lines, end) = read_conn(stream, codec, wait).await;
                let _ = tx.send(InConn {
                    path,
                    lines,
                    end,
                    at,
                });
            });
        }
    }

    /// Read NDJSON lines (the contract's framing and cap) until the dialer half-closes.
    /// The suite's end closes when this returns: the listener never writes.
    async fn read_conn(stream: UnixStream, codec: JsonCodec, wait: Duration) -> (Vec<Bytes>, End) {
        let until = Instant::now() + wait;
        let mut f = FramedRead::new(stream, codec);
        let mut lines = Vec::new();
        loop {
            match tokio::time::timeout_at(until.into(), f.next()).await {
                Err(_) => return (lines, End::Timeout),
                Ok(None) => return (lines, End::Eof),
                Ok(Some(Ok(l))) => {
                    if lines.len() < LINES_MAX {
                        lines.push(l);
                    }
                }
                Ok(Some(Err(e))) => {
                    let head: Vec<u8> =
                        f.read_buffer().iter().take(EVIDENCE_MAX).copied().collect();
                    return match e {
                        FrameError::LineTooLong { .. } => {
                            (lines, End::TooLong(e.to_string(), head))
                        }
                        other => (lines, End::Error(other.to_string())),
                    };
                }
            }
        }
    }

    // ---------------------------------------------------------------- dialing

    enum DialEnd {
        /// The listener closed, after this long.
        Closed(Duration),
        /// The connection broke (the listener closed while the suite wrote).
        Reset(String),
        /// Still open at the deadline.
        Open,
    }

    struct Dialed {
        wrote: Result<(), String>,
        back: Vec<u8>,
        end: DialEnd,
    }

    impl Dialed {
        /// Whether the listener ended the connection (orderly or not) within the deadline.
        fn closed(&self) -> bool {
            !matches!(self.end, DialEnd::Open)
        }
    }

    /// Dial `path`, write `payload` in one write, optionally half-close, and read until the
    /// listener closes or `wait` passes. The write half stays open until the read ends.
    async fn dial(
        path: &str,
        payload: &[u8],
        half_close: bool,
        wait: Duration,
    ) -> Result<Dialed, String> {
        let start = Instant::now();
        let until = start + wait;
        let stream = tokio::time::timeout_at(until.into(), UnixStream::connect(path))
            .await
            .map_err(|_| format!("connecting to {path} timed out"))?
            .map_err(|e| format!("cannot connect to {path}: {e}"))?;
        let (mut rd, mut wr) = stream.into_split();
        let write = async move {
            let r = match tokio::time::timeout_at(until.into(), wr.write_all(payload)).await {
                Err(_) => Err("the write did not finish before the deadline".to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Ok(Ok(())) => Ok(()),
            };
            if r.is_ok() && half_close {
                let _ = wr.shutdown().await;
            }
            (r, wr)
        };
        let read = async move {
            let mut back = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match tokio::time::timeout_at(until.into(), rd.read(&mut buf)).await {
                    Err(_) => return (back, DialEnd::Open),
                    Ok(Ok(0)) => return (back, DialEnd::Closed(start.elapsed())),
                    Ok(Ok(n)) => {
                        if back.len() < EVIDENCE_MAX {
                            back.extend_from_slice(&buf[..n]);
                        }
                    }
                    Ok(Err(e)) => return (back, DialEnd::Reset(e.to_string())),
                }
            }
        };
        let ((wrote, wr), (back, end)) = tokio::join!(write, read);
        drop(wr);
        Ok(Dialed { wrote, back, end })
    }

    // ---------------------------------------------------------------- registry reading

    /// The target's registry record, as found.
    struct Record {
        file: PathBuf,
        value: Value,
        pid: u64,
        ipc_path: Option<String>,
        token: Option<String>,
        session_id: String,
    }

    impl Record {
        fn fname(&self) -> String {
            self.file
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        }
    }

    /// Read every regular `*.json` of the registry (dot files are temp files).
    fn scan(registry: &Path) -> Vec<(PathBuf, String, Vec<u8>)> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(registry) else {
            return out;
        };
        for e in rd.flatten() {
            let fname = e.file_name().to_string_lossy().into_owned();
            if fname.starts_with('.') || !fname.ends_with(".json") {
                continue;
            }
            let p = e.path();
            let Ok(md) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if !md.is_file() || md.len() > RECORD_READ_MAX {
                continue;
            }
            if let Ok(data) = std::fs::read(&p) {
                out.push((p, fname, data));
            }
        }
        out
    }

    /// Poll until a record named `name` appears; `torn` collects grammar-valid files that
    /// were read while not a whole JSON object (a non-atomic write).
    async fn await_record(
        env: &Env,
        registry: &Path,
        name: &str,
        until: Instant,
        torn: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<Record, Failure> {
        loop {
            for (p, fname, data) in scan(registry) {
                let v: Option<Value> = serde_json::from_slice(&data).ok().filter(Value::is_object);
                let Some(v) = v else {
                    if name_pid(&fname, env.lim.suffix_hex).is_some() && torn.len() < 4 {
                        torn.push((fname, data));
                    }
                    continue;
                };
                if v.get("name").and_then(Value::as_str) != Some(name) {
                    continue;
                }
                return Ok(Record {
                    file: p,
                    pid: v.get("pid").and_then(Value::as_u64).unwrap_or(0),
                    ipc_path: v.get("ipcPath").and_then(Value::as_str).map(str::to_string),
                    token: v
                        .get("ipcToken")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    session_id: v
                        .get("sessionId")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    value: v,
                });
            }
            if Instant::now() >= until {
                return Err(Failure::new(format!(
                    "no registry record named {name:?} appeared in {} within {:?}",
                    registry.display(),
                    env.wait
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    // ---------------------------------------------------------------- playing the sender

    /// A status the target sent, as the suite's inbox read it.
    struct Status {
        status: String,
        raw: Bytes,
        /// The token of the connection's auth line, if it had one.
        auth: Option<String>,
        /// The first line when it was not an auth line.
        first: Option<Bytes>,
        valid: Result<(), String>,
    }

    /// The suite playing the sender against a launched recipient.
    struct Tx {
        env: Env,
        rec: Record,
        inbox: Inbox,
        got: HashMap<String, Vec<Status>>,
        seq: u64,
    }

    async fn open_tx(cx: &mut Ctx) -> Result<Tx, Failure> {
        let env = env(cx)?;
        open_tx_with(cx, env, 1).await
    }

    /// Launch the recipient, bind `inboxes` sockets of the suite's own, find the record and
    /// wait until its ipcPath answers.
    async fn open_tx_with(cx: &mut Ctx, env: Env, inboxes: usize) -> Result<Tx, Failure> {
        let paths: Vec<PathBuf> = (0..inboxes)
            .map(|i| env.dir.join(format!("s{i}.sock")))
            .collect();
        let inbox = Inbox::bind(&env, paths)?;
        let rec = published(cx, &env, &mut Vec::new()).await?;
        let Some(ipc) = rec.ipc_path.clone() else {
            return Err(
                Failure::new("the target's record has no ipcPath: nothing to dial")
                    .with("the record", rec.value.to_string().as_bytes()),
            );
        };
        if let Err(e) = dialable(&ipc, env.soon()).await {
            return Err(Failure::new(format!(
                "the target's ipcPath {ipc} does not answer within {:?}: {e}",
                env.wait
            )));
        }
        Ok(Tx {
            env,
            rec,
            inbox,
            got: HashMap::new(),
            seq: 0,
        })
    }

    impl Tx {
        fn ipc(&self) -> String {
            self.rec.ipc_path.clone().unwrap_or_default()
        }

        /// A user frame from the suite's `from` index `k`, to the target's session.
        fn frame(&mut self, k: usize, text: Option<&str>) -> (String, Value) {
            self.seq += 1;
            let id = uuid();
            let from = self
                .inbox
                .paths
                .get(k)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let text = text
                .map(str::to_string)
                .unwrap_or_else(|| format!("conformance message {} {}", self.seq, hex(8)));
            let v = json!({
                "msgV": self.env.msg_v,
                "msgId": id,
                "type": "user",
                "from": from,
                "replyToken": self.inbox.token,
                "fromName": SUITE_NAME,
                "fromMode": FROM_MODE,
                "toSessionId": self.rec.session_id,
                "priority": "next",
                "message": {"role": "user", "content": text},
            });
            (id, v)
        }

        /// The auth line the record asks for (none for a token-less record, §3).
        fn auth(&self) -> Result<Vec<u8>, Failure> {
            match &self.rec.token {
                Some(t) => self.env.auth(t),
                None => Ok(Vec::new()),
            }
        }

        /// Auth line (if the record has a token) and these lines, one write, half-close.
        async fn send_lines(&mut self, lines: &[Vec<u8>]) -> Result<Dialed, Failure> {
            let mut payload = self.auth()?;
            for l in lines {
                payload.extend_from_slice(l);
            }
            dial(&self.ipc(), &payload, true, self.env.wait)
                .await
                .map_err(Failure::new)
        }

        /// Send one valid user frame; its msgId.
        async fn send(
            &mut self,
            k: usize,
            text: Option<&str>,
        ) -> Result<(String, Dialed), Failure> {
            let (id, v) = self.frame(k, text);
            let line = self.env.line(&v)?;
            let d = self.send_lines(&[line]).await?;
            Ok((id, d))
        }

        fn absorb(&mut self, c: InConn) {
            let mut auth = None;
            let mut first = None;
            for (i, l) in c.lines.iter().enumerate() {
                let decoded = self.env.decode(&self.env.other, l);
                let v: Option<Value> = serde_json::from_slice(l).ok();
                let method = decoded.as_deref().ok().unwrap_or("");
                if i == 0 {
                    if method == "auth" {
                        auth = v
                            .as_ref()
                            .and_then(|v| v.get("token"))
                            .and_then(Value::as_str)
                            .map(str::to_string);
                        continue;
                    }
                    first = Some(l.clone());
                }
                let Some(v) = v else { continue };
                let is_status = method == "delivery_status"
                    || (v.get("type").and_then(Value::as_str) == Some("control")
                        && v.get("action").and_then(Value::as_str) == Some("delivery_status"));
                if !is_status {
                    continue;
                }
                let status = v
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let mut ids: Vec<String> = v
                    .get("origMsgId")
                    .and_then(Value::as_str)
                    .map(|s| vec![s.to_string()])
                    .unwrap_or_default();
                if status == "dropped" {
                    ids.extend(
                        v.get("droppedMsgIds")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .map(str::to_string),
                    );
                }
                for id in ids {
                    self.got.entry(id).or_default().push(Status {
                        status: status.clone(),
                        raw: l.clone(),
                        auth: auth.clone(),
                        first: first.clone(),
                        valid: decoded.clone().map(|_| ()),
                    });
                }
            }
        }

        /// Take statuses until `done` holds or `until` passes; whether `done` held.
        async fn pump(&mut self, until: Instant, done: &(dyn Fn(&Tx) -> bool + Sync)) -> bool {
            loop {
                if done(self) {
                    return true;
                }
                match self.inbox.next(until).await {
                    Some(c) => self.absorb(c),
                    None => return done(self),
                }
            }
        }

        /// Wait until every id has at least `n` statuses; the ids still short at the deadline.
        async fn wait_ids(&mut self, ids: &[String], n: usize, until: Instant) -> Vec<String> {
            let want: Vec<String> = ids.to_vec();
            self.pump(until, &|t: &Tx| {
                want.iter()
                    .all(|i| t.got.get(i).is_some_and(|v| v.len() >= n))
            })
            .await;
            ids.iter()
                .filter(|i| self.got.get(*i).is_none_or(|v| v.len() < n))
                .cloned()
                .collect()
        }

        /// Take whatever arrives for `d`.
        async fn linger(&mut self, d: Duration) {
            self.pump(Instant::now() + d, &|_| false).await;
        }

        fn first(&self, id: &str) -> Option<&Status> {
            self.got.get(id).and_then(|v| v.first())
        }

        /// A positive control: one valid message and its first status. `None` when no status
        /// came at all (statuses are best-effort, §5: the rule cannot be judged).
        async fn control(&mut self) -> Result<Option<(String, String)>, Failure> {
            let (id, d) = self.send(0, None).await?;
            if let Err(e) = &d.wrote {
                return Err(Failure::new(format!(
                    "the suite could not write a valid frame to {}: {e}",
                    self.ipc()
                )));
            }
            let missing = self
                .wait_ids(std::slice::from_ref(&id), 1, self.env.soon())
                .await;
            if !missing.is_empty() {
                return Ok(None);
            }
            let s = self
                .first(&id)
                .map(|s| s.status.clone())
                .unwrap_or_default();
            Ok(Some((id, s)))
        }

        /// A fresh valid message whose status must come, then a grace period: after it, a
        /// status that has not come for an earlier message is taken as never coming.
        async fn fence(&mut self) -> Result<(), Failure> {
            let (id, _) = self.send(0, None).await?;
            let missing = self
                .wait_ids(std::slice::from_ref(&id), 1, self.env.soon())
                .await;
            if !missing.is_empty() {
                return Err(Failure::new(format!(
                    "the fence message {id} got no delivery_status within {:?}, although the positive control did",
                    self.env.wait
                )));
            }
            self.linger(STATUS_GRACE).await;
            Ok(())
        }

        /// After [`Tx::fence`], [`Tx::none_for`]: these ids got no status, and none is coming.
        async fn fenced_none(&mut self, ids: &[(String, &str)]) -> Result<(), Failure> {
            self.fence().await?;
            self.none_for(ids)
        }

        /// Failure when any of these ids got a status.
        fn none_for(&self, ids: &[(String, &str)]) -> Result<(), Failure> {
            for (id, what) in ids {
                if let Some(s) = self.first(id) {
                    return Err(Failure::new(format!(
                        "{what}: the frame was processed (status {:?}) instead of the connection being dropped",
                        s.status
                    ))
                    .with("the delivery_status", &s.raw));
                }
            }
            Ok(())
        }

        fn skip_no_status(&self) -> Result<Verdict, Failure> {
            skip(format!(
                "the target sent no delivery_status for a valid message within {:?}; statuses are best-effort (§5), so this rule cannot be judged",
                self.env.wait
            ))
        }
    }

    fn dial_text(d: &Dialed) -> String {
        match &d.end {
            DialEnd::Closed(t) => format!("closed after {t:.2?}"),
            DialEnd::Reset(e) => format!("broken ({e})"),
            DialEnd::Open => "still open".into(),
        }
    }

    // ---------------------------------------------------------------- sender checks (target = recipient)

    pub(super) async fn sender_record(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let env = env(cx)?;
        let registry = env.registry();
        let mut torn = Vec::new();
        let rec = published(cx, &env, &mut torn).await?;
        // Keep watching a little: a torn rewrite would show now too.
        let watch_until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < watch_until {
            for (_, fname, data) in scan(&registry) {
                if serde_json::from_slice::<Value>(&data).is_err()
                    && name_pid(&fname, env.lim.suffix_hex).is_some()
                    && torn.len() < 4
                {
                    torn.push((fname, data));
                }
            }
            tokio::time::sleep(POLL).await;
        }
        let raw = rec.value.to_string();
        let fail = |why: String| Err(Failure::new(why).with("the record", raw.as_bytes()));
        if let Some((fname, data)) = torn.first() {
            return Err(Failure::new(format!(
                "{fname} was read while not a whole JSON object: the record is not written by temp file + rename"
            ))
            .with("what was read", data));
        }
        let fname = rec.fname();
        match name_pid(&fname, env.lim.suffix_hex) {
            None => {
                return fail(format!(
                    "file name {fname:?} is not <pid>.json or <pid>-<8 lowercase hex>.json"
                ));
            }
            Some(p) if p != rec.pid.to_string() => {
                return fail(format!(
                    "file name {fname:?} does not carry pid {} (canonical decimal)",
                    rec.pid
                ));
            }
            Some(_) => {}
        }
        let c = env.contract();
        let faults = record_faults(c, &rec.value);
        if !faults.is_empty() {
            return fail(format!(
                "the record does not match the contract: {}",
                faults.join("; ")
            ));
        }
        if let Some(m) = mode_of(&rec.file)
            && m != env.lim.reg_file_mode
        {
            return fail(format!(
                "{fname} has mode {m:04o}, not {:04o}",
                env.lim.reg_file_mode
            ));
        }
        if let Some(m) = mode_of(&registry)
            && m != env.lim.reg_dir_mode
        {
            return fail(format!(
                "the registry directory has mode {m:04o}, not {:04o}",
                env.lim.reg_dir_mode
            ));
        }
        let mine = me()?;
        let ns = rec.value.get("pidNs").and_then(Value::as_u64);
        if ns != Some(mine.ns) {
            return fail(format!("pidNs {ns:?} is not this namespace's {}", mine.ns));
        }
        let live = start_ticks(rec.pid);
        if live.is_none() {
            return fail(format!("pid {} is not alive", rec.pid));
        }
        match rec.value.get("procStart") {
            Some(Value::Null) => {}
            Some(Value::String(s)) => {
                let (boot, ticks) = s.rsplit_once(':').unwrap_or(("", ""));
                if boot != mine.boot {
                    return fail(format!(
                        "procStart boot id {boot:?} is not this boot's {:?}",
                        mine.boot
                    ));
                }
                if Some(ticks.to_string()) != live.map(|t| t.to_string()) {
                    return fail(format!(
                        "procStart start ticks {ticks:?} are not pid {}'s {live:?}",
                        rec.pid
                    ));
                }
            }
            other => {
                return fail(format!(
                    "procStart {other:?} is neither \"<boot id>:<ticks>\" nor null"
                ));
            }
        }
        let Some(ipc) = rec.ipc_path.clone() else {
            return fail("the record has no ipcPath: the session is not addressable".into());
        };
        if let Err(e) = dialable(&ipc, env.soon()).await {
            return fail(format!("ipcPath {ipc} does not answer a dial: {e}"));
        }
        pass(format!(
            "{fname}: mode {:04o} in a {:04o} directory, schema v{}, fresh (pid {} alive, same boot and PID namespace), ipcPath dialable{}",
            env.lim.reg_file_mode,
            env.lim.reg_dir_mode,
            env.schema_v,
            rec.pid,
            if rec.token.is_some() {
                ", ipcToken set"
            } else {
                ", no ipcToken"
            }
        ))
    }

    pub(super) async fn sender_symlink(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let env = env(cx)?;
        let registry = env.registry();
        make_dir(&registry, env.lim.reg_dir_mode)?;
        let victim = env.dir.join("victim.json");
        let l = launch(cx, &env, 1)?;
        // Planted before the interpreter or runtime has even started.
        let link = registry.join(format!("{}.json", l.pid));
        std::os::unix::fs::symlink(&victim, &link)
            .map_err(|e| Failure::new(format!("cannot plant the symlink: {e}")))?;
        let until = env.soon();
        let mut published = None;
        let mut exited = None;
        while Instant::now() < until {
            let mut torn = Vec::new();
            if let Ok(r) =
                await_record(&env, &registry, TARGET_NAME, Instant::now(), &mut torn).await
            {
                published = Some(r);
                break;
            }
            if let Some(Some(code)) = cx.child_exit(Duration::ZERO).await {
                exited = Some(code);
                break;
            }
            tokio::time::sleep(POLL * 4).await;
        }
        if std::fs::symlink_metadata(&victim).is_ok() {
            let data = std::fs::read(&victim).unwrap_or_default();
            return Err(Failure::new(format!(
                "the record was written through the symlink {} into {}",
                link.display(),
                victim.display()
            ))
            .with("what the symlink's target received", &data));
        }
        let link_now = match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => "left the symlink alone",
            Ok(_) => "replaced the symlink itself (rename), not what it points to",
            Err(_) => "removed the symlink",
        };
        match (published, exited) {
            (Some(r), _) if r.pid != u64::from(l.pid) => skip(format!(
                "the target registered as pid {} but the suite launched pid {} (a wrapper?): the symlink could not be planted at its record path",
                r.pid, l.pid
            )),
            (Some(r), _) => pass(format!(
                "nothing written through the symlink; the target {link_now} and published {}",
                r.fname()
            )),
            (None, Some(code)) => pass(format!(
                "nothing written through the symlink; the target refused and exited with {code}"
            )),
            (None, None) => pass(format!(
                "nothing written through the symlink within {:?}; the target {link_now} and published no record",
                env.wait
            )),
        }
    }

    pub(super) async fn sender_removed(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let env = env(cx)?;
        let rec = published(cx, &env, &mut Vec::new()).await?;
        let code = cx.terminate_last(env.wait).await;
        // The owner deletes its record on the way out; give a slow filesystem a moment.
        let until = Instant::now() + Duration::from_millis(500);
        while rec.file.exists() && Instant::now() < until {
            tokio::time::sleep(POLL * 4).await;
        }
        if rec.file.exists() {
            let data = std::fs::read(&rec.file).unwrap_or_default();
            return Err(Failure::new(format!(
                "{} is still there after the target exited ({}) on SIGTERM",
                rec.fname(),
                code.map(|c| c.to_string())
                    .unwrap_or_else(|| "exit unknown".into())
            ))
            .with("the record left behind", &data));
        }
        pass(format!(
            "{} removed when the target exited ({}) on SIGTERM",
            rec.fname(),
            code.map(|c| c.to_string())
                .unwrap_or_else(|| "exit unknown".into())
        ))
    }

    pub(super) async fn sender_socket(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let t = open_tx(cx).await?;
        let ipc = t.ipc();
        let p = Path::new(&ipc);
        let md = std::fs::symlink_metadata(p)
            .map_err(|e| Failure::new(format!("cannot stat ipcPath {ipc}: {e}")))?;
        if !md.file_type().is_socket() {
            return Err(Failure::new(format!("ipcPath {ipc} is not a socket")));
        }
        let m = md.permissions().mode() & 0o777;
        if m != t.env.lim.sock_file_mode {
            return Err(Failure::new(format!(
                "the inbox socket {ipc} has mode {m:04o}, not {:04o}",
                t.env.lim.sock_file_mode
            )));
        }
        let dir = p.parent().unwrap_or(Path::new("/"));
        let dm = mode_of(dir).unwrap_or(0);
        if dm != t.env.lim.sock_dir_mode {
            return Err(Failure::new(format!(
                "the socket directory {} has mode {dm:04o}, not {:04o}",
                dir.display(),
                t.env.lim.sock_dir_mode
            )));
        }
        pass(format!(
            "{ipc}: socket mode {m:04o} in a {dm:04o} directory, dialable"
        ))
    }

    pub(super) async fn sender_one_way(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut t = open_tx(cx).await?;
        let (id, d) = t.send(0, None).await?;
        if !d.back.is_empty() {
            return Err(Failure::new(format!(
                "the target wrote {} bytes back on the inbound connection (the listener never writes)",
                d.back.len()
            ))
            .with("bytes written back", &d.back));
        }
        if !d.closed() {
            return Err(Failure::new(format!(
                "the target did not close the inbound connection within {:?} after the suite half-closed",
                t.env.wait
            )));
        }
        let missing = t.wait_ids(std::slice::from_ref(&id), 1, t.env.soon()).await;
        if !missing.is_empty() {
            return t.skip_no_status();
        }
        let token = t.inbox.token.clone();
        let Some(s) = t.first(&id) else {
            return t.skip_no_status();
        };
        if let Some(first) = &s.first {
            return Err(Failure::new(
                "the status connection to `from` does not start with an auth line (the frame's replyToken)",
            )
            .with("its first line", first));
        }
        if s.auth.as_deref() != Some(token.as_str()) {
            return Err(Failure::new(
                "the status connection's auth line does not carry the frame's replyToken",
            )
            .with("the delivery_status", &s.raw));
        }
        if let Err(why) = &s.valid {
            return Err(Failure::new(format!(
                "the delivery_status is not valid per the contract: {why}"
            ))
            .with("the delivery_status", &s.raw));
        }
        pass(format!(
            "nothing written back ({}); status {:?} came on a new connection to `from`, after an auth line with the replyToken",
            dial_text(&d),
            s.status
        ))
    }

    pub(super) async fn sender_auth(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut t = open_tx(cx).await?;
        let Some(good) = t.rec.token.clone() else {
            return skip(
                "the target's record has no ipcToken: its inbox takes frames without an auth line (§3)",
            );
        };
        let Some((_, ctl)) = t.control().await? else {
            return t.skip_no_status();
        };
        let wrong = {
            let mut w = hex(good.len().max(t.env.lim.token_hex));
            if w == good {
                w = w.chars().rev().collect();
            }
            w
        };
        let msg_v = t.env.msg_v.clone();
        let newer = msg_v.as_u64().map(|v| v + 1).unwrap_or(2);
        let probes: Vec<(&str, Vec<Vec<u8>>)> = vec![
            ("no auth line (the user frame first)", vec![]),
            ("an auth line with a wrong token", vec![t.env.auth(&wrong)?]),
            (
                "a garbage first line",
                vec![b"conformance: not an auth line\n".to_vec()],
            ),
            (
                "an auth line of a newer msgV (X-25)",
                vec![Env::raw(
                    &json!({"msgV": newer, "type": "auth", "token": good}),
                )],
            ),
        ];
        let mut ids = Vec::new();
        for (what, prefix) in probes {
            let (id, v) = t.frame(0, None);
            let mut payload: Vec<u8> = prefix.concat();
            payload.extend(t.env.line(&v)?);
            // No half-close: a listener that drops the connection closes it by itself.
            let d = dial(&t.ipc(), &payload, false, t.env.wait)
                .await
                .map_err(Failure::new)?;
            if !d.back.is_empty() {
                return Err(Failure::new(format!(
                    "{what}: the target answered on the connection instead of dropping it silently"
                ))
                .with("what the suite wrote", &payload)
                .with("what came back", &d.back));
            }
            if !d.closed() {
                return Err(Failure::new(format!(
                    "{what}: the connection was not dropped within {:?}",
                    t.env.wait
                ))
                .with("what the suite wrote", &payload));
            }
            ids.push((id, what));
        }
        t.fenced_none(&ids).await?;
        pass(format!(
            "the right token got a status (control {ctl}); {} bad first lines each dropped silently with no status",
            ids.len()
        ))
    }

    pub(super) async fn sender_transitions(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut t = open_tx(cx).await?;
        let (text, id) = {
            let text = format!("conformance transitions {}", hex(8));
            let (id, _) = t.send(0, Some(&text)).await?;
            (text, id)
        };
        let missing = t.wait_ids(std::slice::from_ref(&id), 1, t.env.soon()).await;
        if !missing.is_empty() {
            return t.skip_no_status();
        }
        // Let a quick follow-up (held → delivered) arrive before the resend.
        t.linger(STATUS_GRACE).await;
        let before = t.got.get(&id).map(Vec::len).unwrap_or(0);
        // The resend: same msgId, same body (not a duplicate, X-5); its verdict is replayed.
        let line = {
            let (_, mut v) = t.frame(0, Some(&text));
            v["msgId"] = json!(id);
            t.env.line(&v)?
        };
        t.send_lines(&[line]).await?;
        let missing = t
            .wait_ids(std::slice::from_ref(&id), before + 1, t.env.soon())
            .await;
        t.linger(STATUS_GRACE).await;
        let all = t
            .got
            .get(&id)
            .map(|v| v.iter().collect::<Vec<_>>())
            .unwrap_or_default();
        let sm = &t.env.sm;
        let mut cur = sm.machine.initial.clone();
        let mut path = Vec::new();
        for (i, s) in all.iter().enumerate() {
            if let Err(why) = &s.valid {
                return Err(Failure::new(format!(
                    "a delivery_status is not valid per the contract: {why}"
                ))
                .with("the delivery_status", &s.raw));
            }
            if !sm.known.contains(&s.status) || s.status == sm.machine.initial {
                return Err(Failure::new(format!(
                    "status {:?} is not a status a recipient sends (table deliveryStatus, {} never travels)",
                    s.status, sm.machine.initial
                ))
                .with("the delivery_status", &s.raw));
            }
            if sm.allowed(&cur, &s.status) {
                cur = s.status.clone();
            } else if i >= before && s.status == cur {
                // The replayed verdict of the resend: a repeat, as the seed expects.
            } else {
                return Err(Failure::new(format!(
                    "status {:?} after {:?} is not a deliveryStatus transition (statuses so far: {})",
                    s.status,
                    cur,
                    path.join(" → ")
                ))
                .with("the delivery_status", &s.raw));
            }
            path.push(s.status.clone());
        }
        if !missing.is_empty() {
            return Err(Failure::new(format!(
                "the resent msgId {id} (already decided: {cur}) got no replayed verdict within {:?} (§6 step 2)",
                t.env.wait
            )));
        }
        let replay = all
            .get(before)
            .map(|s| s.status.clone())
            .unwrap_or_default();
        pass(format!(
            "statuses {}: table transitions from {}; the resend's verdict {replay:?} repeated",
            path.join(" → "),
            sm.machine.initial
        ))
    }

    pub(super) async fn sender_misaddressed(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut t = open_tx(cx).await?;
        let misaddressed = state(&t.env.sm, "misaddressed")?;
        let Some((_, ctl)) = t.control().await? else {
            return t.skip_no_status();
        };
        let (other_id, mut v) = t.frame(0, None);
        v["toSessionId"] = json!(uuid());
        let l = t.env.line(&v)?;
        t.send_lines(&[l]).await?;
        let (bare_id, mut v) = t.frame(0, None);
        if let Some(o) = v.as_object_mut() {
            o.remove("toSessionId");
        }
        let l = t.env.line(&v)?;
        t.send_lines(&[l]).await?;
        let missing = t
            .wait_ids(&[other_id.clone(), bare_id.clone()], 1, t.env.soon())
            .await;
        let multi = t.rec.fname().contains('-');
        let got = |id: &str| t.first(id).map(|s| (s.status.clone(), s.raw.clone()));
        match got(&other_id) {
            None => {
                return Err(Failure::new(format!(
                    "a frame whose toSessionId names no session here got no status within {:?} (expected {misaddressed})",
                    t.env.wait
                )));
            }
            Some((s, raw)) if s != misaddressed => {
                return Err(Failure::new(format!(
                    "a frame whose toSessionId names no session here got {s:?}, not {misaddressed:?} (X-16)"
                ))
                .with("the delivery_status", &raw));
            }
            Some(_) => {}
        }
        let want_bare = if multi {
            "misaddressed"
        } else {
            "processed (any status but misaddressed)"
        };
        match got(&bare_id) {
            None if !missing.is_empty() => Err(Failure::new(format!(
                "a frame without toSessionId got no status within {:?} (expected {want_bare})",
                t.env.wait
            ))),
            Some((s, raw)) if multi && s != misaddressed => Err(Failure::new(format!(
                "a frame without toSessionId at a multi-session inbox ({}) got {s:?}, not {misaddressed:?} (§1 L41)",
                t.rec.fname()
            ))
            .with("the delivery_status", &raw)),
            Some((s, raw)) if !multi && s == misaddressed => Err(Failure::new(format!(
                "a frame without toSessionId at a single-session inbox ({}) got {s:?}; it means that session (X-16)",
                t.rec.fname()
            ))
            .with("the delivery_status", &raw)),
            _ => pass(format!(
                "foreign toSessionId → {misaddressed}; no toSessionId → {} (control: {ctl})",
                got(&bare_id).map(|x| x.0).unwrap_or_default()
            )),
        }
    }

    // ---------------------------------------------------------------- playing the recipient

    /// A user frame the target wrote, with the connection it came on.
    struct Frame {
        value: Value,
        raw: Bytes,
        valid: Result<(), String>,
        /// Whether the connection's first line was an auth line with the suite's token.
        authed: bool,
    }

    /// The suite playing the recipient against a launched sender.
    struct Rx {
        env: Env,
        inbox: Inbox,
        /// Sockets named by records a reader must not use.
        decoys: Option<Inbox>,
        session_id: String,
        summary: PathBuf,
        launched: Launched,
        conns: Vec<InConn>,
        frames: Vec<Frame>,
    }

    struct RxSetup {
        /// File name of the suite's record (default `<pid>.json`).
        fname: Option<String>,
        /// Write procStart as null.
        null_start: bool,
        count: u64,
    }

    impl Default for RxSetup {
        fn default() -> Self {
            RxSetup {
                fname: None,
                null_start: false,
                count: 1,
            }
        }
    }

    fn suite_record(
        env: &Env,
        mine: &Me,
        inbox: &Inbox,
        session_id: &str,
        null_start: bool,
    ) -> Value {
        json!({
            "schemaVersion": env.schema_v,
            "pid": mine.pid,
            "procStart": if null_start { Value::Null } else { json!(format!("{}:{}", mine.boot, mine.ticks)) },
            "pidNs": mine.ns,
            "sessionId": session_id,
            "cwd": env.dir.display().to_string(),
            "name": SUITE_NAME,
            "startedAt": now_ms(),
            "kind": "external",
            "ipcPath": inbox.path(),
            "ipcToken": inbox.token,
        })
    }

    /// Adds records to the registry before the launch; returns the sockets they name, which
    /// the suite binds so that a reader that uses one is caught.
    type Extra<'a> = dyn Fn(&Env, &Path, &Me) -> Result<Vec<PathBuf>, Failure> + Sync + 'a;

    /// Bind the suite's inbox, create the registry, let `extra` add records, publish the
    /// suite's record and launch the sender.
    async fn open_rx(cx: &mut Ctx, setup: RxSetup, extra: &Extra<'_>) -> Result<Rx, Failure> {
        let env = env(cx)?;
        let inbox = Inbox::bind(&env, vec![env.dir.join("suite.sock")])?;
        let registry = env.registry();
        make_dir(&registry, env.lim.reg_dir_mode)?;
        let mine = me()?;
        let session_id = uuid();
        let decoy_paths = extra(&env, &registry, &mine)?;
        // Bound before the launch: a reader that picks a decoy must reach it to be caught.
        let decoys = if decoy_paths.is_empty() {
            None
        } else {
            Some(Inbox::bind(&env, decoy_paths)?)
        };
        let rec = suite_record(&env, &mine, &inbox, &session_id, setup.null_start);
        let fname = setup.fname.unwrap_or_else(|| format!("{}.json", mine.pid));
        write_record(&env, &registry, &fname, &rec)?;
        let launched = launch(cx, &env, setup.count)?;
        Ok(Rx {
            summary: env.summary(),
            env,
            inbox,
            decoys,
            session_id,
            launched,
            conns: Vec::new(),
            frames: Vec::new(),
        })
    }

    impl Rx {
        fn absorb(&mut self, c: &InConn) {
            let mut authed = false;
            for (i, l) in c.lines.iter().enumerate() {
                let decoded = self.env.decode(&self.env.other, l);
                let v: Option<Value> = serde_json::from_slice(l).ok();
                let method = decoded.as_deref().ok().unwrap_or("");
                if i == 0 && method == "auth" {
                    authed = v
                        .as_ref()
                        .and_then(|v| v.get("token"))
                        .and_then(Value::as_str)
                        == Some(self.inbox.token.as_str());
                    continue;
                }
                let Some(v) = v else { continue };
                if method == "user" || v.get("type").and_then(Value::as_str) == Some("user") {
                    self.frames.push(Frame {
                        value: v,
                        raw: l.clone(),
                        valid: decoded.map(|_| ()),
                        authed,
                    });
                }
            }
        }

        /// Take connections until `n` user frames are in or `until` passes; answers each new
        /// frame `delivered` when `answer` is set (a conforming recipient, so the sender settles).
        async fn collect(&mut self, n: usize, until: Instant, answer: bool) -> Result<(), Failure> {
            while self.frames.len() < n {
                let Some(c) = self.inbox.next(until).await else {
                    break;
                };
                let before = self.frames.len();
                self.absorb(&c);
                self.conns.push(c);
                if answer {
                    let delivered = state(&self.env.sm, "delivered")?;
                    for i in before..self.frames.len() {
                        let f = self.frames[i].value.clone();
                        let _ = self.status(&f, &delivered, None).await;
                    }
                }
            }
            Ok(())
        }

        /// Send a delivery_status for `frame` on a new connection to its `from`, after an auth
        /// line with its replyToken (X-28); `orig` overrides origMsgId.
        async fn status(
            &self,
            frame: &Value,
            status: &str,
            orig: Option<&str>,
        ) -> Result<Dialed, String> {
            let from = frame
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| "the frame has no `from`".to_string())?;
            let id = orig
                .map(str::to_string)
                .or_else(|| {
                    frame
                        .get("msgId")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_default();
            let mut v = json!({
                "msgV": self.env.msg_v,
                "msgId": uuid(),
                "type": "control",
                "action": "delivery_status",
                "status": status,
                "origMsgId": id,
                "from": self.inbox.path(),
                "reason": format!("conformance suite: {status}"),
            });
            if status == "dropped" {
                let reason =
                    code(self.env.contract(), "dropReason", "rate-limited").map_err(|f| f.why)?;
                v["dropReason"] = json!(reason);
            }
            let mut payload = Vec::new();
            if let Some(tok) = frame.get("replyToken").and_then(Value::as_str) {
                payload.extend(self.env.auth(tok).map_err(|f| f.why)?);
            }
            payload.extend(self.env.line(&v).map_err(|f| f.why)?);
            dial(from, &payload, true, self.env.wait).await
        }

        fn no_frame(&self) -> Failure {
            let mut f = Failure::new(format!(
                "no user frame reached the suite's inbox within {:?}",
                self.env.wait
            ));
            for c in self.conns.iter().take(3) {
                if let Some(l) = c.lines.first() {
                    f = f.with("a connection's first line", l);
                }
            }
            f
        }
    }

    pub(super) async fn recipient_auth(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut r = open_rx(cx, RxSetup::default(), &|_, _, _| Ok(Vec::new())).await?;
        let until = r.env.soon();
        let Some(c) = r.inbox.next(until).await else {
            return Err(r.no_frame());
        };
        r.absorb(&c);
        let first = c.lines.first().cloned().unwrap_or_default();
        let method = r.env.decode(&r.env.other, &first);
        let token = serde_json::from_slice::<Value>(&first)
            .ok()
            .and_then(|v| v.get("token").and_then(Value::as_str).map(str::to_string));
        let verdict = match (method.as_deref(), token.as_deref()) {
            (Ok("auth"), Some(tok)) if tok == r.inbox.token => Ok(()),
            (Ok("auth"), _) => Err(Failure::new(
                "the auth line does not carry the ipcToken of the suite's registry record",
            )
            .with("the first line", &first)),
            // Whether the first line is the auth line at all is the inboxConnection
            // machine's rule, judged by the derived handshake (one rule, one failing check).
            (Ok(m), _) => {
                return skip(format!(
                    "the first line is {m}, not an auth line: xsession.derived.handshake reports it"
                ));
            }
            (Err(why), _) => {
                return skip(format!(
                    "the first line is no valid message ({why}): xsession.derived.handshake reports it"
                ));
            }
        };
        // Answer like a conforming recipient would, so the sender can settle.
        if let Some(f) = r.frames.first() {
            let v = f.value.clone();
            let delivered = state(&r.env.sm, "delivered")?;
            let _ = r.status(&v, &delivered, None).await;
        }
        verdict?;
        pass(format!(
            "the first line of the target's connection is the auth line with the record's token ({} more line(s), {})",
            c.lines.len().saturating_sub(1),
            c.end.text()
        ))
    }

    pub(super) async fn recipient_user_frame(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut r = open_rx(
            cx,
            RxSetup {
                count: 2,
                ..RxSetup::default()
            },
            &|_, _, _| Ok(Vec::new()),
        )
        .await?;
        let want = if r.launched.has_count { 2 } else { 1 };
        r.collect(want, r.env.soon(), true).await?;
        if r.frames.is_empty() {
            return Err(r.no_frame());
        }
        let mut ids = HashSet::new();
        let mut notes = Vec::new();
        for f in &r.frames {
            if let Err(why) = &f.valid {
                return Err(Failure::new(format!(
                    "a user frame is not valid per the contract: {why}"
                ))
                .with("the frame", &f.raw));
            }
            let get = |k: &str| f.value.get(k).and_then(Value::as_str);
            let Some(id) = get("msgId") else {
                return Err(Failure::new("a user frame has no msgId").with("the frame", &f.raw));
            };
            if !ids.insert(id.to_string()) {
                return Err(
                    Failure::new(format!("msgId {id} is used twice")).with("the frame", &f.raw)
                );
            }
            if get("from").is_none() {
                return Err(Failure::new(
                    "the user frame has no `from`: without it the sender is blind to every status (§5 L113)",
                )
                .with("the frame", &f.raw));
            }
            if get("replyToken").is_none() {
                notes.push("no replyToken (statuses then come without an auth line)");
            }
            if get("toSessionId") != Some(r.session_id.as_str()) {
                return Err(Failure::new(format!(
                    "toSessionId is {:?}, not the sessionId of the suite's record {:?} (always send it, §1 L41)",
                    get("toSessionId"),
                    r.session_id
                ))
                .with("the frame", &f.raw));
            }
            if !f.authed {
                notes.push("no auth line before the frame (judged by xsession.3.auth)");
            }
        }
        for c in &r.conns {
            if matches!(c.end, End::Timeout) {
                let first = c.lines.first().cloned().unwrap_or_default();
                return Err(Failure::new(format!(
                    "the target did not half-close its connection within {:?} after writing (§2 L55)",
                    r.env.wait
                ))
                .with("the connection's first line", &first));
            }
            if c.lines.len() > 2 {
                notes.push("more than one frame on a connection (one is expected, X-27)");
            }
        }
        notes.dedup();
        pass(format!(
            "{} valid user frame(s) with distinct msgIds, from, toSessionId = the suite's sessionId; half-closed{}",
            r.frames.len(),
            if notes.is_empty() {
                String::new()
            } else {
                format!(" (note: {})", notes.join("; "))
            }
        ))
    }

    pub(super) async fn recipient_one_way(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut r = open_rx(cx, RxSetup::default(), &|_, _, _| Ok(Vec::new())).await?;
        r.collect(1, r.env.soon(), false).await?;
        let Some(f) = r.frames.first() else {
            return Err(r.no_frame());
        };
        let v = f.value.clone();
        let delivered = state(&r.env.sm, "delivered")?;
        let d = match r.status(&v, &delivered, None).await {
            Ok(d) => d,
            Err(e) => {
                return Err(Failure::new(format!(
                    "the suite could not deliver a status to the frame's `from`: {e}"
                ))
                .with("the frame", &f.raw));
            }
        };
        if !d.back.is_empty() {
            return Err(Failure::new(format!(
                "the target wrote {} bytes back on the status connection it accepted (the listener never writes)",
                d.back.len()
            ))
            .with("bytes written back", &d.back));
        }
        if !d.closed() {
            return Err(Failure::new(format!(
                "the target's inbox did not close the status connection within {:?} after the suite half-closed",
                r.env.wait
            )));
        }
        pass(format!(
            "a status on a new connection to `from` (auth line with the replyToken): nothing written back, {}",
            dial_text(&d)
        ))
    }

    pub(super) async fn recipient_transitions(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let mut r = open_rx(cx, RxSetup::default(), &|_, _, _| Ok(Vec::new())).await?;
        if !r.launched.has_summary {
            // Still a conforming recipient for the target's sake, then skip.
            r.collect(1, r.env.soon(), true).await?;
            return skip(
                "the sender's state is not on the wire: put {summary} in the target command (a JSON file with sent.<msgId>.state/history, written on exit) to judge it",
            );
        }
        r.collect(1, r.env.soon(), false).await?;
        let Some(f) = r.frames.first() else {
            return Err(r.no_frame());
        };
        let frame = f.value.clone();
        let id = frame
            .get("msgId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let sm = &r.env.sm;
        let held = state(sm, "held")?;
        let delivered = state(sm, "delivered")?;
        let refused = state(sm, "refused")?;
        let dropped = state(sm, "dropped")?;
        if !(sm.allowed(&sm.machine.initial, &held)
            && sm.allowed(&held, &delivered)
            && !sm.allowed(&held, &refused)
            && !sm.allowed(&held, &dropped)
            && !sm.allowed(&delivered, &held))
        {
            return Err(Failure::new(
                "suite bug: the deliveryStatus table is not the one this check was written for",
            ));
        }
        let initial = sm.machine.initial.clone();
        let unknown = format!("conformance-unknown-{}", hex(4));
        // held, then only repeats, non-table transitions, unknown statuses and noise, then delivered.
        let script: Vec<(String, Option<String>)> = vec![
            (held.clone(), None),
            (held.clone(), None),
            (refused.clone(), None),
            (dropped.clone(), None),
            (initial, None),
            (unknown, None),
            (refused.clone(), Some(uuid())),
            (delivered.clone(), None),
            (held.clone(), None),
        ];
        let mut lost = Vec::new();
        for (s, orig) in &script {
            if let Err(e) = r.status(&frame, s, orig.as_deref()).await {
                lost.push(format!("{s}: {e}"));
            }
        }
        let code = match cx.child_exit(r.env.wait).await {
            Some(Some(c)) => Some(c),
            _ => cx.terminate_last(r.env.wait).await,
        };
        let data = std::fs::read(&r.summary).map_err(|e| {
            Failure::new(format!(
                "the target (exit {code:?}) wrote no {{summary}} file {}: {e}",
                r.summary.display()
            ))
        })?;
        let v: Value = serde_json::from_slice(&data).map_err(|e| {
            Failure::new(format!("the summary is not JSON: {e}")).with("the summary", &data)
        })?;
        let Some(sent) = v.get("sent").and_then(|s| s.get(&id)) else {
            return Err(
                Failure::new(format!("the summary has no sent.{id}")).with("the summary", &data)
            );
        };
        let final_state = sent
            .get("state")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let history: Vec<&str> = sent
            .get("history")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let script_text: Vec<String> = script
            .iter()
            .map(|(s, o)| {
                if o.is_some() {
                    format!("{s}(other msgId)")
                } else {
                    s.clone()
                }
            })
            .collect();
        if final_state != delivered || history != [held.as_str(), delivered.as_str()] {
            return Err(Failure::new(format!(
                "after the statuses {} the sender's state is {final_state:?} with history {history:?}; the table allows only {held} → {delivered} (the rest are repeats, non-table transitions, unknown statuses and noise: ignored)",
                script_text.join(", ")
            ))
            .with("the sender's summary entry", sent.to_string().as_bytes()));
        }
        let lost = if lost.is_empty() {
            String::new()
        } else {
            format!(
                " ({} status(es) not delivered: {})",
                lost.len(),
                lost.join("; ")
            )
        };
        pass(format!(
            "statuses {} → state {final_state}, history {}{lost}",
            script_text.join(", "),
            history.join(" → ")
        ))
    }

    pub(super) async fn recipient_per_sender_rate(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let burst = lim(cx.wire.contract())?.per_sender.burst;
        let mut r = open_rx(
            cx,
            RxSetup {
                count: burst + 5,
                ..RxSetup::default()
            },
            &|_, _, _| Ok(Vec::new()),
        )
        .await?;
        if !r.launched.has_count {
            r.collect(1, r.env.soon(), true).await?;
            return skip(
                "the target sends one message: put {count} in the target command (how many messages to send) to judge its sending rate",
            );
        }
        let per = r.env.lim.per_sender.per;
        let want = burst as usize + 5;
        let until = r.env.soon();
        // Collect until all are in, the target stops (exits), or the deadline.
        while r.frames.len() < want && Instant::now() < until {
            let step = (Instant::now() + Duration::from_millis(500)).min(until);
            r.collect(r.frames.len() + 1, step, true).await?;
            if let Some(Some(_)) = cx.child_exit(Duration::ZERO).await {
                let tail = Instant::now() + Duration::from_millis(300);
                r.collect(want, tail, true).await?;
                break;
            }
        }
        if r.frames.is_empty() {
            return Err(r.no_frame());
        }
        let times: Vec<Instant> = r
            .conns
            .iter()
            .filter(|c| {
                c.lines.iter().any(|l| {
                    serde_json::from_slice::<Value>(l)
                        .ok()
                        .and_then(|v| v.get("type").cloned())
                        == Some(json!("user"))
                })
            })
            .map(|c| c.at)
            .collect();
        let t0 = times.first().copied().unwrap_or_else(Instant::now);
        for (i, at) in times.iter().enumerate() {
            let allowed = burst as f64 + at.duration_since(t0).as_secs_f64() / per + 1.0;
            if (i + 1) as f64 > allowed {
                return Err(Failure::new(format!(
                    "{} frames reached one inbox within {:.2?}: more than the per-sender bucket allows (burst {burst}, one per {per} s); a sender mirrors it and refuses before writing (§6 L125)",
                    i + 1,
                    at.duration_since(t0)
                )));
            }
        }
        pass(format!(
            "asked to send {want}: {} frames written within the bucket (burst {burst}, one per {per} s)",
            times.len()
        ))
    }

    /// Records named like the suite that a reader must not use (each with its own socket).
    pub(super) async fn recipient_freshness(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let dead = dead_pids(1).await?;
        let dead = dead.first().copied().unwrap_or(0);
        let boot_other = uuid();
        let extra = |env: &Env, reg: &Path, mine: &Me| -> Result<Vec<PathBuf>, Failure> {
            let sfx = hex(env.lim.suffix_hex);
            let mut socks = Vec::new();
            let good_start = format!("{}:{}", mine.boot, mine.ticks);
            let p = mine.pid;
            let decoys: Vec<(String, Value)> = vec![
                (
                    format!("0{p}.json"),
                    json!({"pid": p, "procStart": good_start}),
                ),
                (
                    format!("1{p}.json"),
                    json!({"pid": p, "procStart": good_start}),
                ),
                (
                    format!(
                        "{p}-{}.json",
                        sfx.to_uppercase()
                            .replace(|c: char| c.is_ascii_digit(), "A")
                    ),
                    json!({"pid": p, "procStart": good_start}),
                ),
                (
                    format!("{p}-{}.json", hex(env.lim.suffix_hex)),
                    json!({"pid": p, "procStart": good_start, "schemaVersion": 2}),
                ),
                (
                    format!("{p}-{}.json", hex(env.lim.suffix_hex)),
                    json!({"pid": p, "procStart": good_start, "pidNs": mine.ns + 1}),
                ),
                (
                    format!("{p}-{}.json", hex(env.lim.suffix_hex)),
                    json!({"pid": p, "procStart": format!("{boot_other}:{}", mine.ticks)}),
                ),
                (
                    format!("{p}-{}.json", hex(env.lim.suffix_hex)),
                    json!({"pid": p, "procStart": format!("{}:{}", mine.boot, mine.ticks + 1)}),
                ),
                (
                    format!("{dead}.json"),
                    json!({"pid": dead, "procStart": format!("{}:1", mine.boot)}),
                ),
            ];
            for (i, (fname, over)) in decoys.into_iter().enumerate() {
                let sock = env.dir.join(format!("d{i}.sock"));
                let mut rec = json!({
                    "schemaVersion": env.schema_v,
                    "pidNs": mine.ns,
                    "sessionId": uuid(),
                    "cwd": env.dir.display().to_string(),
                    "name": SUITE_NAME,
                    "startedAt": now_ms(),
                    "kind": "external",
                    "ipcPath": sock.display().to_string(),
                    "ipcToken": hex(env.lim.token_hex),
                });
                for (k, v) in over.as_object().into_iter().flatten() {
                    rec[k] = v.clone();
                }
                write_record(env, reg, &fname, &rec)?;
                socks.push(sock);
            }
            Ok(socks)
        };
        // The real record: the multi-session name and procStart null (both acceptable, §1).
        let mine = me()?;
        let sfx_real = hex(8);
        let mut r = open_rx(
            cx,
            RxSetup {
                fname: Some(format!("{}-{sfx_real}.json", mine.pid)),
                null_start: true,
                count: 1,
            },
            &extra,
        )
        .await?;
        r.collect(1, r.env.soon(), true).await?;
        let late = Instant::now() + STATUS_GRACE;
        let n_decoys = r.decoys.as_ref().map(|d| d.paths.len()).unwrap_or(0);
        let caught = match r.decoys.as_mut() {
            Some(d) => d.next(late).await,
            None => None,
        };
        if let Some(c) = caught {
            let first = c.lines.first().cloned().unwrap_or_default();
            return Err(Failure::new(format!(
                "the target dialed {}, the ipcPath of a record that is not fresh",
                c.path.display()
            ))
            .with("what it wrote there", &first));
        }
        if r.frames.is_empty() {
            return Err(Failure::new(format!(
                "no message reached the suite's inbox within {:?}: the target did not accept the fresh record {}-{sfx_real}.json (procStart null), or took a stale one for a second {SUITE_NAME:?} (an ambiguous address is an error, not a guess)",
                r.env.wait, mine.pid
            )));
        }
        pass(format!(
            "{} decoy records ignored (zero-padded and mismatched names, upper-case suffix, schemaVersion 2, other pidNs, other boot id, other start ticks, dead PID); <pid>-<8 hex>.json with procStart null used",
            n_decoys
        ))
    }

    pub(super) async fn recipient_cleanup(cx: &mut Ctx) -> Result<Verdict, Failure> {
        let dead = dead_pids(5).await?;
        let files = std::sync::Mutex::new(Vec::<(PathBuf, &'static str, bool)>::new());
        let extra = |env: &Env, reg: &Path, mine: &Me| -> Result<Vec<PathBuf>, Failure> {
            let kinds: [(&'static str, bool); 5] = [
                ("schemaVersion 2", false),
                ("another pidNs", false),
                ("another boot id", false),
                ("procStart null", false),
                ("a dead PID, same boot and namespace", true),
            ];
            for (i, ((what, stale), pid)) in kinds.iter().zip(&dead).enumerate() {
                let mut rec = json!({
                    "schemaVersion": env.schema_v,
                    "pid": pid,
                    "procStart": format!("{}:1", mine.boot),
                    "pidNs": mine.ns,
                    "sessionId": uuid(),
                    "name": format!("{BYSTANDER}-{i}"),
                    "kind": "external",
                    "ipcPath": env.dir.join(format!("b{i}.sock")).display().to_string(),
                });
                match i {
                    0 => rec["schemaVersion"] = json!(2),
                    1 => rec["pidNs"] = json!(mine.ns + 1),
                    2 => rec["procStart"] = json!(format!("{}:1", uuid())),
                    3 => rec["procStart"] = Value::Null,
                    _ => {}
                }
                let p = write_record(env, reg, &format!("{pid}.json"), &rec)?;
                if let Ok(mut f) = files.lock() {
                    f.push((p, *what, *stale));
                }
            }
            Ok(Vec::new())
        };
        let mut r = open_rx(cx, RxSetup::default(), &extra).await?;
        r.collect(1, r.env.soon(), true).await?;
        if r.frames.is_empty() {
            return Err(r.no_frame());
        }
        let files = files.lock().map(|f| f.clone()).unwrap_or_default();
        // The listing that found the suite also judged these; a lazy cleaner gets the deadline.
        let until = r.env.soon();
        while files.iter().any(|(p, _, stale)| *stale && p.exists()) && Instant::now() < until {
            tokio::time::sleep(POLL * 20).await;
        }
        for (p, what, stale) in &files {
            let name = p
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if *stale && p.exists() {
                return Err(Failure::new(format!(
                    "{name} ({what}) is still there {:?} after the target listed the registry: procStart proves its owner gone, so the next listing session cleans it up (§1 L33)",
                    r.env.wait
                )));
            }
            if !*stale && !p.exists() {
                return Err(Failure::new(format!(
                    "{name} ({what}) was deleted: only a record whose procStart proves its owner gone may be (X-22, §7)"
                )));
            }
        }
        pass(format!(
            "the dead PID's record was cleaned up; schemaVersion 2, other pidNs, other boot id and procStart null records ({} files) left alone",
            files.len() - 1
        ))
    }
}
