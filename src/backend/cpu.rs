//! The CPU backend: runs each op's reference implementation. It defines the semantics the GPU
//! kernels are tested against, and it is what runs when the machine has no real GPU. It computes
//! in one [`Arithmetic`]: the machine's fastest, or the portable one that gives the same bits
//! everywhere.
//!
//! With `POSFLOW_PROFILE=1` in the environment, each compiled program times every op kind and
//! prints the totals to stderr when it is dropped.

use std::cell::RefCell;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use super::profile::{self, Clock, Profile, Work};
use super::{Backend, BackendKind, Buffer, Compiled, Program, ReadFuture, Step};
use crate::arithmetic::Arithmetic;
use crate::error::{Error, Result};
use crate::kernel::{In, Out};
use web_time::Instant;

#[derive(Debug, Default)]
pub struct CpuBackend {
    arithmetic: Arithmetic,
}

impl CpuBackend {
    /// The CPU backend in the native arithmetic.
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_arithmetic(arithmetic: Arithmetic) -> Self {
        Self { arithmetic }
    }

    /// Makes the calling thread worker 0 of a new rayon pool of `threads` threads (0: rayon's
    /// default, `RAYON_NUM_THREADS` or every core), for a thread that runs ops for as long as
    /// the returned pool is kept: each op's parallel loop then starts on this thread and is
    /// shared with the pool's others, where from a thread outside any pool rayon hands the whole
    /// loop to its global pool and sleeps on a lock until it is done (two wake-ups per op, 8% of
    /// a CPU training step; and with several such threads their ops queue for the same workers).
    /// `None`, and the ops run as before, if this thread is in a pool already or none can be
    /// built. Rayon keeps a little of the pool's state for the thread when it is dropped. Not in
    /// wasm, which has one thread.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn join_thread_pool(threads: usize) -> Option<rayon::ThreadPool> {
        if rayon::current_thread_index().is_some() {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .use_current_thread()
            .build()
            .ok()
    }
}

fn cpu_buffer(buffer: &Buffer) -> &Arc<RwLock<Vec<f32>>> {
    match buffer {
        Buffer::Cpu(b) => b,
        Buffer::Gpu(_) => panic!("a GPU buffer was given to the CPU backend"),
    }
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn describe(&self) -> String {
        // In the page rayon has no threads ("cpu (1 threads)" even in the threaded build): its
        // CPU threads are the products' helpers, which the page reports itself, live.
        let arithmetic = match self.arithmetic {
            Arithmetic::Native => "",
            Arithmetic::Portable => ", portable arithmetic",
        };
        if cfg!(target_arch = "wasm32") {
            return format!("cpu (WebAssembly{arithmetic})");
        }
        format!("cpu ({} threads{arithmetic})", rayon::current_num_threads())
    }

    fn alloc(&self, words: usize, label: &str) -> Result<Buffer> {
        // A failed allocation is an error naming the tensor, not an aborted process.
        let mut data = Vec::new();
        data.try_reserve_exact(words).map_err(|e| {
            Error::Input(format!(
                "cannot allocate {} for {label}: {e}",
                crate::memory::gib(words as u64 * 4)
            ))
        })?;
        data.resize(words, 0.0);
        Ok(Buffer::Cpu(Arc::new(RwLock::new(data))))
    }

    fn write(&self, buffer: &Buffer, words: &[u32]) -> Result<()> {
        let mut data = cpu_buffer(buffer).write().expect("buffer lock");
        if words.len() > data.len() {
            return Err(Error::Input(format!(
                "writing {} words into a buffer of {}",
                words.len(),
                data.len()
            )));
        }
        data[..words.len()].copy_from_slice(bytemuck::cast_slice(words));
        Ok(())
    }

    fn read<'a>(&'a self, buffer: &'a Buffer) -> ReadFuture<'a> {
        let words = bytemuck::cast_slice(&cpu_buffer(buffer).read().expect("buffer lock")).to_vec();
        Box::pin(std::future::ready(Ok(words)))
    }

    fn compile(&self, program: &Program) -> Result<Box<dyn Compiled>> {
        for step in program {
            for o in &step.outputs {
                if step.inputs.iter().any(|i| i.buffer.same(&o.buffer)) {
                    return Err(Error::Graph(format!(
                        "{}: output `{}` shares a buffer with an input",
                        step.op.name(),
                        o.name
                    )));
                }
            }
        }
        let profile = profile::requested().then(|| RefCell::new(Profile::new(Clock::Host)));
        let work = match profile {
            Some(_) => program.iter().map(Step::work).collect(),
            None => Vec::new(),
        };
        Ok(Box::new(CpuProgram {
            program: program.clone(),
            arithmetic: self.arithmetic,
            profile,
            work,
        }))
    }
}

struct CpuProgram {
    program: Program,
    arithmetic: Arithmetic,
    profile: Option<RefCell<Profile>>,
    /// Each step's work, when profiled.
    work: Vec<Work>,
}

impl Drop for CpuProgram {
    fn drop(&mut self) {
        // A program run once (an evaluation set of one batch) has nothing counted.
        if let Some(profile) = self.profile.as_ref().filter(|p| p.borrow().runs > 0) {
            eprint!("{}", profile.borrow());
        }
    }
}

impl Compiled for CpuProgram {
    fn dispatches(&self) -> Option<usize> {
        None
    }

    fn profile(&self) -> Option<Profile> {
        self.profile.as_ref().map(|p| p.borrow().clone())
    }

    fn run(&self) -> Result<()> {
        if let Some(profile) = &self.profile {
            profile.borrow_mut().start_run();
        }
        for (i, step) in self.program.iter().enumerate() {
            let start = self.profile.as_ref().map(|_| Instant::now());
            // Outputs are moved out of their locks while inputs are read, so one op can read the
            // same buffer twice (x * x) without holding a write lock on it.
            let mut out_data: Vec<Vec<f32>> = step
                .outputs
                .iter()
                .map(|o| std::mem::take(&mut *cpu_buffer(&o.buffer).write().expect("buffer lock")))
                .collect();
            {
                let guards: Vec<RwLockReadGuard<Vec<f32>>> = step
                    .inputs
                    .iter()
                    .map(|i| cpu_buffer(&i.buffer).read().expect("buffer lock"))
                    .collect();
                let inputs: Vec<In> = step
                    .inputs
                    .iter()
                    .zip(&guards)
                    .map(|(b, g)| In {
                        meta: &b.meta,
                        data: &g[..b.meta.numel()],
                    })
                    .collect();
                let mut outputs: Vec<Out> = step
                    .outputs
                    .iter()
                    .zip(out_data.iter_mut())
                    .map(|(b, d)| Out {
                        meta: &b.meta,
                        data: &mut d[..b.meta.numel()],
                    })
                    .collect();
                step.op.cpu_in(self.arithmetic, &inputs, &mut outputs);
            }
            for (o, data) in step.outputs.iter().zip(out_data) {
                *cpu_buffer(&o.buffer).write().expect("buffer lock") = data;
            }
            if let (Some(profile), Some(start)) = (&self.profile, start) {
                let mut profile = profile.borrow_mut();
                profile.record(step.op.name(), start.elapsed().as_secs_f64());
                profile.count(step.op.name(), self.work[i]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rayon::prelude::*;

    use super::CpuBackend;

    #[test]
    fn a_thread_that_joins_a_pool_runs_its_loops_there() {
        // Two threads at once, as a study's workers: each in a pool of one thread, itself.
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let pool = CpuBackend::join_thread_pool(1).expect("a new thread joins a pool");
                    assert_eq!(rayon::current_thread_index(), Some(0));
                    assert_eq!(rayon::current_num_threads(), 1);
                    assert!(CpuBackend::join_thread_pool(1).is_none(), "it is in one already");
                    // A loop of many chunks runs on this thread, none handed to another.
                    let here = std::thread::current().id();
                    let mut xs = vec![0u32; 1 << 16];
                    xs.par_chunks_mut(64).enumerate().for_each(|(i, chunk)| {
                        assert_eq!(std::thread::current().id(), here);
                        chunk.fill(i as u32);
                    });
                    assert!(xs.iter().enumerate().all(|(j, &x)| x as usize == j / 64));
                    drop(pool);
                });
            }
        });
    }
}
