//! The command line, kept in the library so tests can parse and run it.
//!
//! Exit codes: 0 done; 1 the run failed after it started (or a replay or
//! conformance check found differences); 2 bad usage: an unknown contract, a bad
//! endpoint, a port in use, a missing socket. A stand-in launched in place of a
//! program (`--listen stdio|fd:N` with an `exec`/`exec-fd` upstream) exits with
//! its child's exact status instead.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::config::{FileConfig, Resolved, RouteSpec, TlsSpec};
use crate::inspect::Mode;
use crate::log::{Filter, Format, Logger};
use crate::server::{Finished, Proxy};
use crate::trace::{OtlpConfig, Tracer};

/// Top-level arguments.
#[derive(Debug, Parser)]
#[command(
    name = "contract-proxy",
    version,
    about = "Contract-aware inspecting proxy: relays, decodes and checks every message against its contract",
    after_help = "Exit codes: 0 done, 1 failed while running, 2 bad usage (contract, endpoint, port in use, missing socket); a stand-in (--listen stdio|fd:N with an exec upstream) exits with its child's status."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// List the built-in contracts and check that each loads.
    Contracts,
    /// Relay one route (or the routes of --config), inspecting every message against the contract.
    Run(Box<RunArgs>),
    /// Print a recording like the live view.
    Show(ShowArgs),
    /// Re-send one side of a recorded connection to an endpoint and report where the answers differ.
    Replay(ReplayArgs),
    /// Play a scripted kernel session between an in-process shell and core through the proxy.
    Demo(crate::demo::DemoArgs),
    /// Play one party of a contract against a real implementation of the other and run the seed's checks.
    Conformance(contract_conformance::ConformanceArgs),
    /// Launched by the conformance suite in place of a party the implementation launches
    /// itself (rukh's extension): passes its inherited socket end to the suite.
    Handoff(contract_conformance::handoff::HandoffArgs),
}

/// `show` arguments.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The recording (from `run --record`).
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "pretty")]
    pub log: Format,
    /// Show only frames matching KEY=VALUE (as for `run`).
    #[arg(long, value_name = "KEY=VALUE")]
    pub filter: Vec<Filter>,
    /// Write the recording as pcapng to OUT instead of printing it: each connection a
    /// TCP conversation, each frame framed as it travelled, with the proxy's verdict as
    /// the packet comment (open it with the `contractgen generate --lang wireshark`
    /// dissector; docs/wireshark.md).
    #[arg(long, value_name = "OUT")]
    pub pcap: Option<PathBuf>,
    /// The contract (a built-in name or a file) when the recording's own is not wanted.
    #[arg(long, value_name = "NAME|PATH")]
    pub contract: Option<String>,
    /// Print the sequence diagram of a recorded session instead (docs/web.md).
    #[arg(long, value_enum, value_name = "FORMAT", conflicts_with_all = ["pcap", "web"])]
    pub diagram: Option<crate::web::diagram::DiagramFormat>,
    /// The session `--diagram` draws (default: the first).
    #[arg(long, value_name = "N", requires = "diagram")]
    pub session: Option<u64>,
    /// The web view.
    #[command(flatten)]
    pub web: WebArgs,
}

/// The web view's options (docs/web.md).
#[derive(Debug, Clone, Args)]
pub struct WebArgs {
    /// Serve a web view of the flows at ADDR (HOST:PORT; port 0 picks one). Loopback
    /// needs nothing more; any other address requires the token printed in the URL.
    #[arg(long, value_name = "ADDR")]
    pub web: Option<std::net::SocketAddr>,
    /// Rows the web view keeps (the oldest go first, counted).
    #[arg(long, value_name = "N", default_value_t = crate::web::KEEP_DEFAULT, requires = "web")]
    pub web_keep: usize,
    /// The trace link a message's detail offers when traces are exported (--otlp);
    /// `{trace_id}` is replaced.
    #[arg(
        long,
        value_name = "URL",
        default_value = crate::web::TRACE_URL_DEFAULT,
        requires = "web"
    )]
    pub web_trace_url: String,
}

impl Default for WebArgs {
    fn default() -> Self {
        WebArgs {
            web: None,
            web_keep: crate::web::KEEP_DEFAULT,
            web_trace_url: crate::web::TRACE_URL_DEFAULT.into(),
        }
    }
}

/// `replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording (from `run --record`).
    pub file: PathBuf,
    /// Where to send: any upstream endpoint.
    #[arg(long)]
    pub to: String,
    /// Whose frames to re-send: up (the connecting side, default) or down.
    #[arg(long, default_value = "up")]
    pub side: crate::inspect::Dir,
    /// Connection number to replay (default: the first with frames from that side).
    #[arg(long)]
    pub conn: Option<u64>,
    /// Seconds to wait for each answer.
    #[arg(long, default_value_t = 5.0)]
    pub deadline: f64,
    /// Also ignore this member name (anywhere) or JSON pointer when comparing; repeatable.
    #[arg(long, value_name = "NAME|/POINTER")]
    pub ignore: Vec<String>,
    /// A secret to send in place of `[REDACTED]`: NAME=VALUE; repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub secret: Vec<String>,
    /// The report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Contract (a built-in name or a path) instead of the one the recording names or carries.
    #[arg(long)]
    pub contract: Option<String>,
    /// Pinned fingerprint or CA for a wss://, quic:// or tls:// target.
    #[arg(long)]
    pub pin: Option<String>,
    /// CA bundle (PEM) for a wss://, quic:// or tls:// target.
    #[arg(long)]
    pub ca: Option<PathBuf>,
}

/// `run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Contract: a built-in name (kernel, xsession, rukh, toolchannel, mcp) or a path.
    #[arg(long, required_unless_present = "config")]
    pub contract: Option<String>,
    /// Channel of the contract (default: the first channel that carries JSON).
    #[arg(long)]
    pub channel: Option<String>,
    /// Where to listen: unix:PATH, tcp:[HOST:]PORT, ws://HOST:PORT/PATH, wss://…, quic://HOST:PORT, tls://HOST:PORT, stdio, fd:N, pipe:NAME.
    #[arg(long, required_unless_present = "config")]
    pub listen: Option<String>,
    /// Where to connect: unix:PATH, tcp:HOST:PORT, ws://…, wss://…, quic://…, tls://…, exec:CMD, exec-fd:N:CMD, pipe:NAME.
    #[arg(long, required_unless_present = "config")]
    pub upstream: Option<String>,
    /// Party that connects to the listener (default: the channel's `connects`, else the first party).
    #[arg(long)]
    pub client: Option<String>,
    /// Second channel of the same sessions (kernel: data), listened on here…
    #[arg(long, requires = "pair_upstream")]
    pub pair_listen: Option<String>,
    /// …and relayed to here.
    #[arg(long, requires = "pair_listen")]
    pub pair_upstream: Option<String>,
    /// Channel of the paired route (default: the contract's other channel).
    #[arg(long)]
    pub pair_channel: Option<String>,
    /// The upstream demands the contract's auth line first (an xsession inbox whose
    /// registry record has an ipcToken): any other first line breaks beforeHandshake.
    #[arg(long)]
    pub auth_required: bool,
    /// Observe (flag and forward) or enforce (refuse with the contract's own reply or close).
    #[arg(long, value_enum, default_value = "observe")]
    pub mode: Mode,
    /// Several routes at once, from a TOML file (see docs/proxy.md).
    #[arg(long, conflicts_with_all = ["contract", "listen", "upstream"])]
    pub config: Option<PathBuf>,
    /// Live view format.
    #[arg(long, value_enum, default_value = "pretty")]
    pub log: Format,
    /// Show only messages matching KEY=VALUE (method, kind, dir, from, verdict); repeatable, all must match.
    #[arg(long, value_name = "KEY=VALUE")]
    pub filter: Vec<Filter>,
    /// Route name shown in the live view.
    #[arg(long, default_value = "main")]
    pub route: String,
    /// Server certificate (PEM) for wss://, quic:// and tls:// listeners (default: self-signed, fingerprint printed).
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// Server key (PEM).
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// SHA-256 fingerprint the wss://, quic:// or tls:// upstream's certificate must have.
    #[arg(long)]
    pub pin: Option<String>,
    /// CA bundle (PEM) to verify a wss://, quic:// or tls:// upstream with.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Record every frame, raw and decoded, to this file (see docs/recording.md); it must not exist.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Write every frame to this file as pcapng while it passes: a TCP conversation per
    /// connection, the verdict as each packet's comment (see docs/wireshark.md).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Export every relayed exchange as OpenTelemetry spans to this OTLP collector
    /// (http://HOST:4317 gRPC, :4318 HTTP); OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME are honoured too.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// The web view.
    #[command(flatten)]
    pub web: WebArgs,
}

/// Why a command failed, and the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad usage: exit 2.
    #[error("{0}")]
    Usage(String),
    /// Failed while running: exit 1.
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Failed(_) => 1,
        }
    }
}

/// What a finished command asks the process to do.
#[derive(Debug)]
pub enum Outcome {
    /// Exit with this code.
    Code(i32),
    /// Exit exactly as this child did (a stand-in).
    Child(std::process::ExitStatus),
}

impl RunArgs {
    /// The routes these arguments describe.
    pub fn routes(&self) -> Result<Vec<Resolved>, CliError> {
        let usage = |e: crate::config::ConfigError| CliError::Usage(e.to_string());
        if let Some(path) = &self.config {
            let file = FileConfig::load(path).map_err(usage)?;
            if file.routes.is_empty() {
                return Err(CliError::Usage(format!(
                    "{}: no [[route]] tables",
                    path.display()
                )));
            }
            let mode = file.mode.unwrap_or(self.mode);
            return file
                .routes
                .iter()
                .enumerate()
                .map(|(i, r)| r.resolve(i, mode).map_err(usage))
                .collect();
        }
        let (Some(contract), Some(listen), Some(upstream)) =
            (&self.contract, &self.listen, &self.upstream)
        else {
            return Err(CliError::Usage(
                "--contract, --listen and --upstream are required without --config".into(),
            ));
        };
        let tls = TlsSpec {
            cert: self.cert.clone(),
            key: self.key.clone(),
            pin: self.pin.clone(),
            ca: self.ca.clone(),
        };
        let main = RouteSpec {
            name: Some(self.route.clone()),
            contract: contract.clone(),
            channel: self.channel.clone(),
            listen: listen.clone(),
            upstream: upstream.clone(),
            client: self.client.clone(),
            mode: Some(self.mode),
            tls: tls.clone(),
            ratelimit: Vec::new(),
            auth_required: self.auth_required,
        };
        let first = main.resolve(0, self.mode).map_err(usage)?;
        let mut out = vec![first];
        if let (Some(pl), Some(pu)) = (&self.pair_listen, &self.pair_upstream) {
            let c = out[0].route.wire.contract();
            let channel = match &self.pair_channel {
                Some(ch) => ch.clone(),
                None => c
                    .channels
                    .keys()
                    .find(|k| **k != out[0].route.channel)
                    .cloned()
                    .ok_or_else(|| {
                        CliError::Usage(format!(
                            "contract {} has one channel: nothing to pair",
                            c.name
                        ))
                    })?,
            };
            let pair = RouteSpec {
                name: Some(format!("{}.{channel}", self.route)),
                channel: Some(channel),
                listen: pl.clone(),
                upstream: pu.clone(),
                ..main
            };
            out.push(pair.resolve(1, self.mode).map_err(usage)?);
        }
        Ok(out)
    }
}

/// Run `contract-proxy run` until stopped (ctrl-c, SIGTERM) or, for a stand-in, until its child exits.
pub async fn run(args: RunArgs) -> Result<Outcome, CliError> {
    let routes = args.routes()?;
    // A stand-in's stdout is its program's output: the live view goes to stderr then.
    use contract_transport::endpoint::Endpoint;
    let listens_as_stand_in =
        |r: &&crate::config::Resolved| matches!(r.listen, Endpoint::Stdio | Endpoint::Fd(_));
    let stand_in = routes.iter().any(|r| listens_as_stand_in(&r));
    // In front of a child, a stand-in passes termination signals on (its launcher
    // gets the child's own end); with no child it stops on them like any proxy, so
    // what it took still reaches the upstream.
    let forwards_signals = routes.iter().filter(listens_as_stand_in).any(|r| {
        matches!(
            r.route.upstream,
            Endpoint::Exec(_) | Endpoint::ExecFd { .. }
        )
    });
    let logger = Arc::new(if stand_in {
        Logger::on_stderr(args.log, args.filter.clone())
    } else {
        Logger::new(args.log, args.filter.clone())
    });
    let usage = |e: &dyn std::fmt::Display| CliError::Usage(e.to_string());
    let mode = routes
        .first()
        .map(|r| format!("{:?}", r.route.mode).to_lowercase());
    let mut proxy = Proxy::new(routes);
    proxy.sink(logger.clone());
    let web = args
        .web
        .web
        .map(|addr| (addr, crate::web::Plan::new(&args.web)));
    let otlp = OtlpConfig::from_env(args.otlp.as_deref()).map_err(|e| usage(&e))?;
    let traced = otlp.is_some();
    if let Some(cfg) = otlp {
        let tracer = Tracer::new(&cfg).map_err(|e| usage(&e))?;
        if let Some((_, plan)) = &web {
            plan.metrics.trace_with(tracer.clone());
        }
        proxy.tracer(tracer);
    }
    if let Some(path) = &args.record {
        proxy.record(path);
    }
    if let Some(path) = &args.pcap {
        proxy.pcap(path);
    }
    if let Some((_, plan)) = &web {
        proxy.sink(plan.store.clone());
        proxy.sink(plan.metrics.clone());
    }
    let bound = proxy.bind().await.map_err(|e| usage(&e))?;
    let stop = (!forwards_signals).then(Stop::listen);
    for r in bound.routes() {
        eprintln!("contract-proxy: {}: listening on {}", r.name, r.summary);
        if let Some(fp) = r.fingerprint {
            eprintln!("contract-proxy: {}: certificate SHA-256 {fp}", r.name);
        }
    }
    let serving = match web {
        Some((addr, plan)) => {
            let trace_url = traced.then(|| args.web.web_trace_url.clone());
            let w = plan.serve_run(addr, &bound, mode, trace_url).await;
            Some(w.map_err(|e| web_usage(addr, e))?)
        }
        None => None,
    };
    let shutdown = async {
        match stop {
            Some(stop) => {
                stop.wait().await;
                eprintln!("contract-proxy: stopping");
            }
            None => std::future::pending::<()>().await,
        }
    };
    let done = bound.run(shutdown).await;
    if let Some(w) = serving {
        w.stop().await;
    }
    logger.flush();
    Ok(summarize(&done))
}

/// `show FILE --diagram FORMAT` or `show FILE --web ADDR`.
async fn show_web(a: ShowArgs) -> Result<Outcome, CliError> {
    use crate::web::{Plan, server::WebRoute, store};
    let failed = |e: &dyn std::fmt::Display| CliError::Failed(e.to_string());
    let bounds = store::Bounds {
        rows: a.web.web_keep.max(1),
        ..store::Bounds::default()
    };
    let given = a.contract.as_deref();
    let (header, st, contracts) = store::from_recording(&a.file, bounds, |h, r| {
        crate::record::route_contract(&a.file, h, r, given).map(Arc::new)
    })
    .map_err(|e| match e {
        store::Loaded::Contract(e) => CliError::Usage(e.to_string()),
        e => failed(&e),
    })?;
    let routes: Vec<WebRoute> = (header.routes.iter().zip(contracts))
        .map(|(r, (_, contract))| {
            let ends = (r.listen.clone(), r.upstream.clone());
            WebRoute::new(
                r.name.clone(),
                r.channel.clone(),
                ends,
                r.client.clone(),
                contract,
            )
        })
        .collect();
    let plan = Plan::with(st);
    let mut app = plan.app(routes);
    app.source = "recording";
    if let Some(format) = a.diagram {
        let text = app.diagram(a.session, format).ok_or_else(|| {
            CliError::Failed(format!(
                "{}: the recording names no route",
                a.file.display()
            ))
        })?;
        print!("{text}");
        return Ok(Outcome::Code(0));
    }
    app.store.each(|row| {
        let route = app.routes.iter().find(|r| r.name == row.event.route);
        let known = |m: &str| route.is_some_and(|r| r.contract.methods.contains_key(m));
        app.metrics.observe(&row.event.route, known, &row.event);
    });
    let Some(addr) = a.web.web else {
        return Ok(Outcome::Code(0));
    };
    let stop = Stop::listen();
    let w = crate::web::serve_saying(addr, app)
        .await
        .map_err(|e| web_usage(addr, e))?;
    stop.wait().await;
    w.stop().await;
    Ok(Outcome::Code(0))
}

/// A web view that could not listen: bad usage (the address is taken or not ours).
fn web_usage(addr: std::net::SocketAddr, e: std::io::Error) -> CliError {
    CliError::Usage(format!("web view on {addr}: {e}"))
}

/// Print what a run did, and say how the process should exit.
fn summarize(done: &Finished) -> Outcome {
    let mut outcome = Outcome::Code(0);
    for f in &done.failures {
        eprintln!("contract-proxy: {f}");
        outcome = Outcome::Code(1);
    }
    if let (Some(st), Outcome::Code(0)) = (done.child, &outcome) {
        outcome = Outcome::Child(st);
    }
    match &done.traces {
        Some(Ok(st)) => eprintln!(
            "contract-proxy: traces: {} spans exported, {} dropped{}",
            st.exported,
            st.dropped,
            match st.booked_by_relay {
                0 => String::new(),
                n => format!("; {n} batches made into spans on the relay's threads"),
            }
        ),
        Some(Err(e)) => eprintln!("contract-proxy: traces: {e}"),
        None => {}
    }
    if let Some(r) = &done.recording {
        match &r.result {
            Ok(st) => {
                if let Some(path) = &r.path {
                    eprintln!(
                        "contract-proxy: recording {}: {} records, {} bytes, {} secrets redacted, {} not written",
                        path.display(),
                        st.records,
                        st.bytes,
                        st.redacted,
                        r.unrecorded
                    );
                }
                if let (Some(path), Some(p)) = (&r.pcap, &st.pcap) {
                    eprintln!(
                        "contract-proxy: pcap {}: {} connections, {} frames, {} packets, {} not written",
                        path.display(),
                        p.connections,
                        p.frames,
                        p.packets,
                        r.unrecorded
                    );
                }
            }
            Err(e) => {
                eprintln!("contract-proxy: recording: {e}");
                outcome = Outcome::Code(1);
            }
        }
    }
    let s = done.stats();
    use std::sync::atomic::Ordering::Relaxed;
    eprintln!(
        "contract-proxy: {} connections, {} frames, {} violations, {} refused",
        s.connections.load(Relaxed),
        s.frames.load(Relaxed),
        s.violations.load(Relaxed),
        s.refused.load(Relaxed)
    );
    eprintln!("contract-proxy: {}", s.enforcement_line());
    outcome
}

/// Termination signals (Ctrl-C, and SIGTERM on Unix), listened for from the moment
/// this is made. A command makes one before it says it is ready: a signal sent on
/// that word must reach this listener, not the default action, which would end the
/// process without its summary or exit code.
struct Stop {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
    #[cfg(windows)]
    ctrl_c: Option<tokio::signal::windows::CtrlC>,
}

impl Stop {
    fn listen() -> Stop {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let int = signal(SignalKind::interrupt());
            let signals = int.and_then(|i| Ok((i, signal(SignalKind::terminate())?)));
            Stop {
                signals: signals.ok(),
            }
        }
        #[cfg(windows)]
        {
            Stop {
                ctrl_c: tokio::signal::windows::ctrl_c().ok(),
            }
        }
    }

    async fn wait(mut self) {
        #[cfg(unix)]
        if let Some((int, term)) = &mut self.signals {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        #[cfg(windows)]
        if let Some(c) = &mut self.ctrl_c {
            c.recv().await;
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Run a parsed command line.
pub async fn dispatch(cli: Cli) -> Result<Outcome, CliError> {
    match cli.command {
        Cmd::Contracts => {
            for (name, _) in contract::BUILTIN {
                let c = contract::resolve(name).map_err(|e| CliError::Failed(e.to_string()))?;
                println!("{name}\t{}\t{} methods", c.title, c.methods.len());
            }
            Ok(Outcome::Code(0))
        }
        Cmd::Run(args) => run(*args).await,
        Cmd::Show(ShowArgs {
            file,
            pcap: Some(out),
            contract,
            ..
        }) => {
            let st = crate::pcap::export(&file, &out, contract.as_deref())
                .map_err(|e| CliError::Failed(e.to_string()))?;
            eprintln!(
                "contract-proxy: wrote {}: {} connections, {} frames, {} packets{}",
                out.display(),
                st.connections,
                st.frames,
                st.packets,
                if st.headerless > 0 {
                    format!(
                        "; {} data frames recorded without their header (zeros written)",
                        st.headerless
                    )
                } else {
                    String::new()
                }
            );
            Ok(Outcome::Code(0))
        }
        Cmd::Show(a) if a.diagram.is_some() || a.web.web.is_some() => show_web(a).await,
        Cmd::Show(a) => {
            let logger = Logger::new(a.log, a.filter);
            let st = crate::record::show(&a.file, &logger);
            logger.flush();
            let st = st.map_err(|e| CliError::Failed(e.to_string()))?;
            eprintln!(
                "contract-proxy: {} records: {} frames ({} violations), {} notes",
                st.records, st.frames, st.violations, st.notes
            );
            Ok(Outcome::Code(0))
        }
        Cmd::Replay(a) => {
            let to: contract_transport::endpoint::Endpoint =
                a.to.parse()
                    .map_err(|e: contract_transport::endpoint::EndpointError| {
                        CliError::Usage(e.to_string())
                    })?;
            let secrets = a
                .secret
                .iter()
                .map(|s| {
                    s.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .ok_or_else(|| CliError::Usage(format!("--secret {s:?} is not NAME=VALUE")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if !(a.deadline.is_finite() && a.deadline > 0.0) {
                return Err(CliError::Usage(
                    "--deadline must be a positive number of seconds".into(),
                ));
            }
            let mut opts = crate::replay::ReplayOptions {
                conn: a.conn,
                deadline: std::time::Duration::from_secs_f64(a.deadline),
                ignore: a.ignore,
                secrets,
                contract: a.contract,
                ..Default::default()
            };
            opts.endpoint.tls.pin = a.pin;
            opts.endpoint.tls.ca = a.ca;
            let report = crate::replay::replay(&a.file, &to, a.side, &opts)
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
            if a.json {
                println!("{}", report.to_json());
            } else {
                println!("{report}");
            }
            Ok(Outcome::Code(if report.is_clean() { 0 } else { 1 }))
        }
        Cmd::Conformance(args) => {
            use contract_conformance::ConformanceError;
            let report = contract_conformance::run(args).await.map_err(|e| match e {
                ConformanceError::Usage(s) => CliError::Usage(s),
                ConformanceError::Failed(s) => CliError::Failed(s),
            })?;
            Ok(Outcome::Code(report.exit_code()))
        }
        Cmd::Handoff(args) => {
            use contract_conformance::handoff::{HandoffError, run};
            match run(args) {
                Ok(code) => Ok(Outcome::Code(code)),
                Err(HandoffError::Usage(s)) => Err(CliError::Usage(s)),
                Err(HandoffError::Failed(s)) => Err(CliError::Failed(s)),
            }
        }
        Cmd::Demo(args) => {
            let (summary, web) =
                crate::demo::run_with_web(args)
                    .await
                    .map_err(|e| match e.exit_code() {
                        2 => CliError::Usage(e.to_string()),
                        _ => CliError::Failed(e.to_string()),
                    })?;
            // Listening before the summary, which tells a watcher the run is over.
            let stop = web.is_some().then(Stop::listen);
            summary.print();
            if let (Some(w), Some(stop)) = (web, stop) {
                eprintln!(
                    "contract-proxy: web: the view stays up at {} until Ctrl-C",
                    w.url
                );
                stop.wait().await;
                w.stop().await;
            }
            Ok(Outcome::Code(summary.exit_code()))
        }
    }
}
