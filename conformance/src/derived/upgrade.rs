//! `upgrade.bearer` and `upgrade.subprotocol`: the refusals a channel's WebSocket upgrade
//! declares (`channels.<name>.upgrade`), for any contract, judged before any message.
//!
//! Where the implementation listens, the suite dials it: without a Bearer token and with a
//! wrong one (then with the session's own, which must open), or offering no subprotocol of
//! the framing's; each refusal must be the declared HTTP status, the subprotocol one
//! listing the framing's subprotocols. Where the implementation dials, its upgrade must
//! carry the token it was given (or offer one of the subprotocols); the suite refuses it
//! with the status, and a launched process must then exit as the status `maps`.

use bytes::Bytes;
use contract::Contract;
use contract::join_pointer as join;
use contract::model::UpgradeRefusal;
use contract_transport::conn::{Hello, HttpRefusal, Msg};
use contract_transport::endpoint::ws::PendingWs;
use futures_util::{SinkExt, StreamExt};

use super::{Shape, plan_of};
use crate::door::Door;
use crate::session::{Ctx, fresh};
use crate::{BodyFuture, Failure, Verdict, other_party, pass, skip};

/// How long the suite watches an upgrade it wrongly got for a first message to show.
const FIRST: std::time::Duration = std::time::Duration::from_millis(500);

/// The two refusals, by the field that declares each.
pub(super) const RULES: [&str; 2] = ["bearer", "subprotocol"];

/// Each refusal the played channel's upgrade declares: its field, the check's title, the
/// pointer to cite and its seed.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(&'static str, String, String, String)> {
    let Some((name, u)) = upgrade_of(c) else {
        return Vec::new();
    };
    let other = other_party(c, role).unwrap_or("implementation");
    let dials = c.channels[&name].connects.as_deref() == Some(other);
    let subs = subprotocols(c, &name).join(", ");
    let mut out = Vec::new();
    for (field, r) in RULES.into_iter().zip([&u.bearer, &u.subprotocol]) {
        let Some(r) = r else { continue };
        let s = r.refused;
        let title = match (field, dials) {
            ("bearer", false) => format!(
                "an upgrade without a Bearer token, or with a wrong one, gets HTTP {s}; the session's own token gets 101"
            ),
            ("bearer", true) => format!(
                "the {other}'s upgrade carries Authorization: Bearer and the token it was given; refused with HTTP {s}, it ends as the status maps"
            ),
            (_, false) => {
                format!("an upgrade offering none of [{subs}] gets HTTP {s} listing them")
            }
            (_, true) => format!(
                "the {other}'s upgrade offers one of [{subs}]; refused with HTTP {s} listing another, it ends as the status maps"
            ),
        };
        let pointer = join("/channels", [name.as_str(), "upgrade", field]);
        out.push((field, title, pointer, r.seed.clone()));
    }
    out
}

/// The played channel and its upgrade, if it declares one.
fn upgrade_of(c: &Contract) -> Option<(String, contract::model::Upgrade)> {
    let name = Shape::of(c)?.channel;
    let u = c.channels.get(&name)?.upgrade.clone()?;
    Some((name, u))
}

fn subprotocols(c: &Contract, channel: &str) -> Vec<String> {
    c.channels
        .get(channel)
        .map_or_else(Vec::new, |ch| ch.framing.subprotocols().to_vec())
}

/// One check: the refusal [`Ctx::subject`] names.
pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let c = cx.wire.contract().clone();
        let field = cx.subject.clone().unwrap_or_default();
        let Some((name, u)) = upgrade_of(&c) else {
            return skip("the channel declares no upgrade");
        };
        let (refusal, bearer) = match field.as_str() {
            "bearer" => (u.bearer.clone(), true),
            _ => (u.subprotocol.clone(), false),
        };
        let Some(r) = refusal else {
            return skip(format!("the upgrade declares no {field} refusal"));
        };
        let rule = Rule {
            bearer,
            token_wanted: u.bearer.is_some(),
            refused: r,
            subprotocols: subprotocols(&c, &name),
        };
        // Not reaching the implementation at all breaks no upgrade rule: the handshake
        // check reports that (one broken rule, one failing check).
        let plan = plan_of(cx);
        let door = match cx.door().await {
            Ok(door) => door,
            Err(f) => return plan.unreached(f),
        };
        match door {
            None => skip(
                "the session is no WebSocket: launch the target with --sockets ws, or name a ws:// endpoint",
            ),
            Some(Door::Knock(p)) => rule.knocked(cx, p).await,
            Some(Door::Dial { addr, path, tls }) => {
                match rule.dial(cx, (&addr, &path, tls)).await {
                    Ok(v) => Ok(v),
                    Err(Miss::Rule(f)) => Err(f),
                    Err(Miss::Reach(f)) => plan.unreached(f),
                }
            }
        }
    })
}

/// Why a dial check did not pass: a rule broken, or the implementation not reached.
enum Miss {
    Rule(Failure),
    Reach(Failure),
}

impl From<Failure> for Miss {
    fn from(f: Failure) -> Self {
        Miss::Rule(f)
    }
}

/// The refusal a check judges.
struct Rule {
    /// The Bearer refusal (else the subprotocol one).
    bearer: bool,
    /// Whether the upgrade wants a token at all (a subprotocol probe carries the right one).
    token_wanted: bool,
    refused: UpgradeRefusal,
    subprotocols: Vec<String>,
}

impl Rule {
    /// A subprotocol the implementation cannot speak.
    fn foreign(&self) -> String {
        let first = self.subprotocols.first().map(String::as_str);
        format!("{}-unspoken", first.unwrap_or("conformance"))
    }

    /// The implementation dialed: its upgrade carries what the rule asks, and a refusal
    /// ends it as the status maps.
    async fn knocked(&self, cx: &mut Ctx, p: PendingWs) -> Result<Verdict, Failure> {
        let hello = p.hello().clone();
        let who = cx.other.clone();
        let carried = if self.bearer {
            let auth = hello.authorization.clone().unwrap_or_default();
            let ok = match &cx.token {
                Some(t) => auth == format!("Bearer {t}"),
                None => auth.starts_with("Bearer "),
            };
            if !ok {
                let what = match cx.token {
                    Some(_) => "Authorization: Bearer and the token it was given",
                    None => "Authorization: Bearer",
                };
                // A token is a secret even when it is the wrong one: its scheme and size
                // tell what was sent.
                let shown = match auth.split_once(' ') {
                    _ if auth.is_empty() => "(none)".to_string(),
                    Some((scheme, t)) => format!("{scheme} [{} bytes, redacted]", t.len()),
                    None => format!("[{} bytes, redacted]", auth.len()),
                };
                return Err(
                    Failure::new(format!("the {who}'s upgrade does not carry {what}"))
                        .with("its Authorization header", shown.as_bytes()),
                );
            }
            "its Bearer token".to_string()
        } else {
            let offer = &hello.subprotocols;
            if !offer.iter().any(|o| self.subprotocols.contains(o)) {
                return Err(Failure::new(format!(
                    "the {who}'s upgrade offers none of [{}]",
                    self.subprotocols.join(", ")
                ))
                .with("its Sec-WebSocket-Protocol", offer.join(", ").as_bytes()));
            }
            format!("subprotocol [{}]", offer.join(", "))
        };
        let status = self.refused.refused;
        let mut headers = vec![(
            "Content-Type".to_string(),
            "text/plain; charset=utf-8".to_string(),
        )];
        let listed = self.foreign();
        if !self.bearer {
            headers.push(("Sec-WebSocket-Protocol".into(), listed.clone()));
        }
        let refusal = HttpRefusal {
            status,
            headers,
            body: Bytes::from(format!("conformance: refused with {status}\n")),
        };
        p.refuse(&refusal)
            .await
            .map_err(|e| Failure::new(format!("answering HTTP {status}: {e}")))?;
        let after = match self.bearer {
            true => format!("HTTP {status}"),
            false => format!("HTTP {status} listing only {listed}"),
        };
        let c = cx.wire.contract().clone();
        let ended = match c.exit_after_status(&who, status) {
            Some(want) => super::exit_owed(cx, want, &after).await?,
            None => format!("{after} owes no exit"),
        };
        pass(format!("dialed with {carried}; {ended}"))
    }

    /// The implementation listens: the suite's own upgrades get the declared refusal.
    async fn dial(&self, cx: &mut Ctx, door: (&str, &str, bool)) -> Result<Verdict, Miss> {
        let status = self.refused.refused;
        let hello = |subprotocols: Vec<String>, auth: Option<String>| Hello {
            path: door.1.to_string(),
            subprotocols,
            authorization: auth,
        };
        let own = cx.token.as_ref().map(|t| format!("Bearer {t}"));
        if !self.bearer {
            let auth = own.filter(|_| self.token_wanted);
            let offer = self.foreign();
            let what = format!("offering only {offer}");
            let probe = hello(vec![offer.clone()], auth);
            let r = refused(cx, door, (&probe, &what), status).await?;
            let listed: Vec<String> = r
                .headers
                .iter()
                .filter(|(h, _)| h.eq_ignore_ascii_case("Sec-WebSocket-Protocol"))
                .flat_map(|(_, v)| v.split(',').map(|p| p.trim().to_string()))
                .collect();
            if !listed.iter().any(|p| self.subprotocols.contains(p)) {
                return Err(Miss::Rule(
                    Failure::new(format!(
                        "HTTP {status} does not list [{}] in Sec-WebSocket-Protocol",
                        self.subprotocols.join(", ")
                    ))
                    .with("its Sec-WebSocket-Protocol", listed.join(", ").as_bytes()),
                ));
            }
            return Ok(Verdict::Pass(format!(
                "an offer of only {offer} got HTTP {status} listing [{}]",
                listed.join(", ")
            )));
        }
        let wrong = format!("Bearer {}", fresh("wrong"));
        for (what, auth) in [
            ("without Authorization", None),
            ("with a wrong Bearer token", Some(wrong)),
        ] {
            let probe = hello(self.subprotocols.clone(), auth);
            refused(cx, door, (&probe, what), status).await?;
        }
        let Some(own) = own else {
            return Ok(Verdict::Pass(format!(
                "HTTP {status} without a token and with a wrong one (the session's own token is unknown: --param token=…)"
            )));
        };
        let probe = hello(self.subprotocols.clone(), Some(own));
        match cx.knock(door, &probe).await.map_err(Miss::Reach)? {
            Ok(mut io) => {
                let _ = io.send(Msg::Close(None)).await;
                Ok(Verdict::Pass(format!(
                    "HTTP {status} without a token and with a wrong one; 101 with the session's own"
                )))
            }
            Err(r) => Err(Miss::Rule(
                Failure::new(format!(
                    "an upgrade with the session's own token got HTTP {}: the refusals above prove nothing",
                    r.status
                ))
                .with("response body", &r.body),
            )),
        }
    }
}

/// Dial with `hello` (an upgrade `what`), which must be refused with `status`.
async fn refused(
    cx: &mut Ctx,
    door: (&str, &str, bool),
    (hello, what): (&Hello, &str),
    status: u16,
) -> Result<HttpRefusal, Miss> {
    match cx.knock(door, hello).await.map_err(Miss::Reach)? {
        Ok(mut io) => {
            // What it sent first shows the session it must not have opened.
            let first = tokio::time::timeout(FIRST, io.next()).await;
            let mut f = Failure::new(format!(
                "the {} accepted an upgrade {what} (101); the contract says HTTP {status}",
                cx.other
            ));
            if let Ok(Some(Ok(Msg::Text(t)))) = first {
                f = f.with("its first message", &t);
            }
            Err(Miss::Rule(f))
        }
        Err(r) if r.status == status => Ok(r),
        Err(r) => Err(Miss::Rule(
            Failure::new(format!(
                "an upgrade {what} got HTTP {}; the contract says {status}",
                r.status
            ))
            .with("response body", &r.body),
        )),
    }
}
