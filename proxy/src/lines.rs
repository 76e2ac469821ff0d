//! Whole lines to one output, written in batches by a thread of their own.
//!
//! The live view writes a line per frame. A `write` per line put a system call
//! (and, for a file, the filesystem's work) on the relay's path for every frame,
//! which is most of what a log costs a proxy. Lines are appended to a buffer
//! instead, and a flusher thread writes what gathered every [`FLUSH_EVERY`]: a
//! person watching sees no delay, and the relay makes no system call for its log.
//! Waking a sleeping thread is a system call too, and on a virtual machine a slow
//! one: the flusher keeps its cadence while lines come, and sleeps until woken
//! only after [`crate::background::QUIET`] without any.
//!
//! Bounded and lossless: a buffer past [`HIGH_WATER`] is written by the caller
//! itself, so an output that cannot keep up slows the relay, as a direct write
//! did, and nothing is dropped. Each `write` holds whole lines and at most
//! [`PIPE_ATOMIC`] bytes unless one line is longer, so on a pipe shared with a
//! child (a stand-in's stderr) no line is split by the child's output.

use std::io::Write;
use std::time::Duration;

use crate::background::{Batcher, Cadence, Priority};

/// How long a line may wait in the buffer before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(10);
/// A buffer this full is written at once, by whoever filled it.
pub const HIGH_WATER: usize = 256 * 1024;
/// The largest write a pipe keeps whole (POSIX `PIPE_BUF` on Linux).
pub const PIPE_ATOMIC: usize = 4096;

/// Lines for one output; dropping it writes what is left.
pub struct Lines {
    bytes: Batcher<u8>,
}

impl Lines {
    /// Lines for `out`, with a flusher thread (if the thread cannot start, every
    /// line is written at once instead).
    pub fn new(mut out: Box<dyn Write + Send>) -> Self {
        let write = move |batch: &mut Vec<u8>| {
            for piece in pieces(batch, PIPE_ATOMIC) {
                if out.write_all(piece).is_err() {
                    break;
                }
            }
            let _ = out.flush();
        };
        Lines {
            bytes: Batcher::new(
                Cadence {
                    name: "log-flush",
                    every: FLUSH_EVERY,
                    // A share of a core even on a saturated machine: a line must reach
                    // whoever watches.
                    priority: Priority::Nice,
                    high_water: HIGH_WATER,
                },
                64 * 1024,
                Box::new(write),
            ),
        }
    }

    /// Append one line: `fill` writes it (without its newline) into the buffer.
    /// If `fill` fails, whatever it wrote is taken back and nothing is logged.
    pub fn push<E>(&self, fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) {
        self.bytes.push(|buf| {
            let start = buf.len();
            if fill(buf).is_err() {
                buf.truncate(start);
            } else {
                buf.push(b'\n');
            }
        });
    }

    /// Write everything buffered now.
    pub fn flush(&self) {
        self.bytes.flush();
    }
}

/// `batch` (whole lines) cut into runs of whole lines of at most `max` bytes each;
/// a line longer than `max` is a run of its own.
fn pieces(batch: &[u8], max: usize) -> impl Iterator<Item = &[u8]> {
    let mut rest = batch;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let window = &rest[..rest.len().min(max)];
        let end = if window.len() == rest.len() {
            rest.len()
        } else {
            match window.iter().rposition(|b| *b == b'\n') {
                Some(i) => i + 1,
                None => rest
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(rest.len(), |i| i + 1),
            }
        };
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// An output that records each write it was given.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);
    impl Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .push(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Writes {
        fn all(&self) -> Vec<Vec<u8>> {
            self.0.lock().map(|w| w.clone()).unwrap_or_default()
        }
    }

    fn line(n: usize, len: usize) -> Vec<u8> {
        let mut l = format!("{n:06}").into_bytes();
        l.resize(len, b'x');
        l
    }

    #[test]
    fn pieces_are_whole_lines_within_the_bound() {
        let mut batch = Vec::new();
        for (n, len) in [(1, 100), (2, 5000), (3, 10), (4, 4000), (5, 90)] {
            batch.extend(line(n, len));
            batch.push(b'\n');
        }
        let got: Vec<&[u8]> = pieces(&batch, 4096).collect();
        assert_eq!(got.concat(), batch);
        for p in &got {
            assert_eq!(p.last(), Some(&b'\n'), "a piece ends a line");
            let lines = p.iter().filter(|b| **b == b'\n').count();
            assert!(
                p.len() <= 4096 || lines == 1,
                "only a lone long line passes the bound"
            );
        }
        assert_eq!(got.len(), 4, "100 | 5000 | 10+4000 | 90");
    }

    #[test]
    fn lines_arrive_in_order_and_whole_after_drop() {
        let out = Writes::default();
        let lines = Lines::new(Box::new(out.clone()));
        for n in 0..20_000 {
            lines.push(|b| {
                b.extend(line(n, 40 + n % 300));
                Ok::<(), ()>(())
            });
        }
        lines.push(|b| {
            b.extend_from_slice(b"half");
            Err(())
        });
        drop(lines);
        let writes = out.all();
        assert!(
            writes.len() < 20_000,
            "lines were batched: {} writes",
            writes.len()
        );
        let text = writes.concat();
        let got: Vec<&[u8]> = text
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(got.len(), 20_000, "every line, nothing of the failed one");
        for (n, l) in got.iter().enumerate() {
            assert_eq!(*l, line(n, 40 + n % 300).as_slice());
        }
    }

    /// Also after the flusher has gone to sleep for a quiet log.
    #[test]
    fn a_line_reaches_the_output_without_a_flush() {
        let out = Writes::default();
        let lines = Lines::new(Box::new(out.clone()));
        std::thread::sleep(crate::background::QUIET + Duration::from_millis(100));
        lines.push(|b| {
            b.extend_from_slice(b"hello");
            Ok::<(), ()>(())
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while out.all().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(out.all().concat(), b"hello\n");
    }
}
