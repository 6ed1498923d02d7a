//! The page's helper threads for its products: Web Workers sharing the page's memory (the wasm
//! built with atomics, for a page served cross-origin isolated) that take tasks of a product the
//! page's own thread shares out. The page's thread never blocks, since a browser forbids waiting
//! on its main thread: it works through the tasks too, then spins until every helper that joined
//! has left. Helpers park between products and are woken for the next.
//!
//! Natively this is compiled only for its tests (and the page's tiles' tests), std threads
//! standing in for the Workers.

use std::ptr::null_mut;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::thread::Thread;

/// At most this many helpers (the page starts one fewer than the machine's cores, up to this).
pub const MAX_HELPERS: usize = 15;

/// One shared piece of work: `tasks` calls of `run`, handed out in order.
struct Job<'a> {
    tasks: usize,
    next: AtomicUsize,
    run: &'a (dyn Fn(usize) + Sync),
}

impl Job<'_> {
    fn work(&self) {
        loop {
            let task = self.next.fetch_add(1, SeqCst);
            if task >= self.tasks {
                return;
            }
            (self.run)(task);
        }
    }
}

/// The job helpers may join; null between jobs.
static JOB: AtomicPtr<Job<'static>> = AtomicPtr::new(null_mut());
/// Helpers inside a job: `share` returns only once none is.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Counts the jobs published: a helper parks only while it has not changed.
static EPOCH: AtomicI32 = AtomicI32::new(0);
/// Whether a `share` is running: a second caller at the same time works alone.
static SHARING: AtomicBool = AtomicBool::new(false);
/// The helpers, to wake; each fills its own slot once.
static HELPERS: [OnceLock<Thread>; MAX_HELPERS] = [const { OnceLock::new() }; MAX_HELPERS];
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// How many helpers have started.
pub fn helpers() -> usize {
    STARTED.load(SeqCst).min(MAX_HELPERS)
}

/// Calls `run(t)` for every task t in 0..tasks, each once, shared with the helpers; returns when
/// every call has returned. Never blocks the calling thread (it spins).
pub fn share(tasks: usize, run: &(dyn Fn(usize) + Sync)) {
    let job = Job {
        tasks,
        next: AtomicUsize::new(0),
        run,
    };
    if SHARING.swap(true, SeqCst) {
        job.work();
        return;
    }
    // SAFETY (of the helpers' use of `job`): it is withdrawn below before this returns, and the
    // return waits until no helper is inside a job. A helper counts itself in ACTIVE before it
    // reads JOB, and this thread reads ACTIVE after withdrawing JOB, all sequentially consistent:
    // a helper this thread does not see in ACTIVE reads JOB after the withdrawal.
    let published = (&job as *const Job<'_>).cast::<Job<'static>>().cast_mut();
    JOB.store(published, SeqCst);
    EPOCH.fetch_add(1, SeqCst);
    for helper in HELPERS.iter().filter_map(OnceLock::get) {
        helper.unpark();
    }
    job.work();
    JOB.store(null_mut(), SeqCst);
    while ACTIVE.load(SeqCst) != 0 {
        std::hint::spin_loop();
    }
    SHARING.store(false, SeqCst);
}

/// A helper thread's life: it joins each job published, parked between them. Never returns.
pub fn serve() -> ! {
    let slot = STARTED.fetch_add(1, SeqCst);
    if let Some(place) = HELPERS.get(slot) {
        // Its own slot: nobody else fills it.
        let _ = place.set(std::thread::current());
    } else {
        // More helpers than slots: this one would never be woken.
        loop {
            std::thread::park();
        }
    }
    loop {
        // The epoch before looking for a job, so that a job published meanwhile is not slept
        // through.
        let seen = EPOCH.load(SeqCst);
        ACTIVE.fetch_add(1, SeqCst);
        // SAFETY: see `share`: a job read here stays alive until ACTIVE is decremented.
        if let Some(job) = unsafe { JOB.load(SeqCst).as_ref() } {
            job.work();
        }
        ACTIVE.fetch_sub(1, SeqCst);
        while EPOCH.load(SeqCst) == seen {
            std::thread::park();
        }
    }
}

/// Writes disjoint chunks of a slice from several threads: `chunk(c)` is the c-th chunk of
/// `len` elements (the last may be shorter).
pub struct Chunks<'a> {
    start: *mut f32,
    total: usize,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [f32]>,
}

// SAFETY: each chunk is handed out once per job (see `chunk`), so no two threads write the same
// element.
unsafe impl Send for Chunks<'_> {}
unsafe impl Sync for Chunks<'_> {}

impl<'a> Chunks<'a> {
    pub fn new(slice: &'a mut [f32], len: usize) -> Self {
        Self {
            start: slice.as_mut_ptr(),
            total: slice.len(),
            len: len.max(1),
            _slice: std::marker::PhantomData,
        }
    }

    /// How many chunks there are.
    pub fn count(&self) -> usize {
        self.total.div_ceil(self.len)
    }

    /// Chunk `c`.
    ///
    /// # Safety
    /// Each chunk may be taken once while `self` lives (a task of `share` takes its own).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn chunk(&self, c: usize) -> &mut [f32] {
        assert!(c < self.count(), "chunk {c} of {}", self.count());
        let from = c * self.len;
        let len = self.len.min(self.total - from);
        // SAFETY: in bounds (asserted), and unique by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.start.add(from), len) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{Chunks, helpers, serve, share};
    use std::sync::Once;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Starts three helpers for this test binary (once; they live as long as it).
    pub(crate) fn start_helpers() {
        static START: Once = Once::new();
        START.call_once(|| {
            for _ in 0..3 {
                std::thread::spawn(|| serve());
            }
        });
        while helpers() < 3 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn every_task_runs_once_and_share_returns_after_the_last() {
        start_helpers();
        for round in 0..200 {
            let tasks = 1 + round % 37;
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            let threads = std::sync::Mutex::new(std::collections::HashSet::new());
            share(tasks, &|t| {
                // Long enough for helpers to take some.
                std::thread::sleep(std::time::Duration::from_micros(50));
                counts[t].fetch_add(1, SeqCst);
                threads.lock().unwrap().insert(std::thread::current().id());
            });
            let counts: Vec<usize> = counts.iter().map(|c| c.load(SeqCst)).collect();
            assert_eq!(counts, vec![1; tasks], "round {round}");
            if round == 199 {
                assert!(threads.lock().unwrap().len() > 1, "no helper took a task");
            }
        }
    }

    #[test]
    fn chunks_cover_the_slice_once_the_last_shorter() {
        start_helpers();
        let mut values = vec![0.0f32; 10];
        let chunks = Chunks::new(&mut values, 4);
        assert_eq!(chunks.count(), 3);
        share(chunks.count(), &|c| {
            // SAFETY: task c takes chunk c only.
            for v in unsafe { chunks.chunk(c) } {
                *v += c as f32 + 1.0;
            }
        });
        assert_eq!(values, [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0]);
    }
}
