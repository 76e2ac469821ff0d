//! The sequence diagram of a session, as Mermaid text or a self-contained SVG.
//!
//! Lifelines are the contract's parties in contract order (then any party the rows name
//! that the contract does not list). Each message is an arrow from its sender to its
//! receiver labelled with its method and id; a violation is marked with its class and
//! what enforcement did. A data channel's frames are folded into one arrow per key and
//! direction, at the first frame, together with the grants of the contract's `credit`
//! entry for that channel, so a stream of thousands of frames stays one line. Every name
//! and pointer comes from the contract: nothing here knows a protocol.
//!
//! [`arrows`] is the model both formats draw (and what tests count); [`render`] draws it.
//! Output is deterministic: arrows keep row order and folds are keyed in a `BTreeMap`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use contract::Contract;
use contract::model::CreditCounts;
use serde_json::Value;

use super::store::{Row, violation_class};

/// How a diagram is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiagramFormat {
    /// Mermaid `sequenceDiagram` text.
    Mermaid,
    /// A self-contained SVG image (no scripts, no external references).
    Svg,
}

/// One arrow of the diagram: a message, or a data stream's frames and grants folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrow {
    /// Sending party.
    pub from: String,
    /// Receiving party.
    pub to: String,
    /// What the arrow says: `method #id`, or the folded stream's totals.
    pub label: String,
    /// The violation class (`framing` for a broken framing), the first seen when folded.
    pub violation: Option<String>,
    /// What enforcement did (or would have), the first seen when folded.
    pub action: Option<String>,
    /// Rows folded into it: 1 for a plain message.
    pub folded: usize,
}

/// The sequence diagram of `session` (None: the session of the first row) drawn from `rows` (in order).
pub fn render(c: &Contract, rows: &[Row], session: Option<u64>, format: DiagramFormat) -> String {
    let arrows = arrows(c, rows, session);
    let lanes = lifelines(c, &arrows);
    match format {
        DiagramFormat::Mermaid => mermaid(&lanes, &arrows),
        DiagramFormat::Svg => svg(&lanes, &arrows),
    }
}

/// The arrows the diagram draws, in order (what tests count): also used by `render`.
pub fn arrows(c: &Contract, rows: &[Row], session: Option<u64>) -> Vec<Arrow> {
    let Some(s) = session.or_else(|| rows.first().map(|r| r.event.session)) else {
        return Vec::new();
    };
    let mut d = Drawing {
        c,
        arrows: Vec::new(),
        folds: BTreeMap::new(),
    };
    for r in rows.iter().filter(|r| r.event.session == s) {
        d.add(r);
    }
    d.finish()
}

/// A folded arrow's identity: data channel, key, sender of the data, its receiver.
/// Parties rather than `Dir` say the direction, because grants travel on another
/// channel (another connection) whose `Dir` need not match the data's.
type FoldKey = (String, u64, String, String);

/// What a folded arrow has counted so far.
#[derive(Debug, Default)]
struct Tally {
    frames: usize,
    bytes: u64,
    credit: u64,
    grants: usize,
    violations: usize,
}

/// The arrows drawn so far, and the folds still counting.
struct Drawing<'c> {
    c: &'c Contract,
    arrows: Vec<Arrow>,
    /// Each fold's arrow (an index into `arrows`) and its tally.
    folds: BTreeMap<FoldKey, (usize, Tally)>,
}

impl Drawing<'_> {
    fn add(&mut self, r: &Row) {
        let e = &r.event;
        if let Some((key, _seq)) = e.stream {
            let t = self.fold((e.channel.clone(), key, e.from.clone(), e.to.clone()), r);
            t.frames += 1;
            t.bytes = t.bytes.saturating_add(e.size as u64);
        } else if let Some((channel, key, amount)) = grant(self.c, r) {
            // The grant comes from the data's receiver: the data flows the other way.
            let t = self.fold((channel, key, e.to.clone(), e.from.clone()), r);
            t.grants += 1;
            t.credit = t.credit.saturating_add(amount);
        } else if let Some(label) = label(r) {
            self.arrows.push(Arrow {
                from: e.from.clone(),
                to: e.to.clone(),
                label,
                violation: violation_class(&e.verdict).map(str::to_string),
                action: e.action.clone(),
                folded: 1,
            });
        }
    }

    /// The tally of fold `k`, whose arrow is drawn here when `r` is its first row; `r`'s
    /// violation and action mark the arrow unless an earlier row already did.
    fn fold(&mut self, k: FoldKey, r: &Row) -> &mut Tally {
        let next = self.arrows.len();
        let (i, t) = self.folds.entry(k).or_insert_with_key(|k| {
            self.arrows.push(Arrow {
                from: k.2.clone(),
                to: k.3.clone(),
                label: String::new(),
                violation: None,
                action: None,
                folded: 0,
            });
            (next, Tally::default())
        });
        let a = &mut self.arrows[*i];
        a.folded += 1;
        if let Some(class) = violation_class(&r.event.verdict) {
            t.violations += 1;
            a.violation.get_or_insert_with(|| class.to_string());
        }
        if a.action.is_none() {
            a.action.clone_from(&r.event.action);
        }
        t
    }

    /// The arrows, folded ones labelled with their totals.
    fn finish(mut self) -> Vec<Arrow> {
        for ((channel, key, ..), (i, t)) in &self.folds {
            self.arrows[*i].label = fold_label(self.c, channel, *key, t);
        }
        self.arrows
    }
}

/// The credit a grant row gives: the data channel, the key and the amount, read at the
/// pointers of the first credit entry whose grant method it is. None when it is not a
/// grant, or the message was not kept or lacks them (it is then drawn as a message).
fn grant(c: &Contract, r: &Row) -> Option<(String, u64, u64)> {
    let method = r.event.method.as_deref()?;
    let msg = r.message.as_ref()?;
    let at = |p: &str| msg.pointer(p).and_then(Value::as_u64);
    (c.credit.values())
        .filter(|cr| cr.grant.method == method)
        .find_map(|cr| {
            Some((
                cr.channel.clone(),
                at(&cr.grant.key)?,
                at(&cr.grant.amount)?,
            ))
        })
}

/// A message's label: its method (else its kind, else `?`) and its id. None for a row
/// that is no message: no method, kind or stream and nothing wrong (connection events,
/// frames recorded undecoded). A row that is wrong is drawn even then, so a framing or
/// parse violation stays visible.
fn label(r: &Row) -> Option<String> {
    let e = &r.event;
    let name = match (&e.method, e.kind) {
        (Some(m), _) => m.clone(),
        (None, Some(k)) => k.name().to_string(),
        (None, None) if !e.verdict.is_ok() => "?".to_string(),
        (None, None) => return None,
    };
    Some(match &e.id {
        None | Some(Value::Null) => name,
        Some(Value::String(s)) => format!("{name} #{s}"),
        Some(v) => format!("{name} #{v}"),
    })
}

/// `data key K: N frames, B B`, then the credit granted in the unit the channel's credit
/// entry counts (when it has one), then the violations among the folded rows.
fn fold_label(c: &Contract, channel: &str, key: u64, t: &Tally) -> String {
    let mut s = format!(
        "data key {key}: {}, {} B",
        plural(t.frames, "frame"),
        t.bytes
    );
    if let Some(cr) = c.credit.values().find(|cr| cr.channel == channel) {
        let unit = match cr.counts {
            CreditCounts::PayloadBytes => "B",
            CreditCounts::Frames => "frames",
        };
        let grants = plural(t.grants, "grant");
        let _ = write!(s, ", credit {} {unit} ({grants})", t.credit);
    }
    if t.violations > 0 {
        let _ = write!(s, ", {}", plural(t.violations, "violation"));
    }
    s
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// The lifelines: the contract's parties that the arrows use, in contract order, then
/// the parties the contract does not list, in the order they first appear.
fn lifelines(c: &Contract, arrows: &[Arrow]) -> Vec<String> {
    let seen: Vec<&str> = (arrows.iter())
        .flat_map(|a| [a.from.as_str(), a.to.as_str()])
        .collect();
    let mut lanes: Vec<String> = (c.parties.keys())
        .filter(|p| seen.contains(&p.as_str()))
        .cloned()
        .collect();
    for p in seen {
        if !lanes.iter().any(|l| l == p) {
            lanes.push(p.to_string());
        }
    }
    lanes
}

/// The index of party `p`'s lifeline (every arrow's parties have one).
fn lane(lanes: &[String], p: &str) -> usize {
    lanes.iter().position(|l| l == p).unwrap_or(0)
}

/// A party's name as drawn: an empty one (a recording without route parties) as `?`.
fn shown(p: &str) -> &str {
    if p.is_empty() { "?" } else { p }
}

// ---------------------------------------------------------------- Mermaid

fn mermaid(lanes: &[String], arrows: &[Arrow]) -> String {
    let mut out = String::from("sequenceDiagram\n");
    for (i, p) in lanes.iter().enumerate() {
        let _ = writeln!(out, "    participant p{i} as {}", mermaid_text(shown(p)));
    }
    for a in arrows {
        let (from, to) = (lane(lanes, &a.from), lane(lanes, &a.to));
        let label = mermaid_text(&a.label);
        let _ = match &a.violation {
            None => writeln!(out, "    p{from}->>p{to}: {label}"),
            Some(class) => writeln!(
                out,
                "    p{from}-x p{to}: ✗ {}: {label}",
                mermaid_text(class)
            ),
        };
        if let Some(action) = &a.action {
            let _ = writeln!(out, "    Note over p{to}: {}", mermaid_text(action));
        }
    }
    out
}

/// Text Mermaid takes literally: `;` ends a statement and `#` starts an entity, so both
/// (and the `<`, `>` and `&` its HTML labels would read) become `#NN;` entities; a
/// newline (or any control character) would end the line or break it.
fn mermaid_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '#' | ';' | '<' | '>' | '&' => {
                let _ = write!(out, "#{};", u32::from(ch));
            }
            c if c.is_control() => out.push(' '),
            _ => out.push(ch),
        }
    }
    out
}

// ---------------------------------------------------------------- SVG

/// Height of the party names above the first arrow.
const TOP: i64 = 40;
/// Height of one arrow's row: label, line, action.
const ROW: i64 = 44;
/// Narrowest and widest distance between lifelines.
const COL_MIN: i64 = 160;
const COL_MAX: i64 = 640;
/// About the width of one character at the diagram's font size.
const CHAR: i64 = 7;
const RED: &str = "#c62828";
const INK: &str = "#333";

fn svg(lanes: &[String], arrows: &[Arrow]) -> String {
    let col = column(arrows);
    let width = col * (lanes.len().max(1) as i64);
    let height = TOP + ROW * arrows.len() as i64 + ROW / 2;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{width}\" height=\"{height}\" fill=\"#fff\"/>\n"
    );
    for (i, p) in lanes.iter().enumerate() {
        let x = col / 2 + col * i as i64;
        let _ = writeln!(
            out,
            "<g class=\"lifeline\"><text x=\"{x}\" y=\"20\" text-anchor=\"middle\" \
             font-weight=\"bold\">{}</text><line x1=\"{x}\" y1=\"28\" x2=\"{x}\" y2=\"{height}\" \
             stroke=\"#999\" stroke-dasharray=\"4 4\"/></g>",
            xml(shown(p))
        );
    }
    for (row, a) in arrows.iter().enumerate() {
        let x = |p: &str| col / 2 + col * lane(lanes, p) as i64;
        out.push_str(&svg_arrow(a, x(&a.from), x(&a.to), TOP + ROW * row as i64));
    }
    out.push_str("</svg>\n");
    out
}

/// The distance between lifelines: wide enough for the longest label, within bounds.
fn column(arrows: &[Arrow]) -> i64 {
    let longest = (arrows.iter())
        .map(|a| a.label.chars().count() + a.violation.as_ref().map_or(0, |v| v.len() + 4))
        .max()
        .unwrap_or(0);
    (longest as i64 * CHAR + 40).clamp(COL_MIN, COL_MAX)
}

/// One arrow in the row starting at `y`: its label, its line and head, and its action.
fn svg_arrow(a: &Arrow, x1: i64, x2: i64, y: i64) -> String {
    let (color, class) = match a.violation {
        Some(_) => (RED, " class=\"violation\""),
        None => (INK, ""),
    };
    let text = match &a.violation {
        Some(v) => format!("✗ {v}: {}", a.label),
        None => a.label.clone(),
    };
    let (tx, anchor) = if x1 == x2 {
        (x1 + 40, "start")
    } else {
        ((x1 + x2) / 2, "middle")
    };
    let mut g = format!(
        "<g class=\"arrow\"><text x=\"{tx}\" y=\"{}\" text-anchor=\"{anchor}\" fill=\"{color}\">{}</text>",
        y + 14,
        xml(&text)
    );
    g.push_str(&svg_line(x1, x2, y + 22, color, class));
    if let Some(action) = &a.action {
        let _ = write!(
            g,
            "<text class=\"action\" x=\"{tx}\" y=\"{}\" text-anchor=\"{anchor}\" font-size=\"10\" fill=\"{color}\">{}</text>",
            y + 36,
            xml(action)
        );
    }
    g.push_str("</g>\n");
    g
}

/// The line from `x1` to `x2` at height `y` with its head; a party's message to itself
/// loops out to the right and back.
fn svg_line(x1: i64, x2: i64, y: i64, color: &str, class: &str) -> String {
    let (path, tip, dir) = if x1 == x2 {
        (format!("M{x1} {} h30 v12 h-30", y - 6), (x1, y + 6), -1)
    } else {
        (format!("M{x1} {y} H{x2}"), (x2, y), (x2 - x1).signum())
    };
    let (tx, ty) = tip;
    let back = tx - 8 * dir;
    format!(
        "<path{class} d=\"{path}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\"/>\
         <polygon{class} points=\"{tx},{ty} {back},{} {back},{}\" fill=\"{color}\" stroke=\"{color}\"/>",
        ty - 4,
        ty + 4
    )
}

/// Text safe inside an XML element or attribute.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids the other control characters outright.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            _ => out.push(ch),
        }
    }
    out
}
