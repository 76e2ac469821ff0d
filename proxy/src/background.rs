//! Threads that serve the sinks (the live view's flusher, the tracer's span maker and
//! its exporter): what they do may wait, so they yield the cores to the relay, and they
//! stop waking up when there is nothing to do. [`Batcher`] is the one way the relay hands
//! them work: appended to a buffer, taken in batches at a cadence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long such a thread keeps its cadence with nothing to do before it sleeps
/// until woken. Waking a sleeping thread is a system call, and on a virtual machine
/// a slow one (it may have to wake the other core): while work comes, a thread that
/// polls at its cadence costs the relay nothing per item.
pub const QUIET: Duration = Duration::from_secs(1);

/// Nice level of a [`Priority::Nice`] thread, and of an idle one where the idle class is
/// refused: on a busy machine the relay's threads should win the core whenever they have
/// a frame.
pub const BACKGROUND_NICE: i32 = 10;

/// How far below the relay a thread that serves the sinks runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Linux's idle class (`SCHED_IDLE`): the thread runs when a core has nothing else
    /// to do, and a relay thread that wakes takes the core from it at once. A nice level
    /// only lowers a thread's share, and a share of a core is still a turn the woken
    /// relay thread may wait out (measured: a tenfold tail on the traced round trip while
    /// spans were exported at nice 10). On a machine with no idle time such a thread
    /// falls behind: for work that may (the trace exporter's bounded queue drops spans
    /// and counts them, as for a slow collector).
    Idle,
    /// [`BACKGROUND_NICE`]: a smaller share, but a share, so the work is done on a
    /// saturated machine too (the live view: a line must reach whoever watches).
    Nice,
}

/// Lower the calling thread's priority. Linux only: there a thread is a task with its
/// own policy and nice value (elsewhere it would change the whole process's).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn lower_priority(p: Priority) {
    let param = nix::libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a live, initialised struct for the call's duration; pid 0 is the
    // calling thread. Both calls take plain values otherwise and touch no other memory.
    let idle = p == Priority::Idle
        && unsafe { nix::libc::sched_setscheduler(0, nix::libc::SCHED_IDLE, &param) } == 0;
    if !idle {
        // SAFETY: plain integers; `who` 0 is the calling thread. A failure only leaves the
        // thread at its priority.
        let _ = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, 0, BACKGROUND_NICE) };
    }
}

/// Elsewhere the thread keeps its priority.
#[cfg(not(target_os = "linux"))]
pub fn lower_priority(_: Priority) {}

/// The trace exporter's threads: [`Priority::Idle`].
pub fn idle_thread() {
    lower_priority(Priority::Idle);
}

/// Items gathered by whoever pushes them and handed on in batches by a thread of its own,
/// every `every` while items come (so the pusher makes no system call per item), or by the
/// pusher itself once `high_water` items wait (so a consumer that cannot keep up slows the
/// pushers instead of growing memory or dropping anything). Batches reach the consumer in
/// the order their items were pushed. Dropping it hands on what is left.
pub struct Batcher<T: Send + 'static> {
    shared: Arc<Gathering<T>>,
    thread: Option<JoinHandle<()>>,
}

/// What one batch is handed to.
pub type Consumer<T> = Box<dyn FnMut(&mut Vec<T>) + Send>;

struct Gathered<T> {
    items: Vec<T>,
    /// The thread waits to be woken (nothing came for [`QUIET`]).
    asleep: bool,
    closed: bool,
}

struct Gathering<T> {
    pending: Mutex<Gathered<T>>,
    wake: Condvar,
    /// Held while a batch is taken and handed on, so batches keep their order.
    consumer: Mutex<Consumer<T>>,
    every: Duration,
    high_water: usize,
    priority: Priority,
    /// Batches a pusher handed on itself, the thread having fallen `high_water` behind.
    by_pushers: AtomicU64,
}

/// How a [`Batcher`] hands on: its thread's name, cadence, priority and high water.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    /// The thread's name.
    pub name: &'static str,
    /// How often the thread takes what gathered, while items come.
    pub every: Duration,
    /// The thread's priority.
    pub priority: Priority,
    /// Items waiting past which the pusher hands them on itself.
    pub high_water: usize,
}

impl<T: Send + 'static> Batcher<T> {
    /// A batcher whose thread is called `name` (if the thread cannot start, every push is
    /// handed on at once instead). `capacity` is the buffer's first size.
    pub fn new(c: Cadence, capacity: usize, consumer: Consumer<T>) -> Self {
        let shared = Arc::new(Gathering {
            pending: Mutex::new(Gathered {
                items: Vec::with_capacity(capacity),
                asleep: false,
                closed: false,
            }),
            wake: Condvar::new(),
            consumer: Mutex::new(consumer),
            every: c.every,
            high_water: c.high_water,
            priority: c.priority,
            by_pushers: AtomicU64::new(0),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(c.name.into())
            .spawn(move || s.run())
            .ok();
        Batcher { shared, thread }
    }

    /// Add items: `fill` appends them to the buffer.
    pub fn push(&self, fill: impl FnOnce(&mut Vec<T>)) {
        let Ok(mut p) = self.shared.pending.lock() else {
            return;
        };
        fill(&mut p.items);
        if self.thread.is_none() || p.items.len() >= self.shared.high_water {
            drop(p);
            if self.thread.is_some() {
                self.shared.by_pushers.fetch_add(1, Ordering::Relaxed);
            }
            self.shared.hand_on();
        } else if p.asleep {
            p.asleep = false;
            self.shared.wake.notify_one();
        }
    }

    /// Batches a pusher handed on itself because the thread had fallen `high_water` items
    /// behind: work done on the pushers' (the relay's) threads, not the batcher's.
    pub fn handed_on_by_pushers(&self) -> u64 {
        self.shared.by_pushers.load(Ordering::Relaxed)
    }

    /// Hand on everything gathered, now, on this thread.
    pub fn flush(&self) {
        self.shared.hand_on();
    }
}

impl<T: Send + 'static> Drop for Batcher<T> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.closed = true;
        }
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.hand_on();
    }
}

impl<T: Send + 'static> Gathering<T> {
    fn run(&self) {
        lower_priority(self.priority);
        let mut quiet = Duration::ZERO;
        loop {
            std::thread::sleep(self.every);
            if self.hand_on() {
                quiet = Duration::ZERO;
                continue;
            }
            quiet += self.every;
            let Ok(mut p) = self.pending.lock() else {
                return;
            };
            if p.closed {
                return;
            }
            // An item pushed since `hand_on` found nothing saw the thread awake and did
            // not wake it: sleeping now would leave it waiting.
            if quiet >= QUIET && p.items.is_empty() {
                p.asleep = true;
                let Ok(p) = self.wake.wait_while(p, |p| p.asleep && !p.closed) else {
                    return;
                };
                drop(p);
                quiet = Duration::ZERO;
            }
        }
    }

    /// Take what gathered and hand it on; whether there was anything.
    fn hand_on(&self) -> bool {
        let Ok(mut consume) = self.consumer.lock() else {
            return false;
        };
        let mut batch = match self.pending.lock() {
            Ok(mut p) if !p.items.is_empty() => std::mem::take(&mut p.items),
            _ => return false,
        };
        consume(&mut batch);
        // Hand the allocation back, unless items came meanwhile, so the buffer is not
        // grown again from nothing.
        if let Ok(mut p) = self.pending.lock()
            && p.items.is_empty()
        {
            batch.clear();
            p.items = batch;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past `high_water` the pusher hands on itself, in order, and that is counted; below
    /// it the thread does, and nothing is counted.
    #[test]
    fn a_pusher_past_the_high_water_hands_on_itself_and_is_counted() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let into = got.clone();
        let cadence = Cadence {
            name: "test-batcher",
            every: Duration::from_millis(5),
            priority: Priority::Nice,
            high_water: 3,
        };
        let b = Batcher::new(
            cadence,
            4,
            Box::new(move |batch: &mut Vec<u32>| {
                if let Ok(mut g) = into.lock() {
                    g.append(batch);
                }
            }),
        );
        b.push(|v| v.push(1));
        assert_eq!(b.handed_on_by_pushers(), 0);
        b.push(|v| v.extend([2, 3, 4]));
        assert_eq!(b.handed_on_by_pushers(), 1);
        assert_eq!(*got.lock().expect("lock"), vec![1, 2, 3, 4]);
        drop(b);
        assert_eq!(*got.lock().expect("lock"), vec![1, 2, 3, 4]);
    }
}
