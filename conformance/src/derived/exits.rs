//! Exits owed after a close, for any contract whose close-code table `maps` its values
//! into an exit-code table of the implementation's party (the table's `party`):
//! - `exits.<table>`: on a fresh session taken through the handshake, the suite closes
//!   with each such code and the launched process must end with the exit the code maps to;
//! - [`owed`]: after any derived check whose session the implementation itself closed with
//!   such a code, its process must end with that exit too.
//!
//! Only a process the suite launches shows its exit; any other target skips.

use super::{Session, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, BodyFutureOf, Failure, other_party, pass, skip};
use contract::Contract;

/// The close-code tables whose values map exits of the party other than `role`, each with
/// its title and seed.
pub(super) fn applies(c: &Contract, role: &str) -> Vec<(String, String, String)> {
    let Some(other) = other_party(c, role) else {
        return Vec::new();
    };
    let owed = c.exits_after_close(other);
    let mut out: Vec<(String, String, String)> = Vec::new();
    for (table, _, exits, _) in &owed {
        if out.iter().any(|(t, _, _)| t == table) {
            continue;
        }
        let title = format!(
            "each close code of {table} that maps a {exits} value ends a fresh {other} process with that exit"
        );
        out.push((table.to_string(), title, c.codes[*table].seed.clone()));
    }
    out
}

/// Whether a session the implementation closed owes an exit at all (the end hook applies).
pub(super) fn any_owed(c: &Contract, role: &str) -> bool {
    other_party(c, role).is_some_and(|o| !c.exits_after_close(o).is_empty())
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        if !cx.launches() {
            return skip("a process's exit is seen only where the suite launches it");
        }
        let c = cx.wire.contract().clone();
        let table = cx.subject.clone().unwrap_or_default();
        let plan = plan_of(cx);
        let mut seen = Vec::new();
        for (_, code, _, want) in c
            .exits_after_close(&cx.other)
            .into_iter()
            .filter(|e| e.0 == table)
        {
            let mut s = Session::open(cx).await?;
            if let Err(f) = s.handshake(cx, &plan).await {
                return plan.unreached(f);
            }
            if !s.peer.carries_messages() {
                return skip("the session's transport carries no close code (a WebSocket does)");
            }
            s.peer.close_with(code, "conformance").await?;
            drop(s);
            seen.push(exit_owed(cx, want, &format!("close {code}")).await?);
        }
        pass(seen.join("; "))
    })
}

/// The end hook of a derived check whose session the implementation closed: the exit its
/// own close code maps to, where one does.
pub(super) fn owed(cx: &mut Ctx) -> BodyFutureOf<'_, String> {
    Box::pin(async move {
        let Some(code) = cx.closed_code else {
            return Ok("no close frame, no exit owed".into());
        };
        let c = cx.wire.contract().clone();
        let owed = c.exits_after_close(&cx.other);
        let Some((_, _, _, want)) = owed.into_iter().find(|e| e.1 == code) else {
            return Ok(format!("close {code} maps no exit"));
        };
        exit_owed(cx, want, &format!("its close {code}")).await
    })
}

/// What the launched process's exit shows after `after`; a target the suite did not launch
/// cannot show it.
pub(crate) async fn exit_owed(cx: &mut Ctx, want: i32, after: &str) -> Result<String, Failure> {
    // What the suite holds for the session goes first (rukh's handoff, the process of the
    // party it plays): the implementation's end may wait for it.
    cx.release();
    let wait = cx.opts.deadline;
    let who = cx.other.clone();
    match cx.child_exit(wait).await {
        None => Ok(format!(
            "exit after {after} not observable (target not launched)"
        )),
        Some(None) => Err(Failure::new(format!(
            "the {who} was still running {wait:?} after {after} (it must exit {want})"
        ))),
        Some(Some(code)) if code == want => Ok(format!("exited {code} after {after}")),
        Some(Some(code)) => Err(Failure::new(format!(
            "the {who} exited {code} after {after}; the contract says {want}"
        ))),
    }
}
