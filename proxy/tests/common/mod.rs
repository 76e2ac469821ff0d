//! What the conformance tests share: run `contract-proxy conformance` as a child
//! with a deadline, and read its PASS/FAIL/SKIP lines.

use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

/// One finished suite run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Every check line as (PASS|FAIL|SKIP, check id).
    #[allow(dead_code)] // not every test file lists all lines
    pub fn lines(&self) -> Vec<(String, String)> {
        self.stdout
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let tag = w.next()?;
                ["PASS", "FAIL", "SKIP"]
                    .contains(&tag)
                    .then(|| (tag.to_string(), w.next().unwrap_or("").to_string()))
            })
            .collect()
    }

    /// The ids of the checks with this tag.
    pub fn with(&self, tag: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, id)| id)
            .collect()
    }
}

/// A run for a failure message.
pub fn show(r: &Run) -> String {
    format!(
        "exit {}\n--- stdout\n{}\n--- stderr\n{}",
        r.code, r.stdout, r.stderr
    )
}

/// Wait for `child` at most `limit`, killing it after; stdout and stderr read on threads.
pub fn finish(mut child: Child, limit: Duration) -> Run {
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st.code().unwrap_or(-1);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        code,
        stdout: t_out.join().expect("stdout thread"),
        stderr: t_err.join().expect("stderr thread"),
    }
}
