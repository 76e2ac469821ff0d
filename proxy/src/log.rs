//! The live view: one line per message, pretty for people or JSON for jq.

use std::io::{IsTerminal, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::inspect::{Event, Verdict};
use crate::lines::Lines;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One coloured line per message.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// One `--filter KEY=VALUE` condition on the live view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    key: FilterKey,
    value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterKey {
    Method,
    Kind,
    Dir,
    From,
    Verdict,
    Channel,
    Route,
}

impl std::str::FromStr for Filter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("filter {s:?} is not KEY=VALUE"))?;
        let key = match k {
            "method" => FilterKey::Method,
            "kind" => FilterKey::Kind,
            "dir" | "direction" => FilterKey::Dir,
            "from" => FilterKey::From,
            "verdict" => FilterKey::Verdict,
            "channel" => FilterKey::Channel,
            "route" => FilterKey::Route,
            other => {
                return Err(format!(
                    "unknown filter key {other:?} (method, kind, dir, from, verdict, channel, route)"
                ));
            }
        };
        Ok(Filter {
            key,
            value: v.to_string(),
        })
    }
}

impl Filter {
    /// Whether `e` passes this condition. `verdict` matches `ok`, `violation`, `framing`
    /// or a violation class such as `wrong-direction`.
    pub fn matches(&self, e: &Event) -> bool {
        match self.key {
            FilterKey::Method => e.method.as_deref() == Some(self.value.as_str()),
            FilterKey::Kind => e
                .kind
                .is_some_and(|k| format!("{k:?}").eq_ignore_ascii_case(&self.value)),
            FilterKey::Dir => matches!(
                (e.dir, self.value.as_str()),
                (crate::inspect::Dir::Up, "up") | (crate::inspect::Dir::Down, "down")
            ),
            FilterKey::From => e.from == self.value,
            FilterKey::Channel => e.channel == self.value,
            FilterKey::Route => e.route == self.value,
            FilterKey::Verdict => match &e.verdict {
                Verdict::Ok => self.value == "ok",
                Verdict::Violation { class, .. } => {
                    self.value == "violation" || self.value == *class
                }
                Verdict::Framing { .. } => self.value == "framing",
            },
        }
    }
}

/// Writes events to standard output, one line each, never interleaved; lines are
/// written in batches off the caller's thread ([`Lines`]).
pub struct Logger {
    format: Format,
    color: bool,
    filters: Vec<Filter>,
    out: Lines,
}

impl Logger {
    /// A logger in `format` showing events that pass every filter; colour only on a terminal.
    pub fn new(format: Format, filters: Vec<Filter>) -> Self {
        Self::writing_to(std::io::stdout(), format, filters)
    }

    /// The same on standard error: a stand-in's stdout belongs to the program it stands in for.
    pub fn on_stderr(format: Format, filters: Vec<Filter>) -> Self {
        Self::writing_to(std::io::stderr(), format, filters)
    }

    fn writing_to(
        out: impl Write + IsTerminal + Send + 'static,
        format: Format,
        filters: Vec<Filter>,
    ) -> Self {
        Logger {
            format,
            color: out.is_terminal(),
            filters,
            out: Lines::new(Box::new(out)),
        }
    }

    /// Write every line logged so far (they are otherwise written within
    /// [`crate::lines::FLUSH_EVERY`], and when the logger is dropped).
    pub fn flush(&self) {
        self.out.flush();
    }

    fn now() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    }

    /// One whole line; the newline is added. Lines are never split or interleaved:
    /// a stand-in's child shares our stderr.
    fn line(&self, s: &str) {
        self.out.push(|b| {
            b.extend_from_slice(s.as_bytes());
            Ok::<(), ()>(())
        });
    }

    /// Log one inspection event (if it passes the filters), stamped now.
    pub fn event(&self, e: &Event) {
        self.event_at(e, Self::now());
    }

    /// Log one event stamped with `t` (seconds since the epoch), as `show` does for recordings.
    pub fn event_at(&self, e: &Event, t: f64) {
        if !self.filters.iter().all(|f| f.matches(e)) {
            return;
        }
        match self.format {
            // Straight from the event into the batch: no `Value` tree and no buffer of
            // its own per line. The event's object gets `time` as its last member
            // (what `#[serde(flatten)]` would write, without serde's map detour).
            Format::Json => self.out.push(|b| {
                serde_json::to_writer(&mut *b, e)?;
                if b.pop() != Some(b'}') {
                    return Err(serde::ser::Error::custom("an event is a JSON object"));
                }
                b.extend_from_slice(b",\"time\":");
                serde_json::to_writer(&mut *b, &t)?;
                b.push(b'}');
                Ok::<(), serde_json::Error>(())
            }),
            Format::Pretty => {
                let verdict = e.verdict.text();
                let color = if matches!(e.verdict, Verdict::Ok) {
                    "32"
                } else {
                    "31"
                };
                let secs = t as u64;
                let what = match (&e.stream, &e.method) {
                    (Some((stream, seq)), _) => format!("stream={stream} seq={seq}"),
                    (None, m) => m.as_deref().unwrap_or("-").to_string(),
                };
                let mut line = format!(
                    "{:02}:{:02}:{:02}.{:03} {}#{} {}→{} {} {} {} {}B {} {} {}",
                    (secs / 3600) % 24,
                    (secs / 60) % 60,
                    secs % 60,
                    ((t.fract()) * 1000.0) as u32,
                    e.route,
                    e.conn,
                    e.from,
                    e.to,
                    e.kind
                        .map(|k| k.name().to_string())
                        .unwrap_or_else(|| if e.stream.is_some() {
                            "data".into()
                        } else {
                            "?".into()
                        }),
                    what,
                    e.id.as_ref()
                        .map(|i| i.to_string())
                        .unwrap_or_else(|| "-".into()),
                    e.size,
                    e.latency
                        .map(|l| format!("{:.3}ms", l.as_secs_f64() * 1000.0))
                        .unwrap_or_else(|| "-".into()),
                    e.trace.as_deref().unwrap_or("-"),
                    verdict
                );
                if let Some(code) = &e.error {
                    line.push_str(&format!(" error={code}"));
                }
                if let Some(a) = &e.action {
                    line.push_str(&format!(" [{a}]"));
                }
                if self.color {
                    self.line(&format!("\x1b[{color}m{line}\x1b[0m"));
                } else {
                    self.line(&line);
                }
            }
        }
    }

    /// Log a route-level problem (connect failure and the like).
    pub fn note(&self, route: &str, msg: &str) {
        match self.format {
            Format::Json => self.line(
                &serde_json::json!({"time": Self::now(), "route": route, "note": msg}).to_string(),
            ),
            Format::Pretty => self.line(&format!("{route}: {msg}")),
        }
    }
}
