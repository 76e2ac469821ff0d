//! Routes: from the command line, or several at once from a TOML file.
//!
//! A route names its contract (built-in name or path), the channel, where to
//! listen and where to connect. Everything else defaults from the contract:
//! the channel that carries JSON, the party that connects, the ALPN and the
//! WebSocket subprotocols.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::inspect::Mode;
use crate::relay::Route;
use contract_transport::endpoint::tls::TlsOpts;
use contract_transport::endpoint::{Endpoint, Options};

/// Errors building routes.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for this format.
    #[error("{path}: {source}")]
    Toml {
        /// File.
        path: PathBuf,
        /// Cause.
        source: Box<toml::de::Error>,
    },
    /// The contract could not be loaded.
    #[error(transparent)]
    Contract(#[from] contract::LoadError),
    /// The contract does not compile for the wire.
    #[error(transparent)]
    Wire(#[from] contract::wire::WireError),
    /// A bad endpoint.
    #[error(transparent)]
    Endpoint(#[from] contract_transport::endpoint::EndpointError),
    /// A route names something its contract does not have.
    #[error("route {route}: {why}")]
    Route {
        /// Route name.
        route: String,
        /// What is wrong.
        why: String,
    },
}

/// One route as written (CLI flags or a `[[route]]` table).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// Name shown in the live view.
    #[serde(default)]
    pub name: Option<String>,
    /// Built-in contract name or path.
    pub contract: String,
    /// Channel (default: the first that carries JSON).
    #[serde(default)]
    pub channel: Option<String>,
    /// Listen endpoint.
    pub listen: String,
    /// Upstream endpoint.
    pub upstream: String,
    /// Party that connects (default: the channel's `connects`, else the first party).
    #[serde(default)]
    pub client: Option<String>,
    /// Observe or enforce (default: the file's or the CLI's mode).
    #[serde(default)]
    pub mode: Option<Mode>,
    /// TLS for wss, quic and tls.
    #[serde(default)]
    pub tls: TlsSpec,
    /// Token-bucket rate limits, per route or per method (`[[route.ratelimit]]`).
    #[serde(default)]
    pub ratelimit: Vec<crate::policy::ratelimit::RateLimitSpec>,
    /// The upstream demands the contract's auth line first (xsession: the inbox's
    /// registry record has an ipcToken), so any other first line breaks beforeHandshake.
    #[serde(default)]
    pub auth_required: bool,
}

/// TLS settings of a route.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// Server certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// Server key (PEM).
    pub key: Option<PathBuf>,
    /// Pinned SHA-256 fingerprint of the upstream's certificate.
    pub pin: Option<String>,
    /// CA bundle (PEM) to verify the upstream with.
    pub ca: Option<PathBuf>,
}

/// A whole config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Default mode for routes that do not set one.
    #[serde(default)]
    pub mode: Option<Mode>,
    /// Routes.
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSpec>,
}

impl FileConfig {
    /// Read and parse a TOML config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Toml {
            path: path.to_path_buf(),
            source: Box::new(source),
        })
    }
}

/// A route resolved against its contract, with its listen endpoint.
pub struct Resolved {
    /// The route.
    pub route: Route,
    /// Where it listens.
    pub listen: Endpoint,
}

impl RouteSpec {
    /// Resolve against the contract; `index` names unnamed routes.
    pub fn resolve(&self, index: usize, default_mode: Mode) -> Result<Resolved, ConfigError> {
        let c = contract::resolve(&self.contract)?;
        let name = self.name.clone().unwrap_or_else(|| {
            if index == 0 {
                "main".into()
            } else {
                format!("route{index}")
            }
        });
        let bad = |why: String| ConfigError::Route {
            route: name.clone(),
            why,
        };
        // Every known hook is one the proxy runs (a test in `policy` holds it).
        let missing = contract::extensions::unknown(&c);
        if !missing.is_empty() {
            return Err(bad(format!(
                "contract {} names extensions this proxy does not implement: {} (it has: {})",
                c.name,
                missing.join(", "),
                contract::extensions::known_names()
            )));
        }
        let channel = match &self.channel {
            Some(ch) if c.channels.contains_key(ch) => ch.clone(),
            Some(ch) => {
                return Err(bad(format!(
                    "contract {} has no channel {ch:?} (channels: {})",
                    c.name,
                    c.channels.keys().cloned().collect::<Vec<_>>().join(", ")
                )));
            }
            None => c
                .channels
                .iter()
                .find(|(_, ch)| ch.binding.is_some())
                .map(|(k, _)| k.clone())
                .ok_or_else(|| bad("contract has no JSON channel".into()))?,
        };
        let parties: Vec<String> = c.parties.keys().cloned().collect();
        let client = self
            .client
            .clone()
            .or_else(|| c.channels.get(&channel).and_then(|ch| ch.connects.clone()))
            .or_else(|| parties.first().cloned())
            .ok_or_else(|| bad("contract has no parties".into()))?;
        if !parties.contains(&client) {
            return Err(bad(format!(
                "{client:?} is not a party of {} (parties: {})",
                c.name,
                parties.join(", ")
            )));
        }
        let server = parties
            .iter()
            .find(|p| **p != client)
            .cloned()
            .unwrap_or_else(|| client.clone());
        let listen: Endpoint = self.listen.parse()?;
        let upstream: Endpoint = self.upstream.parse()?;
        let opts = Options::for_contract(
            &c,
            &channel,
            TlsOpts {
                cert: self.tls.cert.clone(),
                key: self.tls.key.clone(),
                pin: self.tls.pin.clone(),
                ca: self.tls.ca.clone(),
            },
        );
        let c = Arc::new(c);
        let ratelimit = if self.ratelimit.is_empty() {
            None
        } else {
            let limiter = crate::policy::ratelimit::RateLimiter::new(&self.ratelimit, &c)
                .map_err(|e| bad(e.to_string()))?;
            Some(Arc::new(std::sync::Mutex::new(limiter)))
        };
        // A test run may scale the contract's durations (CONTRACT_TIME_SCALE), as the
        // conformance suite and the peers do, instead of editing the contract.
        let scale = contract::env_time_scale().map_err(bad)?;
        let wire = Arc::new(contract::wire::Wire::new(c)?.time_scaled(scale));
        Ok(Resolved {
            route: Route {
                name,
                wire,
                channel: channel.clone(),
                client,
                server,
                upstream,
                opts,
                mode: self.mode.unwrap_or(default_mode),
                ratelimit,
                rules: crate::policy::RouteRules {
                    auth_required: self.auth_required,
                    channel,
                },
            },
            listen,
        })
    }
}
