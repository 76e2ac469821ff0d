//! A fresh session's WebSocket upgrade before anybody answers it ([`Ctx::door`]): what
//! the derived `upgrade.*` checks judge, for any contract whose channel declares an
//! `upgrade`. Where the implementation listens the suite dials it with whatever handshake
//! a check needs ([`Ctx::knock`]); where it dials, its upgrade waits for the suite's
//! answer ([`Door::Knock`]).

use std::time::{Duration, Instant};

use contract_transport::conn::{BoxMsg, Hello, HttpRefusal};
use contract_transport::endpoint::tls::TlsOpts;
use contract_transport::endpoint::ws::{ConnectError, PendingWs, WsSettings, connect_with};
use contract_transport::endpoint::{Endpoint, Incoming, Listener, Options};

use crate::session::{Ctx, Link, STARTUP, SocketKind, Target, endpoint_options, next_on};
use crate::{BodyFutureOf, Failure};

/// Pause between dials while a launched implementation is still binding.
const REDIAL: Duration = Duration::from_millis(50);

/// Where a fresh session's upgrade happens.
pub enum Door {
    /// The implementation listens: the suite dials `ws[s]://{addr}{path}` itself.
    Dial {
        /// Host and port.
        addr: String,
        /// Request path.
        path: String,
        /// `wss`.
        tls: bool,
    },
    /// The implementation dialed the suite: its upgrade, unanswered.
    Knock(PendingWs),
}

/// A hand-written suite's way to a template target's upgrade (toolchannel: the worker
/// launched with its token, or the host launched and named); it sets [`Ctx::token`].
pub type DoorHook = for<'a> fn(&'a mut Ctx) -> BodyFutureOf<'a, Door>;

impl Door {
    /// The door of a WebSocket endpoint the implementation listens on.
    fn at(ep: &Endpoint) -> Option<Door> {
        match ep {
            Endpoint::Ws { tls, addr, path } => Some(Door::Dial {
                addr: addr.clone(),
                path: path.clone(),
                tls: *tls,
            }),
            _ => None,
        }
    }
}

impl Ctx {
    /// A fresh session's upgrade, unanswered: by the hand-written suite's hook where it has
    /// one, else the target as written (a launched one with `--sockets ws`). `None` where
    /// the session is no WebSocket.
    pub async fn door(&mut self) -> Result<Option<Door>, Failure> {
        if let Some(hook) = self.door {
            return hook(self).await.map(Some);
        }
        let wait = self.opts.deadline;
        let target = self.target_arc();
        match &*target {
            Target::Launch {
                argv,
                suite_listens,
                sockets: SocketKind::Ws,
            } => {
                // The same options a launched session's listeners get (`Ctx::open_plain`).
                let opts = endpoint_options(&self.wire, &self.opts.tls);
                match self
                    .launch_link(argv, *suite_listens, SocketKind::Ws, &opts)
                    .await?
                {
                    // A launched dialer that fails first is said to, as in `Ctx::reach`.
                    Link::Accept(l, _) => {
                        let knocked = knock_on(&l, wait.max(STARTUP));
                        self.unless_failed(knocked)
                            .await
                            .map(|p| Some(Door::Knock(p)))
                    }
                    Link::Dial(ep, _) => Ok(Door::at(&ep)),
                    Link::Pipe => Ok(None),
                }
            }
            Target::Dial { control, .. } => Ok(Door::at(control)),
            Target::Accept { control, .. } if matches!(&**control, Listener::Ws(_)) => {
                knock_on(control, wait).await.map(|p| Some(Door::Knock(p)))
            }
            _ => Ok(None),
        }
    }

    /// Dial the implementation's upgrade at `door` offering `hello`, retrying while a
    /// launched one still binds its port (and no longer once it has failed):
    /// `Ok(Err(refusal))` when it answers with an HTTP status instead of 101.
    pub async fn knock(
        &mut self,
        door: (&str, &str, bool),
        hello: &Hello,
    ) -> Result<Result<BoxMsg, HttpRefusal>, Failure> {
        let (tls, wait, who) = (
            self.opts.tls.clone(),
            self.opts.deadline,
            self.other.clone(),
        );
        self.unless_failed(knock(door, hello, (&tls, wait), &who))
            .await
    }
}

/// [`Ctx::knock`] from what it needs: the TLS options, the wait (at least the start-up
/// allowance) and who is dialed, for the failure.
async fn knock(
    (addr, path, tls): (&str, &str, bool),
    hello: &Hello,
    (tls_opts, deadline): (&TlsOpts, Duration),
    who: &str,
) -> Result<Result<BoxMsg, HttpRefusal>, Failure> {
    let wait = deadline.max(STARTUP);
    let until = Instant::now() + wait;
    let opts = Options {
        tls: tls_opts.clone(),
        ..Options::default()
    };
    loop {
        let dial = connect_with(addr, path, tls, &opts, Some(hello), WsSettings::default());
        match dial.await {
            Ok((io, _chosen)) => return Ok(Ok(io)),
            Err(ConnectError::Refused(r)) => return Ok(Err(r)),
            Err(ConnectError::Io(_)) if Instant::now() + REDIAL < until => {
                tokio::time::sleep(REDIAL).await;
            }
            Err(e) => {
                let scheme = if tls { "wss" } else { "ws" };
                return Err(Failure::new(format!(
                    "cannot dial the {who} at {scheme}://{addr}{path} within {wait:?}: {e}"
                )));
            }
        }
    }
}

/// The next WebSocket upgrade on `l`, unanswered, within `wait`.
pub(crate) async fn knock_on(l: &Listener, wait: Duration) -> Result<PendingWs, Failure> {
    match next_on(l, "WebSocket", wait).await? {
        Incoming::Ws(p) => Ok(p),
        _ => Err(Failure::new(format!(
            "{} is no WebSocket listener",
            l.local()
        ))),
    }
}
