//! The viewer's jobs: async work that runs a model (encodings, attention, a completion, a
//! fine-tuning step), queued one at a time and run by a [`Spawner`] — natively to completion on
//! the spot, on the web by `wasm_bindgen_futures::spawn_local` — each storing its result in a
//! [`Computed`] of the shared state.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use super::{State, attention, compare, finetune, posenc, prompt, translate, tupe};
use crate::error::Result;

/// A job: a future that runs a model and stores what it found.
pub type Task = Pin<Box<dyn Future<Output = ()>>>;

/// How jobs run: the one place where native and web differ.
#[derive(Clone)]
pub struct Spawner(pub(super) Rc<dyn Fn(Task)>);

impl Spawner {
    /// Jobs run by `spawn`, e.g. `Spawner::new(wasm_bindgen_futures::spawn_local)` in a page.
    pub fn new(spawn: impl Fn(Task) + 'static) -> Self {
        Self(Rc::new(spawn))
    }

    /// Runs each job to completion before returning (natively, where the CPU backend and a
    /// GPU's readback may block; the models the viewer shows take milliseconds).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn blocking() -> Self {
        Self::new(pollster::block_on)
    }
}

/// A value computed by a job for some input `K`: requested, then ready (or failed).
pub(crate) struct Computed<K, T> {
    pub(super) key: Option<K>,
    value: Option<std::result::Result<T, String>>,
}

impl<K, T> Default for Computed<K, T> {
    fn default() -> Self {
        Self {
            key: None,
            value: None,
        }
    }
}

impl<K: PartialEq, T> Computed<K, T> {
    /// Marks `key` as wanted; true when it was not already (the caller then starts a job).
    pub fn request(&mut self, key: K) -> bool {
        let new = self.refresh(key);
        if new {
            self.value = None;
        }
        new
    }

    /// A job's result, kept only if its input is still the wanted one.
    pub fn store(&mut self, key: &K, value: Result<T>) {
        if self.key.as_ref() == Some(key) {
            self.value = Some(value.map_err(|e| e.to_string()));
        }
    }

    /// Like [`Computed::request`], but the last value stays until the new one is stored: for a
    /// value that changes as it is watched (encodings while they train), so that it does not blink.
    pub fn refresh(&mut self, key: K) -> bool {
        if self.key.as_ref() == Some(&key) {
            return false;
        }
        self.key = Some(key);
        true
    }

    /// `None` while the job runs.
    pub fn result(&self) -> Option<&std::result::Result<T, String>> {
        self.value.as_ref()
    }
}

/// What the views ask to have computed; see [`run_job`].
pub(crate) enum Job {
    Encodings {
        checkpoint: usize,
        len: usize,
        /// [`finetune::FineTuning::version`]: which values of the parameters.
        version: u64,
    },
    Attention {
        checkpoint: usize,
        text: String,
    },
    PositionCorrelation {
        checkpoint: usize,
    },
    Completion {
        checkpoint: usize,
        prompt: String,
        chars: usize,
    },
    Translation {
        checkpoint: usize,
        source: String,
        beam: usize,
    },
    FineTuneStep(finetune::Step),
    CompareStep(compare::Step),
}

/// Runs the queued jobs until none is left.
pub(super) async fn run_queue(state: Rc<RefCell<State>>) {
    loop {
        let next = state.borrow_mut().queue.pop_front();
        let Some(job) = next else {
            state.borrow_mut().running_queue = false;
            return;
        };
        run_job(state.clone(), job).await;
    }
}

/// Runs one job and stores its result.
async fn run_job(state: Rc<RefCell<State>>, job: Job) {
    let checkpoint = |i: usize| state.borrow().checkpoints[i].clone();
    match job {
        Job::Encodings {
            checkpoint: i,
            len,
            version,
        } => {
            let result = posenc::position_encodings(&checkpoint(i), len).await;
            state
                .borrow_mut()
                .encodings
                .entry(i)
                .or_default()
                .store(&(len, version), result);
        }
        Job::Attention { checkpoint: i, text } => {
            let result = attention::attention_view(&checkpoint(i), &text).await;
            state.borrow_mut().attention_maps.store(&(i, text), result);
        }
        Job::PositionCorrelation { checkpoint: i } => {
            let result = tupe::tupe_correlation(&checkpoint(i).saved).await;
            state.borrow_mut().tupe.entry(i).or_default().store(&(), result);
        }
        Job::Completion {
            checkpoint: i,
            prompt,
            chars,
        } => {
            let result = prompt::complete(&checkpoint(i), &prompt, chars).await;
            state.borrow_mut().completion.store(&(i, prompt, chars), result);
        }
        Job::Translation {
            checkpoint: i,
            source,
            beam,
        } => {
            let result = translate::translate(&checkpoint(i), &source, beam).await;
            state.borrow_mut().translation.store(&(i, source, beam), result);
        }
        Job::FineTuneStep(step) => finetune::run_step(&state, step).await,
        Job::CompareStep(step) => compare::run_step(&state, step).await,
    }
    let mut s = state.borrow_mut();
    s.pending -= 1;
    if let Some(ctx) = &s.ctx {
        ctx.request_repaint();
    }
}
