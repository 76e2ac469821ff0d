//! What a conformance run reports: one result per check (pass, fail with the
//! bytes that showed it, skip with its reason), the summary line, the exit code
//! and the JUnit XML file (written with `quick-junit`, the serializer nextest uses).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, TestCase, TestCaseStatus, TestSuite};

/// Bytes of evidence shown as hex.
const HEX_MAX: usize = 64;
/// Characters of evidence shown as text.
const TEXT_MAX: usize = 200;
/// Evidence items kept per failure.
const EVIDENCE_MAX: usize = 8;

/// How a check body ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Passed; what was seen, in one line.
    Pass(String),
    /// Could not be judged; why.
    Skip(String),
}

/// Bytes that showed a failure, with what they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// What these bytes are (`control frame from core`, `data frame 3 of stream 12`…).
    pub label: String,
    /// The exact bytes, as they crossed the wire (frame prefix included where there is one).
    pub bytes: Vec<u8>,
}

impl Evidence {
    /// Hex of the first bytes, grouped by 4.
    pub fn hex(&self) -> String {
        let mut s = String::new();
        for (i, b) in self.bytes.iter().take(HEX_MAX).enumerate() {
            if i > 0 && i % 4 == 0 {
                s.push(' ');
            }
            s.push_str(&format!("{b:02x}"));
        }
        if self.bytes.len() > HEX_MAX {
            format!("{s} …")
        } else {
            s
        }
    }

    /// The bytes as text (lossy UTF-8, control characters escaped), truncated.
    pub fn text(&self) -> String {
        let lossy = String::from_utf8_lossy(&self.bytes);
        let mut out = String::new();
        for (n, ch) in lossy.chars().enumerate() {
            if n >= TEXT_MAX {
                out.push('…');
                break;
            }
            if ch == char::REPLACEMENT_CHARACTER {
                out.push('.');
            } else if ch.is_control() {
                out.push_str(&format!("\\x{:02x}", ch as u32 & 0xff));
            } else {
                out.push(ch);
            }
        }
        out
    }
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} ({} bytes):", self.label, self.bytes.len())?;
        writeln!(f, "  hex:  {}", self.hex())?;
        write!(f, "  text: {}", self.text())
    }
}

/// Why a check failed, and what showed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong, in one line.
    pub why: String,
    /// The bytes that showed it (at most a few items).
    pub evidence: Vec<Evidence>,
    /// Context collected while the check ran (child exits, skipped steps).
    pub notes: Vec<String>,
    /// The check that reports this failure, when it is another one (a session that did
    /// not open is the handshake check's): this one skips, naming it, so one broken rule
    /// fails one check.
    pub reported_by: Option<String>,
}

impl Failure {
    /// A failure without bytes (a timeout, a refused connection).
    pub fn new(why: impl Into<String>) -> Self {
        Failure {
            why: why.into(),
            evidence: Vec::new(),
            notes: Vec::new(),
            reported_by: None,
        }
    }

    /// This failure is `check`'s to report (see [`Failure::reported_by`]).
    pub fn reported_by(mut self, check: impl Into<String>) -> Self {
        self.reported_by = Some(check.into());
        self
    }

    /// Add a note that explains it.
    pub fn with_note(mut self, note: String) -> Self {
        self.notes.push(note);
        self
    }

    /// Add bytes that show it.
    pub fn with(mut self, label: impl Into<String>, bytes: &[u8]) -> Self {
        if self.evidence.len() < EVIDENCE_MAX {
            self.evidence.push(Evidence {
                label: label.into(),
                bytes: bytes.to_vec(),
            });
        }
        self
    }

    /// Put what the suite sent first: a probe's failure reads from cause to effect.
    pub fn sent(mut self, bytes: &[u8]) -> Self {
        self.evidence.insert(
            0,
            Evidence {
                label: "the suite sent".into(),
                bytes: bytes.to_vec(),
            },
        );
        self.evidence.truncate(EVIDENCE_MAX);
        self
    }
}

/// A value the suite needs and the contract does not hold fails the check, naming it.
impl From<contract::AccessError> for Failure {
    fn from(e: contract::AccessError) -> Self {
        Failure::new(e.to_string())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.why)?;
        for e in &self.evidence {
            write!(f, "\n{e}")?;
        }
        for n in &self.notes {
            write!(f, "\nnote: {n}")?;
        }
        Ok(())
    }
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Pass(String),
    /// Failed.
    Fail(Failure),
    /// Skipped, with the reason.
    Skip(String),
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Check id.
    pub id: String,
    /// Check title.
    pub title: String,
    /// Seed section.
    pub seed: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Wall time.
    pub elapsed: Duration,
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.outcome {
            Outcome::Pass(_) => "PASS",
            Outcome::Fail(_) => "FAIL",
            Outcome::Skip(_) => "SKIP",
        };
        write!(
            f,
            "{tag} {}  {}  [{}]  ({:.2} s)",
            self.id,
            self.title,
            self.seed,
            self.elapsed.as_secs_f64()
        )?;
        match &self.outcome {
            Outcome::Pass(d) => write!(f, "\n     {d}"),
            Outcome::Skip(d) => write!(f, "\n     skipped: {d}"),
            Outcome::Fail(fail) => {
                for line in fail.to_string().lines() {
                    write!(f, "\n     {line}")?;
                }
                Ok(())
            }
        }
    }
}

/// The results of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Contract name.
    pub contract: String,
    /// Role the suite played.
    pub role: String,
    /// The target, as given.
    pub target: String,
    /// Results in run order.
    pub results: Vec<CheckResult>,
    /// Whether skips count as failures.
    pub strict: bool,
}

impl Report {
    /// An empty report.
    pub fn new(contract: &str, role: &str, target: &str) -> Self {
        Report {
            contract: contract.to_string(),
            role: role.to_string(),
            target: target.to_string(),
            results: Vec::new(),
            strict: false,
        }
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Checks that passed.
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass(_)))
    }

    /// Checks that failed.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    /// Checks that were skipped.
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skip(_)))
    }

    /// 0 when no check failed (and, with `strict`, none was skipped), else 1.
    pub fn exit_code(&self) -> i32 {
        if self.failed() > 0 || (self.strict && self.skipped() > 0) {
            1
        } else {
            0
        }
    }

    /// The closing line, with the time the checks took (they run one after another).
    pub fn summary(&self) -> String {
        let took: Duration = self.results.iter().map(|r| r.elapsed).sum();
        format!(
            "conformance {} as {} against {}: {} checks: {} passed, {} failed, {} skipped, in {:.1} s",
            self.contract,
            self.role,
            self.target,
            self.results.len(),
            self.passed(),
            self.failed(),
            self.skipped(),
            took.as_secs_f64()
        )
    }

    /// The JUnit XML document: one testsuite (`<contract>.<role>`), one testcase per check.
    pub fn junit(&self) -> Result<String, quick_junit::SerializeError> {
        let suite_name = format!("{}.{}", self.contract, self.role);
        let mut report =
            quick_junit::Report::new(format!("contract-proxy conformance {suite_name}"));
        let mut suite = TestSuite::new(suite_name.clone());
        suite.add_property(Property::new("target", self.target.clone()));
        let mut total = Duration::ZERO;
        for r in &self.results {
            total += r.elapsed;
            let status = match &r.outcome {
                Outcome::Pass(_) => TestCaseStatus::success(),
                Outcome::Fail(f) => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(f.why.clone());
                    s.set_type("conformance");
                    s.set_description(f.to_string());
                    s
                }
                Outcome::Skip(why) => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(why.clone());
                    s
                }
            };
            let mut case = TestCase::new(format!("{}: {}", r.id, r.title), status);
            case.set_classname(suite_name.clone());
            case.set_time(r.elapsed);
            case.add_property(Property::new("seed", r.seed.clone()));
            case.add_property(Property::new("id", r.id.clone()));
            if let Outcome::Pass(d) = &r.outcome {
                case.set_system_out(d.clone());
            }
            suite.add_test_case(case);
        }
        suite.set_time(total);
        report.add_test_suite(suite);
        report.set_time(total);
        report.to_string()
    }

    /// Write [`Report::junit`] to `path`.
    pub fn write_junit(&self, path: &Path) -> Result<(), String> {
        let xml = self.junit().map_err(|e| e.to_string())?;
        std::fs::write(path, xml).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_truncated_and_escaped() {
        let e = Evidence {
            label: "frame".into(),
            bytes: [&[0u8, 0, 0, 3][..], b"{\"a\"\n"].concat(),
        };
        assert_eq!(e.hex(), "00000003 7b226122 0a");
        assert_eq!(e.text(), "\\x00\\x00\\x00\\x03{\"a\"\\x0a");
        let big = Evidence {
            label: "big".into(),
            bytes: vec![b'x'; 1000],
        };
        assert!(big.hex().ends_with('…'));
        assert_eq!(big.text().chars().count(), TEXT_MAX + 1);
    }

    #[test]
    fn junit_lists_every_outcome() {
        let mut r = Report::new("kernel", "shell", "exec:x");
        for (id, outcome) in [
            ("k.1", Outcome::Pass("ok".into())),
            (
                "k.2",
                Outcome::Fail(Failure::new("bad").with("frame", b"\x00<&>")),
            ),
            ("k.3", Outcome::Skip("n/a".into())),
        ] {
            r.results.push(CheckResult {
                id: id.into(),
                title: "t".into(),
                seed: "§1".into(),
                outcome,
                elapsed: Duration::from_millis(5),
            });
        }
        let xml = r.junit().expect("xml");
        let back = quick_junit::Report::deserialize_from_str(&xml).expect("parses back");
        assert_eq!(back.tests, 3);
        assert_eq!(back.failures, 1);
        assert_eq!(r.exit_code(), 1);
        assert!(xml.contains("k.2: t"), "{xml}");
    }
}
