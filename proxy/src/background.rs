//! Threads that serve the sinks (the live view's flusher, the trace exporter): what
//! they do may wait, so they yield the cores to the relay, and they stop waking up
//! when there is nothing to do.

use std::time::Duration;

/// How long such a thread keeps its cadence with nothing to do before it sleeps
/// until woken. Waking a sleeping thread is a system call, and on a virtual machine
/// a slow one (it may have to wake the other core): while work comes, a thread that
/// polls at its cadence costs the relay nothing per item.
pub const QUIET: Duration = Duration::from_secs(1);

/// Nice level of the threads that work for the sinks: on a busy machine the relay's
/// threads should win the core whenever they have a frame.
pub const BACKGROUND_NICE: i32 = 10;

/// Lower the calling thread's priority to [`BACKGROUND_NICE`]. Linux only: there a
/// thread is a task with its own nice value (elsewhere it would renice the process).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn background_thread() {
    // SAFETY: setpriority takes plain integers and touches no memory of ours; `who` 0
    // is the calling thread. A failure only leaves the thread at its priority.
    let _ = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, 0, BACKGROUND_NICE) };
}

/// Elsewhere the thread keeps its priority.
#[cfg(not(target_os = "linux"))]
pub fn background_thread() {}
