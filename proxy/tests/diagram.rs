//! Sequence diagrams (`web::diagram`): which arrows a session draws, how a data channel's
//! frames and its credit grants fold into one arrow per key and direction, how violations
//! and actions are marked, the lifeline order, and the Mermaid and SVG drawings. Rows are
//! built by hand as the inspector reports them, against real contracts: pipes.json (which
//! nothing built in knows) and the built-in kernel. Where a message keeps its method, id
//! and credit fields is read from the contract's binding and credit entry.

use std::path::Path;

use contract::Contract;
use contract::model::{Binding, Kind};
use contract_proxy::inspect::{Dir, Event, Verdict};
use contract_proxy::web::diagram::{self, Arrow, DiagramFormat};
use contract_proxy::web::store::Row;
use serde_json::{Value, json};

fn pipes() -> Contract {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipes.json");
    contract::load(&path).expect("pipes.json loads")
}

fn kernel() -> Contract {
    contract::builtin("kernel").expect("kernel is built in")
}

/// Where a row travels: session, channel, sender, receiver.
#[derive(Clone, Copy)]
struct On(u64, &'static str, &'static str, &'static str);

/// What the inspector says of a frame on `on` of `size` bytes, before decoding.
fn event(on: On, size: usize) -> Event {
    let On(session, channel, from, to) = on;
    // The diagram goes by parties, not by direction.
    Event::bare(
        "r",
        session,
        session,
        channel,
        Dir::Up,
        (from.into(), to.into()),
        size,
    )
}

fn violation(class: &'static str, reason: &str) -> Verdict {
    Verdict::Violation {
        class,
        code: None,
        seed: None,
        reason: reason.into(),
    }
}

/// A run's rows, numbered as they are added.
struct Rows<'c> {
    c: &'c Contract,
    rows: Vec<Row>,
}

impl<'c> Rows<'c> {
    fn new(c: &'c Contract) -> Self {
        Rows {
            c,
            rows: Vec::new(),
        }
    }

    fn add(&mut self, e: Event, message: Option<Value>) -> &mut Row {
        let raw = message.as_ref().map(Value::to_string).unwrap_or_default();
        let n = self.rows.len() as u64;
        let t = 1_700_000_000.0 + n as f64;
        self.rows.push(Row::new(n, t, e, message, raw.as_bytes()));
        self.rows.last_mut().expect("just pushed")
    }

    /// A message with its method and id where the channel's binding keeps them, and
    /// `fields` (pointer, value) besides.
    fn msg(
        &mut self,
        on: On,
        kind: Kind,
        method: &str,
        id: &str,
        fields: &[(&str, Value)],
    ) -> &mut Row {
        let Some(Binding::Envelope {
            method: at_method,
            id: at_id,
            ..
        }) = &self.c.channels[on.1].binding
        else {
            panic!("{} is an envelope channel", on.1);
        };
        let mut m = json!({});
        contract::set_pointer(&mut m, at_method, json!(method));
        if let Some(at_id) = at_id {
            contract::set_pointer(&mut m, at_id, json!(id));
        }
        for (p, v) in fields {
            contract::set_pointer(&mut m, p, v.clone());
        }
        let mut e = event(on, m.to_string().len());
        e.kind = Some(kind);
        e.method = Some(method.into());
        e.id = Some(json!(id));
        self.add(e, Some(m))
    }

    /// A grant of the contract's credit entry: `amount` more for `key`.
    fn grant(&mut self, on: On, id: &str, key: u64, amount: u64) -> &mut Row {
        let c = self.c;
        let (_, cr) = c.credit.first().expect("a credit entry");
        let g = &cr.grant;
        let kind = c.methods[&g.method].kind;
        let fields = [
            (g.key.as_str(), json!(key)),
            (g.amount.as_str(), json!(amount)),
        ];
        self.msg(on, kind, &g.method, id, &fields)
    }

    /// A data frame of `size` payload bytes for `key`.
    fn frame(&mut self, on: On, key: u64, seq: u64, size: usize) -> &mut Row {
        let mut e = event(on, size);
        e.stream = Some((key, seq));
        e.method = Some("data".into());
        self.add(e, None)
    }
}

/// Session 1 of a pipes run, with a row of session 2 in the middle: a connection event,
/// an open, pipe 3's grants and frames, a grant for pipe 4 that never carries data, one
/// invalid open (flagged, with what enforcement would have done) and a shut.
fn pipes_rows(c: &Contract) -> Vec<Row> {
    let up = On(1, "ctl", "sender", "sink");
    let down = On(1, "ctl", "sink", "sender");
    let bulk = On(1, "bulk", "sender", "sink");
    let mut r = Rows::new(c);
    r.add(event(up, 0), None);
    r.msg(
        up,
        Kind::Notification,
        "pipe.open",
        "s-1",
        &[("/body/pipe", json!(3))],
    );
    r.grant(down, "k-1", 3, 100);
    r.frame(bulk, 3, 0, 40);
    r.frame(bulk, 3, 1, 40);
    let other = On(2, "ctl", "sender", "sink");
    r.msg(
        other,
        Kind::Notification,
        "pipe.open",
        "s-9",
        &[("/body/pipe", json!(9))],
    );
    r.grant(down, "k-2", 3, 60);
    r.grant(down, "k-3", 4, 30);
    r.frame(bulk, 3, 2, 40);
    let bad = r.msg(
        up,
        Kind::Notification,
        "pipe.open",
        "s-2",
        &[("/body/pipe", json!("x"))],
    );
    bad.event.verdict = violation("invalid-params", "/body/pipe: not an integer");
    bad.event.action = Some("would have: ignored".into());
    r.msg(
        down,
        Kind::Notification,
        "pipe.shut",
        "k-4",
        &[("/body/pipe", json!(3))],
    );
    r.rows
}

fn arrow(from: &str, to: &str, label: &str, folded: usize) -> Arrow {
    Arrow {
        from: from.into(),
        to: to.into(),
        label: label.into(),
        violation: None,
        action: None,
        folded,
    }
}

/// The lines of a Mermaid diagram that draw arrows.
fn mermaid_arrows(m: &str) -> Vec<&str> {
    m.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('p') && (l.contains("->>") || l.contains("-x ")))
        .collect()
}

#[test]
fn pipes_session_folds_frames_and_grants() {
    let c = pipes();
    let got = diagram::arrows(&c, &pipes_rows(&c), None);
    let bad = Arrow {
        violation: Some("invalid-params".into()),
        action: Some("would have: ignored".into()),
        ..arrow("sender", "sink", "pipe.open #s-2", 1)
    };
    let want = vec![
        arrow("sender", "sink", "pipe.open #s-1", 1),
        // Placed at the first grant, which comes before the first frame: 3 frames + 2 grants.
        arrow(
            "sender",
            "sink",
            "data key 3: 3 frames, 120 B, credit 160 B (2 grants)",
            5,
        ),
        // A grant for a pipe that never carries data still gets its arrow, sender to sink.
        arrow(
            "sender",
            "sink",
            "data key 4: 0 frames, 0 B, credit 30 B (1 grant)",
            1,
        ),
        bad,
        arrow("sink", "sender", "pipe.shut #k-4", 1),
    ];
    assert_eq!(got, want);
}

#[test]
fn pipes_drawings_count_the_same_arrows() {
    let c = pipes();
    let rows = pipes_rows(&c);
    let n = diagram::arrows(&c, &rows, Some(1)).len();
    let svg = diagram::render(&c, &rows, Some(1), DiagramFormat::Svg);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" "));
    assert_eq!(svg.matches("<g class=\"arrow\"").count(), n);
    assert_eq!(
        svg.matches("class=\"violation\"").count(),
        2,
        "its line and head"
    );
    assert!(svg.contains("stroke=\"#c62828\""));
    assert!(svg.contains("✗ invalid-params: pipe.open #s-2"));
    assert!(!svg.contains("<script") && !svg.contains("href"));
    let m = diagram::render(&c, &rows, Some(1), DiagramFormat::Mermaid);
    assert_eq!(mermaid_arrows(&m).len(), n);
    assert!(m.starts_with("sequenceDiagram\n"));
    assert!(m.contains("participant p0 as sender\n    participant p1 as sink\n"));
    assert!(m.contains(
        "    p0-x p1: ✗ invalid-params: pipe.open #35;s-2\n    Note over p1: would have: ignored\n"
    ));
}

#[test]
fn other_session_is_drawn_alone() {
    let c = pipes();
    let got = diagram::arrows(&c, &pipes_rows(&c), Some(2));
    assert_eq!(got, vec![arrow("sender", "sink", "pipe.open #s-9", 1)]);
    assert!(diagram::arrows(&c, &pipes_rows(&c), Some(3)).is_empty());
    assert!(diagram::arrows(&c, &[], None).is_empty());
    let svg = diagram::render(&c, &[], None, DiagramFormat::Svg);
    assert_eq!(svg.matches("<g class=\"arrow\"").count(), 0);
}

#[test]
fn kernel_stream_with_credit_and_a_gap() {
    let c = kernel();
    let to_core = On(7, "control", "shell", "core");
    let to_shell = On(7, "control", "core", "shell");
    let data = On(7, "data", "core", "shell");
    let mut r = Rows::new(&c);
    r.msg(to_core, Kind::Request, "hello", "s-0001", &[]);
    r.msg(to_shell, Kind::Response, "hello", "s-0001", &[]);
    r.msg(
        to_shell,
        Kind::Event,
        "stream.open",
        "c-0001",
        &[("/payload/stream_id", json!(11))],
    );
    r.grant(to_core, "s-0002", 11, 65536);
    r.frame(data, 11, 0, 1000);
    r.frame(data, 11, 1, 1000);
    let gap = r.frame(data, 11, 3, 1000);
    gap.event.verdict = violation("sequence", "stream 11: seq 3, expected 2");
    r.grant(to_core, "s-0003", 11, 4096);
    r.msg(
        to_shell,
        Kind::Event,
        "stream.close",
        "c-0002",
        &[("/stream_id", json!(11))],
    );
    let got = diagram::arrows(&c, &r.rows, None);
    let stream = Arrow {
        violation: Some("sequence".into()),
        ..arrow(
            "core",
            "shell",
            "data key 11: 3 frames, 3000 B, credit 69632 B (2 grants), 1 violation",
            5,
        )
    };
    let want = vec![
        arrow("shell", "core", "hello #s-0001", 1),
        arrow("core", "shell", "hello #s-0001", 1),
        arrow("core", "shell", "stream.open #c-0001", 1),
        stream,
        arrow("core", "shell", "stream.close #c-0002", 1),
    ];
    assert_eq!(got, want);
    // The contract lists shell before core, whoever speaks first.
    let m = diagram::render(&c, &r.rows, None, DiagramFormat::Mermaid);
    assert!(m.contains("participant p0 as shell\n    participant p1 as core\n"));
    assert!(m.contains("    p1-x p0: ✗ sequence: data key 11: 3 frames"));
}

/// Parties the contract does not list come after its own; a reply whose request was not
/// seen is labelled by its kind, an undecodable frame by `?` (kept: it is a violation),
/// and a connection event is not drawn.
#[test]
fn lifelines_and_labels_without_a_method() {
    let c = kernel();
    let mut r = Rows::new(&c);
    r.add(event(On(1, "control", "spy", "core"), 0), None);
    let reply = r.add(event(On(1, "control", "spy", "core"), 20), None);
    reply.event.kind = Some(Kind::Response);
    reply.event.id = Some(json!(5));
    let broken = r.add(event(On(1, "control", "core", "shell"), 0), None);
    broken.event.verdict = Verdict::Framing {
        reason: "length beyond the limit".into(),
    };
    r.msg(
        On(1, "control", "shell", "core"),
        Kind::Event,
        "ping",
        "s-1",
        &[],
    );
    let got = diagram::arrows(&c, &r.rows, None);
    let framing = Arrow {
        violation: Some("framing".into()),
        ..arrow("core", "shell", "?", 1)
    };
    let want = vec![
        arrow("spy", "core", "response #5", 1),
        framing,
        arrow("shell", "core", "ping #s-1", 1),
    ];
    assert_eq!(got, want);
    let m = diagram::render(&c, &r.rows, None, DiagramFormat::Mermaid);
    let parties: Vec<&str> = (m.lines())
        .filter_map(|l| l.trim().strip_prefix("participant "))
        .collect();
    assert_eq!(parties, ["p0 as shell", "p1 as core", "p2 as spy"]);
}

#[test]
fn rendering_is_deterministic() {
    let c = pipes();
    let rows = pipes_rows(&c);
    for format in [DiagramFormat::Mermaid, DiagramFormat::Svg] {
        let once = diagram::render(&c, &rows, None, format);
        assert_eq!(once, diagram::render(&c, &rows, None, format));
    }
    insta::assert_snapshot!(
        "pipes_mermaid",
        diagram::render(&c, &rows, None, DiagramFormat::Mermaid)
    );
}

#[test]
fn svg_escapes_xml_and_mermaid_escapes_its_own() {
    let c = pipes();
    let mut r = Rows::new(&c);
    let on = On(1, "ctl", "sender", "sink");
    let odd = r.msg(on, Kind::Notification, "a<&>b;c", "x\"y", &[]);
    odd.event.action = Some("line\nbreak".into());
    let svg = diagram::render(&c, &r.rows, None, DiagramFormat::Svg);
    assert!(svg.contains("a&lt;&amp;&gt;b;c #x&quot;y"), "{svg}");
    assert!(!svg.contains("a<&>b"));
    let m = diagram::render(&c, &r.rows, None, DiagramFormat::Mermaid);
    assert!(
        m.contains("    p0->>p1: a#60;#38;#62;b#59;c #35;x\"y\n"),
        "{m}"
    );
    assert!(m.contains("    Note over p1: line break\n"), "{m}");
}
