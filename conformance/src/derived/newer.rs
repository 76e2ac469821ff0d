//! The newer-version family, from each `versions` entry a message states for itself
//! (`carried`, xsession's `msgV`): after the handshake, one of the played party's messages
//! stating a version one above the highest the contract names gets the `newer` reaction
//! (xsession: dropped, no status), and the next message is served as usual where the
//! reaction keeps the channel.

use contract::Contract;
use contract::join_pointer as join;
use contract::model::{Carried, VersionInfo};
use serde_json::Value;

use super::probes::{self, Built, Reaction, action_name};
use super::{Session, cite, plan_of};
use crate::session::Ctx;
use crate::{BodyFuture, Failure};

/// One check: the entry's index and name, its title and its seed citation.
pub(super) struct Newer {
    pub index: usize,
    pub name: String,
    pub title: String,
    pub seed: String,
}

/// The entries whose version a carrier of `role`'s states as a number.
pub(super) fn applies(c: &Contract, carriers: &[Value]) -> Vec<Newer> {
    (c.versions.iter().enumerate())
        .filter_map(|(index, v)| {
            let cv = v.carried.as_ref()?;
            built(v, cv, carriers)?;
            let code = cv.newer.code.as_ref().map(|c| format!(" {c}"));
            let title = format!(
                "a message stating {} above the contract's gets `{}`{}",
                v.name,
                action_name(cv.newer.action),
                code.unwrap_or_default()
            );
            let at = join(
                "/versions",
                [index.to_string().as_str(), "carried", "newer"],
            );
            Some(Newer {
                index,
                name: v.name.clone(),
                title,
                seed: cite(at, &cv.newer.seed),
            })
        })
        .collect()
}

/// The first carrier stating `v` as a number, stating one above the highest named, as
/// a probe expecting the `newer` reaction; and the message.
fn built(v: &VersionInfo, cv: &Carried, carriers: &[Value]) -> Option<(Value, Built)> {
    let top = v.highest_number()?;
    let m = carriers
        .iter()
        .find(|m| m.pointer(&cv.pointer).is_some_and(Value::is_u64))?;
    let mut newer = m.clone();
    contract::set_pointer(&mut newer, &cv.pointer, Value::from(top.checked_add(1)?));
    let reaction = Reaction::Rule {
        action: cv.newer.action,
        code: cv.newer.code.clone(),
    };
    let bytes = newer.to_string().into_bytes();
    Some((newer, Built::expecting(bytes, vec![Value::Null], reaction)))
}

pub(super) fn body(cx: &mut Ctx) -> BodyFuture<'_> {
    Box::pin(async move {
        let index: usize = (cx.subject.as_deref().and_then(|s| s.parse().ok()))
            .ok_or_else(|| Failure::new("suite bug: no version entry"))?;
        let c = cx.wire.contract().clone();
        let v = c.versions.get(index);
        let cv = v.and_then(|v| v.carried.as_ref());
        let (Some(v), Some(cv)) = (v, cv) else {
            return Err(Failure::new("suite bug: no carried version"));
        };
        let plan = plan_of(cx);
        let callable = plan.staying(&c);
        let mut s = match Session::start(cx, &plan).await {
            Ok(s) => s,
            Err(f) => return plan.unreached(f),
        };
        let carriers = s.carriers(cx, &callable);
        let (m, mut b) = built(v, cv, &carriers)
            .ok_or_else(|| Failure::new("suite bug: no carrier states the version"))?;
        if let Some(id) = s.shape.id(&m) {
            b.ids = vec![id.clone(), Value::Null];
            s.take_id();
        }
        // Only what the probe gets is this check's; the answers' content is the call checks'.
        s.judge_answers = false;
        s.remember(cx, &b.bytes);
        b.send(&mut s.peer).await?;
        let what = s
            .shape
            .say(&format!("a request stating a newer {}", v.name));
        probes::judged(s, cx, &b, &what, &callable).await
    })
}
