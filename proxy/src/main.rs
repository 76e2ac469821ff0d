//! The `contract-proxy` binary: `run` relays one route and prints the live view.
#![forbid(unsafe_code)]

use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use contract_proxy::endpoint::Endpoint;
use contract_proxy::log::{Format, Logger};
use contract_proxy::relay::{Route, serve};

#[derive(Debug, Parser)]
#[command(
    name = "contract-proxy",
    version,
    about = "Contract-aware inspecting proxy (unix and tcp only so far)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the built-in contracts and check that each loads.
    Contracts,
    /// Relay one route, inspecting every message against the contract.
    Run {
        /// Contract: a built-in name (kernel, xsession, rukh, toolchannel) or a path.
        #[arg(long)]
        contract: String,
        /// Channel of the contract (default: the first channel that carries JSON).
        #[arg(long)]
        channel: Option<String>,
        /// Where to listen: unix:PATH or tcp:HOST:PORT.
        #[arg(long)]
        listen: String,
        /// Where to connect: unix:PATH or tcp:HOST:PORT.
        #[arg(long)]
        upstream: String,
        /// Party that connects to the listener (default: the channel's `connects`, else the first party).
        #[arg(long)]
        client: Option<String>,
        /// Live view format.
        #[arg(long, value_enum, default_value = "pretty")]
        log: Format,
        /// Show only messages matching KEY=VALUE (method, kind, dir, from, verdict); repeatable, all must match.
        #[arg(long, value_name = "KEY=VALUE")]
        filter: Vec<contract_proxy::log::Filter>,
        /// Route name shown in the live view.
        #[arg(long, default_value = "main")]
        route: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Contracts => {
            for (name, _) in contract::BUILTIN {
                let c = contract_proxy::contract_for(name)?;
                println!("{name}\t{}\t{} methods", c.title, c.methods.len());
            }
            Ok(())
        }
        Cmd::Run {
            contract,
            channel,
            listen,
            upstream,
            client,
            log,
            filter,
            route,
        } => {
            let c = contract_proxy::contract_for(&contract)?;
            let channel = match channel {
                Some(ch) if c.channels.contains_key(&ch) => ch,
                Some(ch) => bail!(
                    "contract {} has no channel {ch:?} (channels: {})",
                    c.name,
                    c.channels.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
                None => c
                    .channels
                    .iter()
                    .find(|(_, ch)| ch.binding.is_some())
                    .map(|(k, _)| k.clone())
                    .context("contract has no JSON channel")?,
            };
            let parties: Vec<String> = c.parties.keys().cloned().collect();
            let client = client
                .or_else(|| c.channels[&channel].connects.clone())
                .or_else(|| parties.first().cloned())
                .context("contract has no parties")?;
            if !parties.contains(&client) {
                bail!(
                    "{client:?} is not a party of {} (parties: {})",
                    c.name,
                    parties.join(", ")
                );
            }
            let server = parties
                .iter()
                .find(|p| **p != client)
                .cloned()
                .unwrap_or_else(|| client.clone());
            let listen: Endpoint = listen.parse()?;
            let upstream: Endpoint = upstream.parse()?;
            let wire = Arc::new(contract::wire::Wire::new(Arc::new(c))?);
            let listener = listen.listen(&Default::default()).await?;
            eprintln!(
                "contract-proxy: {route}: listening on {} → {upstream} ({} / {channel}, {client} connects)",
                listener.local(),
                wire.contract().name
            );
            let route = Route {
                name: route,
                wire,
                channel,
                client,
                server,
                upstream,
            };
            let log = Arc::new(Logger::new(log, filter));
            tokio::select! {
                r = serve(listener, route, log) => r.context("listener failed")?,
                _ = tokio::signal::ctrl_c() => eprintln!("contract-proxy: interrupted, stopping"),
            }
            Ok(())
        }
    }
}
