//! Request-id rules, read one way: whether a request id keeps a party's `ids` rules (prefix,
//! start, increasing, gapless, unique) after what that party sent before, the number an id
//! carries, and the id that carries a number. The proxy's policy engine judges requests with
//! [`IdRules::admit`]; an SDK issues and checks ids with [`IdCounter`], and the generated SDKs'
//! rule vectors are computed from it.

use std::collections::HashSet;

use serde_json::Value;

use crate::model::IdRules;

/// Ids an [`IdCounter`] remembers for the `unique` rule; past it, only the increasing rule
/// catches a reuse. A memory guard, not a protocol number (the engine keeps the same bound).
pub const MAX_REMEMBERED: usize = 65_536;

/// A rule an id breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdBreak {
    /// The rule: `ids.prefix`, `ids.reuse` or `ids.gap`.
    pub rule: &'static str,
    /// Why, in words (`skips 3`).
    pub why: String,
    /// After a gap, the number the sender's count continues from, so one gap is reported once.
    pub resync: Option<i128>,
}

fn broke(rule: &'static str, why: String) -> IdBreak {
    IdBreak {
        rule,
        why,
        resync: None,
    }
}

/// The number an id carries: the integer, or a string's digits after `prefix` (digits only,
/// without leading zeros: `c:01` is not `c:1`).
pub fn number(id: &Value, prefix: Option<&str>) -> Option<i128> {
    match id {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => {
            let d = s.strip_prefix(prefix.unwrap_or(""))?;
            let canonical = d == "0" || (!d.is_empty() && !d.starts_with('0'));
            let digits = canonical && d.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| d.parse().ok()).flatten()
        }
        _ => None,
    }
}

impl IdRules {
    /// Whether request id `id` keeps these rules, given the last number the party used and
    /// whether an id (as JSON text) was `used` before: its number, or the rule it breaks.
    pub fn admit(
        &self,
        last: Option<i128>,
        used: impl Fn(&str) -> bool,
        id: &Value,
    ) -> Result<Option<i128>, IdBreak> {
        let n = number(id, self.prefix.as_deref());
        if let Some(p) = &self.prefix
            && !(id.as_str().is_some_and(|s| s.starts_with(p.as_str())) && n.is_some())
        {
            return Err(broke("ids.prefix", format!("does not have the form {p}N")));
        }
        if self.unique && used(&id.to_string()) {
            return Err(broke("ids.reuse", "was used before".into()));
        }
        let (Some(n), Some(expected)) = (n, last.map(|l| l + 1).or(self.start.map(i128::from)))
        else {
            return Ok(n);
        };
        if self.increasing && n < expected {
            let why = format!("repeats or decreases (next is {expected})");
            return Err(broke("ids.reuse", why));
        }
        if self.gapless && n > expected {
            return Err(IdBreak {
                rule: "ids.gap",
                why: format!("skips {expected}"),
                resync: Some(n),
            });
        }
        Ok(Some(n))
    }

    /// The id that carries number `n`: `prefix` and the digits for a prefixed party, else the
    /// integer.
    pub fn id_for(&self, n: i128) -> Value {
        match &self.prefix {
            Some(p) => Value::String(format!("{p}{n}")),
            None => serde_json::Number::from_i128(n).map_or(Value::Null, Value::Number),
        }
    }

    /// The number a party's first request carries: `start`, or 1 where the contract leaves
    /// it open.
    pub fn first(&self) -> i128 {
        self.start.map_or(1, i128::from)
    }
}

/// One party's request ids as an SDK keeps them: issue the next id the rules allow, or check
/// the ids a peer sends. Not the proxy's bookkeeping, which also tracks pending requests.
#[derive(Debug, Default, Clone)]
pub struct IdCounter {
    last: Option<i128>,
    used: HashSet<String>,
}

impl IdCounter {
    /// A counter for a party that has sent nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next id to send under `rules`, recorded as used.
    pub fn next_id(&mut self, rules: &IdRules) -> Value {
        let n = self.last.map_or_else(|| rules.first(), |l| l + 1);
        self.last = Some(n);
        let id = rules.id_for(n);
        self.remember(&id);
        id
    }

    /// Check a request id a peer sent under `rules`, and record it when it keeps them. After
    /// a gap the count continues from the id that skipped.
    pub fn admit(&mut self, rules: &IdRules, id: &Value) -> Result<(), IdBreak> {
        match rules.admit(self.last, |k| self.used.contains(k), id) {
            Ok(n) => {
                self.last = n.max(self.last);
                self.remember(id);
                Ok(())
            }
            Err(b) => {
                if let Some(n) = b.resync {
                    self.last = Some(n);
                }
                Err(b)
            }
        }
    }

    fn remember(&mut self, id: &Value) {
        if self.used.len() < MAX_REMEMBERED {
            self.used.insert(id.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rukh_ids_are_issued_and_checked_as_the_contract_says() {
        let c = crate::builtin("rukh").expect("rukh");
        let (party, rules) = c
            .parties
            .iter()
            .find_map(|(n, p)| Some((n, p.ids.as_ref()?)))
            .expect("a party with id rules");
        let mut mine = IdCounter::new();
        let first = mine.next_id(rules);
        let second = mine.next_id(rules);
        let mut theirs = IdCounter::new();
        assert_eq!(theirs.admit(rules, &first), Ok(()), "{party}");
        assert_eq!(theirs.admit(rules, &second), Ok(()), "{party}");
        let again = theirs.admit(rules, &second).expect_err("a reused id");
        assert_eq!(again.rule, "ids.reuse");
        let odd = theirs.admit(rules, &json!(true)).map_err(|b| b.rule);
        assert_eq!(odd, Err("ids.prefix"), "rukh's ids carry a prefix");
    }
}
