//! `contract-proxy conformance`: play one party of a contract against a real
//! implementation of the other party and run every check derivable from the seed.
//!
//! The framework is contract-agnostic: a [`Check`] has an id (`kernel.15.3a`),
//! a title, the seed section it comes from and a body that plays the role over
//! the real wire through a [`Peer`] (frames encoded and decoded with the
//! contract's own codecs, every message validated with [`contract::wire::Wire`],
//! every wait bounded). A body ends in pass or skip, or in a [`Failure`] that
//! carries the exact bytes that showed it. Each check gets a fresh session (a
//! fresh process when the target is launched), opened by [`Ctx::open`] from the
//! target the command line names (see [`session`] and docs/conformance.md).
//!
//! The checks themselves live per contract: [`kernel`], [`rukh`], [`toolchannel`] and
//! [`xsession`]; [`derived`] is the suite any contract with a JSON-RPC or envelope channel gets
//! from its data.
//! [`handoff`] is what the suite launches in place of a party the implementation
//! launches itself (`contract-proxy handoff`).

// Unsafe only in small, commented OS calls (`handoff`: taking ownership of passed fds).
#![deny(unsafe_code)]

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contract::wire::Wire;
use serde_json::Value;

/// `fn name(cx) -> BodyFuture` for each `name => function` (the function takes `cx`), or,
/// after `cx;`, for each `name => expression using cx`: a check's [`Body`] is a plain fn.
macro_rules! bodies {
    ($cx:ident; $($name:ident => $e:expr),* $(,)?) => {
        $(fn $name($cx: &mut $crate::Ctx) -> $crate::BodyFuture<'_> {
            Box::pin($e)
        })*
    };
    ($($name:ident => $f:path),* $(,)?) => {
        $(fn $name(cx: &mut $crate::Ctx) -> $crate::BodyFuture<'_> {
            Box::pin($f(cx))
        })*
    };
}

pub mod derived;
pub mod door;
pub mod handoff;
pub mod judge;
pub mod kernel;
pub mod report;
pub mod rukh;
pub mod session;
pub mod toolchannel;
pub mod xsession;

pub use report::{CheckResult, Evidence, Failure, Outcome, Report, Verdict};
pub use session::{Ctx, EndHook, Got, Incoming, Opener, Peer, SocketKind, Spawned, Stdout, Target};

/// A boxed check body: plays the role on the context's sessions.
pub type BodyFuture<'a> = BodyFutureOf<'a, Verdict>;

/// A boxed step of a check that yields a `T` or the failure it met.
pub type BodyFutureOf<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Failure>> + Send + 'a>>;

/// A check's body.
pub type Body = for<'a> fn(&'a mut Ctx) -> BodyFuture<'a>;

/// One check of a suite, for one role.
#[derive(Clone)]
pub struct Check {
    /// Stable id, `<contract>.<seed section>.<item>` (e.g. `kernel.15.5`).
    pub id: Cow<'static, str>,
    /// What it checks, in one line.
    pub title: Cow<'static, str>,
    /// The seed section (and contract notes) it comes from.
    pub seed: Cow<'static, str>,
    /// The body, or why the check does not apply to the role played.
    pub body: Result<Body, &'static str>,
    /// What a check derived from the contract is about (a method name), handed to its body
    /// as [`Ctx::subject`]: one body serves every method.
    pub subject: Option<String>,
    /// The check may run on the session the check before it kept ([`Ctx::kept`]) rather
    /// than on a fresh one: a fresh session is not its point.
    pub shares: bool,
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check")
            .field("id", &self.id)
            .field("applies", &self.body.is_ok())
            .finish()
    }
}

/// One row of a suite's table: id, title, seed section, then the body (or why the check
/// does not apply) for the first and for the second role the suite plays.
pub type Row = (
    &'static str,
    &'static str,
    &'static str,
    Result<Body, &'static str>,
    Result<Body, &'static str>,
);

/// The checks of `rows`, in order, for `role`: the first or the second of the suite's
/// `roles` (the rows' body columns follow them); `None` for another role.
pub fn table(role: &str, roles: [&str; 2], rows: Vec<Row>) -> Option<Vec<Check>> {
    let first = match role {
        r if r == roles[0] => true,
        r if r == roles[1] => false,
        _ => return None,
    };
    Some(
        rows.into_iter()
            .map(|(id, title, seed, a, b)| Check {
                id: id.into(),
                title: title.into(),
                seed: seed.into(),
                body: if first { a } else { b },
                subject: None,
                shares: false,
            })
            .collect(),
    )
}

/// A check body's pass with what it saw.
pub(crate) fn pass(s: impl Into<String>) -> Result<Verdict, Failure> {
    Ok(Verdict::Pass(s.into()))
}

/// A check body's skip with why it could not judge.
/// The party the implementation plays when the suite plays `role`: the contract's first
/// other party.
pub(crate) fn other_party<'c>(c: &'c contract::Contract, role: &str) -> Option<&'c str> {
    c.parties.keys().map(String::as_str).find(|p| *p != role)
}

pub(crate) fn skip(s: impl Into<String>) -> Result<Verdict, Failure> {
    Ok(Verdict::Skip(s.into()))
}

/// The string at a JSON pointer.
pub(crate) fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// Seconds since the epoch with millisecond precision (the kernel envelope's `timestamp`).
pub(crate) fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as f64 / 1000.0)
        .unwrap_or(0.0)
}

/// The integer wire code of the catalog error `name` (the JSON-RPC contracts' codes).
pub(crate) fn int_error(c: &contract::Contract, name: &str) -> Result<i64, Failure> {
    let code = c.error_code(name)?;
    code.as_i64()
        .ok_or_else(|| Failure::new(format!("error {name} has the non-integer code {code}")))
}

/// The duration scale of this run, from [`contract::TIME_SCALE_ENV`] (1 when unset).
pub(crate) fn time_scale() -> Result<f64, ConformanceError> {
    contract::env_time_scale().map_err(ConformanceError::Usage)
}

/// `contract-proxy conformance` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ConformanceArgs {
    /// Contract: a built-in name (kernel) or a path to a contract file.
    #[arg(long)]
    pub contract: String,
    /// The party the suite plays (kernel: shell or core); the target is the other party.
    #[arg(long, value_name = "ROLE")]
    pub play: String,
    /// The implementation under test. exec:CMD with {control}/{data} placeholders: launched
    /// afresh per check and given the endpoints to use; exec:CMD or exec-fd:N:CMD without
    /// placeholders: the control channel is its stdio or fd N; unix:, tcp:, ws://, quic://: dialed
    /// when the suite plays the connecting party, else listened on (the implementation dials in).
    /// exec:CMD with other {name} placeholders is launched by the contract's suite itself
    /// (toolchannel: {url}, {listen}, {port}, {token}, {session}). Required, except with --list.
    #[arg(long, value_name = "ENDPOINT", default_value = "")]
    pub target: String,
    /// Endpoint of the contract's second channel (kernel: data), dialed or listened on like --target.
    #[arg(long, value_name = "ENDPOINT")]
    pub target_data: Option<String>,
    /// Write a JUnit XML report here (one testsuite per contract and role, one testcase per check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Run only these checks (ids as listed by --list); repeatable or comma-separated.
    #[arg(long, value_name = "CHECK_ID", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Length of the long-task check's task (the seed's stub runs 60 s).
    #[arg(long, value_name = "N", default_value_t = 60)]
    pub task_seconds: u64,
    /// Seconds any single wait may take (a reply, a connection, a frame).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub deadline: f64,
    /// Seconds one whole check may take (default: 60 + 2 × --task-seconds).
    #[arg(long, value_name = "SECS")]
    pub check_deadline: Option<f64>,
    /// Socket kind for the endpoints handed to a launched target.
    #[arg(long, value_enum, default_value = "unix")]
    pub sockets: SocketKind,
    /// Count skipped checks as failures.
    #[arg(long)]
    pub strict: bool,
    /// List the checks for the contract and role, then exit.
    #[arg(long)]
    pub list: bool,
    /// Run only the checks derived from the contract's data (docs/conformance.md): a
    /// built-in contract's hand-written checks are left out (the kernel's and toolchannel's
    /// default suites are hand-written only).
    #[arg(long)]
    pub derived: bool,
    /// A value the contract's suite needs for a target it does not launch (toolchannel:
    /// `token=…` and `session=…` of a host it dials or a worker that dials it); repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    pub param: Vec<String>,
    /// SHA-256 fingerprint the certificate of a dialed wss://, quic:// or tls:// target must have.
    #[arg(long, value_name = "SHA256")]
    pub pin: Option<String>,
    /// CA bundle (PEM) to verify a dialed wss://, quic:// or tls:// target with.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Certificate (PEM) the suite presents when the target dials a TLS endpoint it listens
    /// on (default: self-signed, its fingerprint printed).
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
}

/// Why the suite could not run (checks that fail are in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// Bad usage: unknown contract, role or check id, bad endpoint, bad number.
    #[error("{0}")]
    Usage(String),
    /// Something outside the checks broke (the JUnit file could not be written).
    #[error("{0}")]
    Failed(String),
}

/// Options every check sees.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Longest single wait.
    pub deadline: Duration,
    /// Longest whole check.
    pub check_deadline: Duration,
    /// Long-task length.
    pub task_seconds: u64,
    /// `--param KEY=VALUE` pairs, in order.
    pub params: Vec<(String, String)>,
    /// What the contract's durations are multiplied by ([`contract::TIME_SCALE_ENV`],
    /// which a launched implementation inherits and must honour too).
    pub time_scale: f64,
    /// TLS for wss://, quic:// and tls:// targets.
    pub tls: contract_transport::endpoint::tls::TlsOpts,
}

impl Opts {
    /// The last `--param` value given for `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A contract's suite for one role: its checks in order, and the hooks that reach the
/// implementation where the contract's data cannot say how.
pub struct Suite {
    /// The checks, in the order they run.
    pub checks: Vec<Check>,
    /// The hand-written suite's hooks, if it has any.
    pub hooks: Hooks,
}

/// A hand-written suite's ways to reach a template target for the derived checks.
#[derive(Clone, Copy, Default)]
pub struct Hooks {
    /// Opens a session ([`Ctx::opener`]).
    pub opener: Option<Opener>,
    /// Reaches a session's upgrade, unanswered ([`Ctx::door`]).
    pub door: Option<door::DoorHook>,
}

/// A built-in contract's hand-written checks: what the data cannot speak.
struct HandWritten {
    /// The parties the suite plays, in the order of its rows' body columns.
    roles: [&'static str; 2],
    checks: fn(&str) -> Option<Vec<Check>>,
    /// Reach a template target for the derived checks.
    hooks: Hooks,
    /// Whether the derived checks run before the hand-written ones (the derived suite can
    /// reach the implementation the way the hand-written one does).
    derived: bool,
}

fn hand_written(name: &str) -> Option<HandWritten> {
    let opener = |opener| Hooks { opener, door: None };
    let (roles, checks, hooks, derived): (_, fn(&str) -> _, _, _) = match name {
        "kernel" => (["shell", "core"], kernel::checks, Hooks::default(), true),
        "rukh" => (
            ["core", "extension"],
            rukh::checks,
            opener(rukh::OPENER),
            true,
        ),
        "toolchannel" => (
            ["host", "worker"],
            toolchannel::checks,
            toolchannel::HOOKS,
            true,
        ),
        "xsession" => (
            ["sender", "recipient"],
            xsession::checks,
            opener(xsession::OPENER),
            true,
        ),
        _ => return None,
    };
    Some(HandWritten {
        roles,
        checks,
        hooks,
        derived,
    })
}

/// The suite for `contract` played as `role`, in order: the checks [`derived`] from the
/// contract's data, then a built-in contract's hand-written checks (none when
/// `derived_only`, the `--derived` run; its hooks stay).
pub fn suite(
    contract: &contract::Contract,
    role: &str,
    derived_only: bool,
) -> Result<Suite, ConformanceError> {
    let derived = || derived::checks(contract, role).map_err(ConformanceError::Usage);
    let own = hand_written(&contract.name);
    let hooks = own.as_ref().map(|o| o.hooks).unwrap_or_default();
    let own = match own {
        Some(own) if !derived_only => own,
        _ => {
            return Ok(Suite {
                checks: derived()?,
                hooks,
            });
        }
    };
    let hand = (own.checks)(role).ok_or_else(|| {
        ConformanceError::Usage(format!(
            "--play {role:?}: the {} suite plays {} or {}",
            contract.name, own.roles[0], own.roles[1]
        ))
    })?;
    let mut checks = match own.derived {
        true => derived()?,
        false => Vec::new(),
    };
    checks.extend(hand);
    Ok(Suite {
        checks,
        hooks: own.hooks,
    })
}

/// Run one check's body on `cx`. The context comes back when the check passed and kept
/// its session for the next check; otherwise its target is ended here.
async fn run_body(body: Body, mut cx: Ctx, limit: Duration) -> (Outcome, Option<Ctx>) {
    cx.notes.clear();
    let ran = tokio::time::timeout(limit, body(&mut cx)).await;
    if cx.kept.is_some()
        && let Ok(Ok(Verdict::Pass(d))) = ran
    {
        return (Outcome::Pass(d), Some(cx));
    }
    cx.kept = None;
    cx.finish().await;
    let mut outcome = match ran {
        Ok(Ok(Verdict::Pass(d))) => Outcome::Pass(d),
        Ok(Ok(Verdict::Skip(d))) => Outcome::Skip(d),
        Ok(Err(Failure {
            why,
            reported_by: Some(by),
            ..
        })) => Outcome::Skip(format!("{by} reports this: {why}")),
        Ok(Err(f)) => Outcome::Fail(f),
        Err(_) => Outcome::Fail(Failure::new(format!(
            "the check did not finish within {limit:?} (--check-deadline)"
        ))),
    };
    if let Outcome::Fail(f) = &mut outcome {
        f.notes.append(&mut cx.notes);
    }
    (outcome, None)
}

/// One line on stdout; a reader that went away (`| head`) is not an error of the suite.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

fn positive(secs: f64, what: &str) -> Result<Duration, ConformanceError> {
    if secs.is_finite() && secs > 0.0 && secs < 86_400.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(ConformanceError::Usage(format!(
            "{what} must be a positive number of seconds"
        )))
    }
}

/// Run the suite the arguments name and return its report (printed as it goes).
pub async fn run(args: ConformanceArgs) -> Result<Report, ConformanceError> {
    let contract = contract::resolve(&args.contract)
        .map_err(|e| ConformanceError::Usage(format!("--contract: {e}")))?;
    let name = contract.name.clone();
    let Suite { checks, hooks } = suite(&contract, &args.play, args.derived)?;
    for id in &args.only {
        if !checks.iter().any(|c| c.id == id.as_str()) {
            return Err(ConformanceError::Usage(format!(
                "--only {id:?}: no such check (see --list)"
            )));
        }
    }
    let checks: Vec<Check> = checks
        .into_iter()
        .filter(|c| args.only.is_empty() || args.only.iter().any(|o| *o == c.id))
        .collect();
    if args.list {
        for c in &checks {
            let applies = match c.body {
                Ok(_) => String::new(),
                Err(why) => format!("  (not applicable: {why})"),
            };
            say(format_args!("{}  {}  [{}]{applies}", c.id, c.title, c.seed));
        }
        return Ok(Report::new(&name, &args.play, &args.target));
    }
    if args.target.is_empty() {
        return Err(ConformanceError::Usage(
            "--target ENDPOINT is required (the implementation under test)".into(),
        ));
    }
    if args.task_seconds == 0 || args.task_seconds > 3600 {
        return Err(ConformanceError::Usage(
            "--task-seconds must be between 1 and 3600".into(),
        ));
    }
    let deadline = positive(args.deadline, "--deadline")?;
    let check_deadline = match args.check_deadline {
        Some(s) => positive(s, "--check-deadline")?,
        None => Duration::from_secs(60 + 2 * args.task_seconds),
    };
    let other = other_party(&contract, &args.play)
        .map(str::to_string)
        .ok_or_else(|| ConformanceError::Usage("the contract has one party".into()))?;
    let wire = Arc::new(
        Wire::new(Arc::new(contract)).map_err(|e| ConformanceError::Usage(e.to_string()))?,
    );
    let tls = contract_transport::endpoint::tls::TlsOpts {
        cert: args.cert.clone(),
        key: args.key.clone(),
        pin: args.pin.clone(),
        ca: args.ca.clone(),
    };
    let target = Target::from_args(
        &wire,
        &args.play,
        (&args.target, args.target_data.as_deref()),
        args.sockets,
        &tls,
    )
    .await
    .map_err(ConformanceError::Usage)?;
    let target = Arc::new(target);
    let mut params = Vec::new();
    for p in &args.param {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| ConformanceError::Usage(format!("--param {p:?}: expected KEY=VALUE")))?;
        params.push((k.to_string(), v.to_string()));
    }
    let opts = Opts {
        deadline,
        check_deadline,
        task_seconds: args.task_seconds,
        params,
        time_scale: time_scale()?,
        tls,
    };
    let mut report = Report::new(&name, &args.play, &args.target);
    report.strict = args.strict;
    eprintln!(
        "contract-proxy: conformance {name}: playing {} against {} at {} ({} checks)",
        args.play,
        other,
        args.target,
        checks.len()
    );
    // The context (its launched target and its session) a passing check kept for the next.
    let mut kept: Option<Ctx> = None;
    for c in &checks {
        let start = Instant::now();
        let outcome = match c.body {
            Err(why) => Outcome::Skip(format!("not applicable to the {}: {why}", args.play)),
            Ok(body) => {
                let mut cx = match kept.take() {
                    Some(cx) if c.shares => cx,
                    before => {
                        if let Some(mut cx) = before {
                            cx.finish().await;
                        }
                        Ctx::new(
                            wire.clone(),
                            &args.play,
                            &other,
                            opts.clone(),
                            target.clone(),
                        )
                    }
                };
                cx.subject = c.subject.clone();
                cx.opener = hooks.opener;
                cx.door = hooks.door;
                let (outcome, cx) = run_body(body, cx, opts.check_deadline).await;
                kept = cx;
                outcome
            }
        };
        let r = CheckResult {
            id: c.id.to_string(),
            title: c.title.to_string(),
            seed: c.seed.to_string(),
            outcome,
            elapsed: start.elapsed(),
        };
        say(format_args!("{r}"));
        report.results.push(r);
    }
    if let Some(mut cx) = kept {
        cx.finish().await;
    }
    say(format_args!("{}", report.summary()));
    if let Some(path) = &args.junit {
        report
            .write_junit(path)
            .map_err(|e| ConformanceError::Failed(format!("--junit {}: {e}", path.display())))?;
    }
    Ok(report)
}
