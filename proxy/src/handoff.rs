//! A bounded hand-off from the relay to a worker thread that takes items in batches.
//!
//! Waking a sleeping thread is a system call; doing it per frame put one on the
//! relay's path for every frame a sink sees. Here the worker is woken only when the
//! queue goes from empty to not empty, then lets items gather for [`Handoff::every`]
//! before it takes them all at once: the relay pays a lock and a push per item.
//! The queue is bounded; a full queue refuses the item and the caller counts it.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Queue<T> {
    items: Vec<T>,
    /// Items pushed and items handled so far: [`Handoff::settle`] waits for the first
    /// to be reached by the second.
    pushed: u64,
    handled: u64,
    /// Someone waits in `settle`: take the items now, without letting them gather
    /// (until the worker has caught up).
    hurry: bool,
    closed: bool,
}

struct Shared<T> {
    queue: Mutex<Queue<T>>,
    /// The worker waits here for items.
    ready: Condvar,
    /// `settle` waits here for the worker.
    handled: Condvar,
    cap: usize,
    every: Duration,
}

/// The relay's end of the hand-off; dropping it hands over what is queued and
/// waits for the worker to finish.
pub struct Handoff<T: Send + 'static> {
    shared: Arc<Shared<T>>,
    worker: Option<JoinHandle<()>>,
}

impl<T: Send + 'static> Handoff<T> {
    /// A worker thread called `name` that calls `handle` with each batch, holding at
    /// most `cap` items queued and letting them gather for `every`.
    pub fn spawn(
        name: &str,
        cap: usize,
        every: Duration,
        handle: impl FnMut(Vec<T>) + Send + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                items: Vec::new(),
                pushed: 0,
                handled: 0,
                hurry: false,
                closed: false,
            }),
            ready: Condvar::new(),
            handled: Condvar::new(),
            cap: cap.max(1),
            every,
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || s.work(handle))?;
        Ok(Handoff {
            shared,
            worker: Some(worker),
        })
    }

    /// Queue `item`; a full queue gives it back.
    pub fn push(&self, item: T) -> Result<(), T> {
        let Ok(mut q) = self.shared.queue.lock() else {
            return Err(item);
        };
        if q.items.len() >= self.shared.cap || q.closed {
            return Err(item);
        }
        q.items.push(item);
        q.pushed += 1;
        if q.items.len() == 1 {
            self.shared.ready.notify_one();
        }
        Ok(())
    }

    /// Wait until every item pushed before this call has been handled, or `deadline` passed.
    pub fn settle(&self, deadline: Duration) {
        let until = Instant::now() + deadline;
        let Ok(mut q) = self.shared.queue.lock() else {
            return;
        };
        let target = q.pushed;
        q.hurry = true;
        self.shared.ready.notify_one();
        while q.handled < target {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            q = match self.shared.handled.wait_timeout(q, left) {
                Ok((q, _)) => q,
                Err(_) => return,
            };
        }
    }
}

impl<T: Send + 'static> Drop for Handoff<T> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.closed = true;
        }
        self.shared.ready.notify_one();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Nice level of the threads that work for the sinks (the flusher of the live view,
/// spans, their export): what they do may wait, and on a busy machine the relay's
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

impl<T> Shared<T> {
    fn work(&self, mut handle: impl FnMut(Vec<T>)) {
        background_thread();
        loop {
            let Ok(q) = self.queue.lock() else {
                return;
            };
            let Ok(q) = self
                .ready
                .wait_while(q, |q| q.items.is_empty() && !q.closed && !q.hurry)
            else {
                return;
            };
            let (closed, hurry) = (q.closed, q.hurry);
            drop(q);
            if !closed && !hurry {
                std::thread::sleep(self.every);
            }
            let Ok(mut q) = self.queue.lock() else {
                return;
            };
            let batch = std::mem::take(&mut q.items);
            let n = batch.len() as u64;
            drop(q);
            if !batch.is_empty() {
                handle(batch);
            }
            let Ok(mut q) = self.queue.lock() else {
                return;
            };
            q.handled += n;
            self.handled.notify_all();
            if q.items.is_empty() {
                // Caught up: whoever hurried it has what it waited for.
                q.hurry = false;
                if q.closed {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batches the worker was given, in order.
    type Batches = Arc<Mutex<Vec<Vec<u32>>>>;

    fn collector(cap: usize) -> (Handoff<u32>, Batches) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        let h = Handoff::spawn("test", cap, Duration::from_millis(5), move |b| {
            if let Ok(mut g) = g.lock() {
                g.push(b);
            }
        })
        .expect("thread");
        (h, got)
    }

    #[test]
    fn items_arrive_in_order_in_batches_and_settle_waits_for_them() {
        let (h, got) = collector(100_000);
        for i in 0..10_000 {
            h.push(i).expect("room");
        }
        h.settle(Duration::from_secs(10));
        let batches = got.lock().map(|g| g.clone()).unwrap_or_default();
        assert!(batches.len() < 10_000, "{} batches", batches.len());
        assert_eq!(batches.concat(), (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_full_queue_gives_the_item_back() {
        let (h, _) = collector(2);
        // The worker may take a batch at any moment: push until one is refused.
        let refused = (0..1_000_000).find_map(|i| h.push(i).err());
        assert!(refused.is_some());
    }

    #[test]
    fn dropping_hands_over_what_is_queued() {
        let (h, got) = collector(1000);
        for i in 0..500 {
            h.push(i).expect("room");
        }
        drop(h);
        let all = got.lock().map(|g| g.concat()).unwrap_or_default();
        assert_eq!(all, (0..500).collect::<Vec<_>>());
    }
}
