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
use crate::relay::{Shared, Sink, serve};

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
}

/// `run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Contract: a built-in name (kernel, xsession, rukh, toolchannel) or a path.
    #[arg(long, required_unless_present = "config")]
    pub contract: Option<String>,
    /// Channel of the contract (default: the first channel that carries JSON).
    #[arg(long)]
    pub channel: Option<String>,
    /// Where to listen: unix:PATH, tcp:[HOST:]PORT, ws://HOST:PORT/PATH, wss://…, quic://HOST:PORT, stdio, fd:N, pipe:NAME.
    #[arg(long, required_unless_present = "config")]
    pub listen: Option<String>,
    /// Where to connect: unix:PATH, tcp:HOST:PORT, ws://…, wss://…, quic://…, exec:CMD, exec-fd:N:CMD, pipe:NAME.
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
    /// Server certificate (PEM) for wss:// and quic:// listeners (default: self-signed, fingerprint printed).
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// Server key (PEM).
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// SHA-256 fingerprint the wss:// or quic:// upstream's certificate must have.
    #[arg(long)]
    pub pin: Option<String>,
    /// CA bundle (PEM) to verify a wss:// or quic:// upstream with.
    #[arg(long)]
    pub ca: Option<PathBuf>,
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
    #[cfg(unix)]
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
    let logger: Arc<dyn Sink> = Arc::new(Logger::new(args.log, args.filter.clone()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(vec![logger], stop_rx);
    let mut listeners = Vec::new();
    for r in routes {
        let l = r
            .listen
            .listen(&r.route.opts)
            .await
            .map_err(|e| CliError::Usage(e.to_string()))?;
        eprintln!(
            "contract-proxy: {}: listening on {} → {} ({} / {}, {} connects, {:?} mode)",
            r.route.name,
            l.local(),
            r.route.upstream,
            r.route.wire.contract().name,
            r.route.channel,
            r.route.client,
            r.route.mode,
        );
        if let Some(fp) = l.fingerprint() {
            eprintln!("contract-proxy: {}: certificate SHA-256 {fp}", r.route.name);
        }
        listeners.push((l, r.route));
    }
    // A stand-in forwards termination signals to its child instead of stopping on them.
    let stand_in = listeners.iter().any(|(l, _)| l.is_once());
    let mut set = tokio::task::JoinSet::new();
    for (l, route) in listeners {
        set.spawn(serve(l, route, shared.clone()));
    }
    let mut outcome = Outcome::Code(0);
    let stop_signal = async {
        if stand_in {
            std::future::pending::<()>().await
        } else {
            wait_for_stop().await
        }
    };
    tokio::pin!(stop_signal);
    loop {
        tokio::select! {
            done = set.join_next() => match done {
                None => break,
                Some(Ok(Ok(end))) => {
                    #[cfg(unix)]
                    if let Some(st) = end.child {
                        outcome = Outcome::Child(st);
                    }
                    let _ = end;
                    if stand_in {
                        let _ = stop_tx.send(true);
                    }
                }
                Some(Ok(Err(e))) => {
                    let _ = stop_tx.send(true);
                    outcome = Outcome::Code(1);
                    eprintln!("contract-proxy: a route failed: {e}");
                }
                Some(Err(e)) => {
                    let _ = stop_tx.send(true);
                    outcome = Outcome::Code(1);
                    eprintln!("contract-proxy: a route task failed: {e}");
                }
            },
            _ = &mut stop_signal, if !*stop_tx.borrow() => {
                eprintln!("contract-proxy: stopping");
                let _ = stop_tx.send(true);
            }
        }
    }
    let s = &shared.stats;
    use std::sync::atomic::Ordering::Relaxed;
    eprintln!(
        "contract-proxy: {} connections, {} frames, {} violations, {} refused",
        s.connections.load(Relaxed),
        s.frames.load(Relaxed),
        s.violations.load(Relaxed),
        s.refused.load(Relaxed)
    );
    Ok(outcome)
}

async fn wait_for_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
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
    }
}
