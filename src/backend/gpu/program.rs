//! A compiled GPU program: every dispatch's pipeline, uniform and bind group made once, then
//! recorded into one compute pass per run. A [`Repeat`]ed dispatch splits the run: natively the
//! work before it is submitted, then the dispatch runs in rounds of growing size, its flag read
//! back after each, until the kernel says it is done (growing a scratch buffer when it is full);
//! the web cannot wait on the GPU inside a run, so there it runs every one of `max_runs`.

use std::cell::RefCell;
#[cfg(not(target_arch = "wasm32"))]
use std::time::Instant;

use wgpu::util::DeviceExt;

#[cfg(not(target_arch = "wasm32"))]
use super::timestamps::Timestamps;
use super::{GpuBackend, GpuView, gpu_view};
use crate::backend::profile::Profile;
#[cfg(not(target_arch = "wasm32"))]
use crate::backend::profile::{Clock, Work};
use crate::backend::{Compiled, Program, Step};
use crate::error::{Error, Result};
use crate::kernel::{Arg, Dispatch, Repeat};
#[cfg(not(target_arch = "wasm32"))]
use crate::kernel::{REPEAT_DONE, REPEAT_FULL, REPEAT_GOING};

/// The most runs of a repeated dispatch in one round between two readbacks of its flag.
#[cfg(not(target_arch = "wasm32"))]
const MAX_ROUND: usize = 64;

/// What a dispatch binds, kept to bind again when a scratch buffer grows.
struct Binding {
    label: &'static str,
    pipeline: wgpu::ComputePipeline,
    uniform: wgpu::Buffer,
    /// The storage buffers in binding order.
    args: Vec<Arg>,
    inputs: Vec<GpuView>,
    outputs: Vec<GpuView>,
}

impl Binding {
    fn bind(&self, device: &wgpu::Device, scratch: &[wgpu::Buffer]) -> wgpu::BindGroup {
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: self.uniform.as_entire_binding(),
        }];
        for (i, a) in self.args.iter().enumerate() {
            let resource = match *a {
                Arg::In(i) => self.inputs[i].binding(),
                Arg::Out(i) => self.outputs[i].binding(),
                Arg::Scratch(i) => scratch[i].as_entire_binding(),
            };
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource,
            });
        }
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(self.label),
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }
}

impl Binding {
    /// WebGPU's rule for the buffers of one dispatch: a buffer bound for writing is bound nowhere
    /// else in it, not even read-only at another range (a usage scope is the whole buffer), and
    /// only at ranges that do not overlap where it is written twice. Native wgpu does not check
    /// the last, browsers do: checked here, a kernel that breaks it fails natively, in tests,
    /// rather than only in the browser.
    fn check_aliasing(&self, op: &str, scratch: &[wgpu::Buffer]) -> Result<()> {
        let bound: Vec<(GpuView, bool)> = self
            .args
            .iter()
            .map(|a| match *a {
                Arg::In(i) => (self.inputs[i].clone(), false),
                Arg::Out(i) => (self.outputs[i].clone(), true),
                Arg::Scratch(i) => (GpuView::entire(scratch[i].clone()), true),
            })
            .collect();
        for (i, (a, a_writes)) in bound.iter().enumerate() {
            for (j, (b, b_writes)) in bound.iter().enumerate().skip(i + 1) {
                let overlap = a.offset < b.offset + b.size && b.offset < a.offset + a.size;
                let refused = a.buffer == b.buffer && (a_writes != b_writes || (*a_writes && overlap));
                if refused {
                    return Err(Error::Gpu(format!(
                        "{op} ({}): bindings {} and {} share a buffer that one of them writes, \
                         which WebGPU refuses",
                        self.label,
                        i + 1,
                        j + 1
                    )));
                }
            }
        }
        Ok(())
    }
}

struct Recorded {
    /// The program step (op) this dispatch belongs to, whose scratch buffers it may bind (and
    /// grow, natively).
    #[cfg_attr(
        target_arch = "wasm32",
        expect(dead_code, reason = "only a native run reads flags and grows scratch")
    )]
    step: usize,
    binding: Binding,
    bind_group: wgpu::BindGroup,
    workgroups: [u32; 3],
    repeat: Option<Repeat>,
}

/// The pipelines, uniforms and bind groups of one step's dispatches (those with no workgroups
/// left out).
fn recorded(
    gpu: &GpuBackend,
    s: usize,
    step: &Step,
    dispatches: &[Dispatch],
    scratch: &[wgpu::Buffer],
) -> Result<Vec<Recorded>> {
    let device = &gpu.device;
    let max_groups = device.limits().max_compute_workgroups_per_dimension;
    let mut out = Vec::new();
    for d in dispatches {
        if d.workgroups.contains(&0) {
            continue;
        }
        if d.workgroups.iter().any(|&w| w > max_groups) {
            return Err(Error::Gpu(format!(
                "{}: {:?} workgroups exceed this GPU's limit of {max_groups} per dimension",
                step.op.name(),
                d.workgroups
            )));
        }
        // Uniform buffers are at least 16 bytes and a multiple of 16.
        let mut params = d.params.clone();
        params.resize(params.len().div_ceil(4).max(1) * 4, 0);
        let binding = Binding {
            label: d.entry,
            pipeline: gpu.pipelines.get(device, d, gpu.subgroups),
            uniform: device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(d.entry),
                contents: bytemuck::cast_slice(&params),
                usage: wgpu::BufferUsages::UNIFORM,
            }),
            args: d.args.clone(),
            inputs: step.inputs.iter().map(|b| gpu_view(&b.buffer).clone()).collect(),
            outputs: step.outputs.iter().map(|b| gpu_view(&b.buffer).clone()).collect(),
        };
        binding.check_aliasing(step.op.name(), scratch)?;
        out.push(Recorded {
            step: s,
            bind_group: binding.bind(device, scratch),
            binding,
            workgroups: d.workgroups,
            repeat: d.repeat,
        });
    }
    Ok(out)
}

/// A candidate's name for people: each dispatch's entry point and the override constants that
/// are not off, e.g. `matmul_8x8_vec4 TILE=128 KSTEP=16`.
#[cfg(not(target_arch = "wasm32"))]
fn name(dispatches: &[Dispatch]) -> String {
    let named: Vec<String> = dispatches
        .iter()
        .map(|d| {
            let mut name = d.entry.to_string();
            for (constant, value) in d.constants.iter().filter(|c| c.1 != 0.0) {
                name += &format!(" {constant}={value}");
            }
            name
        })
        .collect();
    named.join(" + ")
}

/// A step's dispatches recorded: the op's own, or where the tuner is on and the op offers
/// same-bits alternatives (`Op::gpu_alternatives`), the fastest of them all, timed on the device
/// unless the tuner has timed the same set before. Alternatives that would need other scratch,
/// and any op whose dispatches repeat, are not timed.
#[cfg(not(target_arch = "wasm32"))]
fn tuned(
    gpu: &GpuBackend,
    s: usize,
    step: &Step,
    own: Vec<Dispatch>,
    own_scratch: &[usize],
    scratch: &[wgpu::Buffer],
) -> Result<Vec<Recorded>> {
    let repeats = |dispatches: &[Dispatch]| dispatches.iter().any(|d| d.repeat.is_some());
    if !gpu.tuner.is_on() || repeats(&own) {
        return recorded(gpu, s, step, &own, scratch);
    }
    let in_metas: Vec<_> = step.inputs.iter().map(|b| &b.meta).collect();
    let out_metas: Vec<_> = step.outputs.iter().map(|b| &b.meta).collect();
    let mut candidates = vec![own];
    candidates.extend(
        step.op
            .gpu_alternatives(gpu.kernels_for, &in_metas, &out_metas)
            .into_iter()
            .filter(|k| k.scratch == own_scratch && !repeats(&k.dispatches))
            .map(|k| k.dispatches),
    );
    if candidates.len() == 1 {
        return recorded(gpu, s, step, &candidates[0], scratch);
    }
    let named: Vec<Vec<_>> = candidates
        .iter()
        .map(|c| {
            c.iter()
                .map(|d| (d.entry, &d.constants, &d.params, d.workgroups))
                .collect()
        })
        .collect();
    let key = format!("{} {} {named:?}", step.op.name(), gpu.subgroups);
    if let Some(pick) = gpu.tuner.chosen(&key) {
        return recorded(gpu, s, step, &candidates[pick], scratch);
    }
    let started = Instant::now();
    let mut built: Vec<Vec<Recorded>> = candidates
        .iter()
        .map(|c| recorded(gpu, s, step, c, scratch))
        .collect::<Result<_>>()?;
    let shapes: Vec<String> = in_metas.iter().map(|m| format!("{:?}", m.shape)).collect();
    let what = format!("{} {}", step.op.name(), shapes.join(" "));
    let names = candidates.iter().map(|c| name(c)).collect();
    let pick = gpu.tuner.choose(key, what, names, started, |i, runs| {
        let start = Instant::now();
        let mut encoder = gpu.device.create_command_encoder(&Default::default());
        GpuProgram::record(&mut encoder, &built[i], 0..built[i].len(), runs, None);
        gpu.queue.submit([encoder.finish()]);
        gpu.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("timing {}'s kernels: {e}", step.op.name())))?;
        gpu.check_errors()?;
        Ok(start.elapsed().as_secs_f64())
    })?;
    Ok(built.swap_remove(pick))
}

pub(super) struct GpuProgram {
    device: wgpu::Device,
    queue: wgpu::Queue,
    dispatches: RefCell<Vec<Recorded>>,
    error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Each step's scratch buffers: they stay alive as long as the bind groups that use them, and
    /// a repeated kernel may ask for one to grow.
    #[cfg_attr(
        target_arch = "wasm32",
        expect(
            dead_code,
            reason = "held so the web does not destroy the buffers; never grown there"
        )
    )]
    scratch: RefCell<Vec<Vec<wgpu::Buffer>>>,
    /// For errors about a step's repeated kernel.
    #[cfg(not(target_arch = "wasm32"))]
    op_names: Vec<&'static str>,
    /// Where a repeated kernel's flag is copied to be read after each round.
    #[cfg(not(target_arch = "wasm32"))]
    flag_staging: wgpu::Buffer,
    /// With profiling on (natively): the time per op kind, and the timestamp queries that
    /// measure it where the device has them.
    #[cfg(not(target_arch = "wasm32"))]
    profile: Option<RefCell<Profile>>,
    #[cfg(not(target_arch = "wasm32"))]
    timestamps: Option<Timestamps>,
    /// Each step's work, when profiled.
    #[cfg(not(target_arch = "wasm32"))]
    work: Vec<Work>,
}

impl GpuProgram {
    pub fn new(gpu: &GpuBackend, program: &Program) -> Result<Self> {
        let device = &gpu.device;
        let mut dispatches = Vec::new();
        let mut scratch_all = Vec::new();
        for (s, step) in program.iter().enumerate() {
            let in_metas: Vec<_> = step.inputs.iter().map(|b| &b.meta).collect();
            let out_metas: Vec<_> = step.outputs.iter().map(|b| &b.meta).collect();
            let kernels = step.op.gpu(gpu.kernels_for, &in_metas, &out_metas);
            let scratch: Vec<wgpu::Buffer> = kernels
                .scratch
                .iter()
                .enumerate()
                .map(|(i, &words)| {
                    let label = format!("{} scratch {i}", step.op.name());
                    super::super::Backend::alloc(gpu, words, &label).map(|b| gpu_view(&b).buffer.clone())
                })
                .collect::<Result<_>>()?;
            // The web cannot wait for the GPU, so it never times candidates.
            #[cfg(not(target_arch = "wasm32"))]
            let chosen = tuned(gpu, s, step, kernels.dispatches, &kernels.scratch, &scratch)?;
            #[cfg(target_arch = "wasm32")]
            let chosen = recorded(gpu, s, step, &kernels.dispatches, &scratch)?;
            dispatches.extend(chosen);
            scratch_all.push(scratch);
        }
        #[cfg(not(target_arch = "wasm32"))]
        let timestamps = gpu
            .profile
            .then(|| Timestamps::new(device, &gpu.queue, dispatches.len()))
            .flatten();
        Ok(Self {
            device: device.clone(),
            queue: gpu.queue.clone(),
            dispatches: RefCell::new(dispatches),
            error: gpu.error.clone(),
            scratch: RefCell::new(scratch_all),
            #[cfg(not(target_arch = "wasm32"))]
            op_names: program.iter().map(|s| s.op.name()).collect(),
            #[cfg(not(target_arch = "wasm32"))]
            flag_staging: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("repeat flag"),
                size: 4,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            #[cfg(not(target_arch = "wasm32"))]
            profile: gpu.profile.then(|| {
                let clock = if timestamps.is_some() {
                    Clock::GpuTimestamps
                } else {
                    Clock::GpuWaited
                };
                RefCell::new(Profile::new(clock))
            }),
            #[cfg(not(target_arch = "wasm32"))]
            timestamps,
            #[cfg(not(target_arch = "wasm32"))]
            work: match gpu.profile {
                true => program.iter().map(Step::work).collect(),
                false => Vec::new(),
            },
        })
    }

    /// Records every dispatch in `range`, each `runs` times, into `encoder`: in one compute pass,
    /// or with `timestamps` in one pass per dispatch that writes its start and end.
    fn record(
        encoder: &mut wgpu::CommandEncoder,
        dispatches: &[Recorded],
        range: std::ops::Range<usize>,
        runs: usize,
        #[cfg(not(target_arch = "wasm32"))] timestamps: Option<&Timestamps>,
    ) {
        let dispatch = |pass: &mut wgpu::ComputePass<'_>, d: &Recorded| {
            pass.set_pipeline(&d.binding.pipeline);
            pass.set_bind_group(0, &d.bind_group, &[]);
            for _ in 0..runs {
                pass.dispatch_workgroups(d.workgroups[0], d.workgroups[1], d.workgroups[2]);
            }
        };
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(t) = timestamps {
            for i in range {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(t.writes(i)),
                });
                dispatch(&mut pass, &dispatches[i]);
            }
            return;
        }
        let mut pass = encoder.begin_compute_pass(&Default::default());
        for d in &dispatches[range] {
            dispatch(&mut pass, d);
        }
    }

    /// Submits the dispatches in `range` (none of them repeated). Profiled without timestamps,
    /// each is submitted alone and waited for, and timed on the host.
    fn submit(&self, range: std::ops::Range<usize>) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        if let (Some(profile), None) = (&self.profile, &self.timestamps) {
            for i in range {
                let start = Instant::now();
                let mut encoder = self.device.create_command_encoder(&Default::default());
                Self::record(&mut encoder, &self.dispatches.borrow(), i..i + 1, 1, None);
                self.queue.submit([encoder.finish()]);
                self.wait()?;
                let name = self.op_names[self.dispatches.borrow()[i].step];
                profile.borrow_mut().record(name, start.elapsed().as_secs_f64());
            }
            return Ok(());
        }
        let mut encoder = self.device.create_command_encoder(&Default::default());
        Self::record(
            &mut encoder,
            &self.dispatches.borrow(),
            range,
            1,
            #[cfg(not(target_arch = "wasm32"))]
            self.timestamps.as_ref(),
        );
        self.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// Blocks until the GPU has done everything submitted.
    #[cfg(not(target_arch = "wasm32"))]
    fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(drop)
            .map_err(|e| Error::Gpu(e.to_string()))
    }

    /// Profiling: the timestamps of this run's dispatches added per op kind (a repeated dispatch
    /// was timed on the host around its rounds).
    #[cfg(not(target_arch = "wasm32"))]
    fn finish_profile(&self) -> Result<()> {
        let Some(profile) = &self.profile else {
            return Ok(());
        };
        let mut profile = profile.borrow_mut();
        if let Some(t) = &self.timestamps {
            let seconds = t.read(&self.device, &self.queue)?;
            for (d, s) in self.dispatches.borrow().iter().zip(seconds) {
                if d.repeat.is_none() {
                    profile.record(self.op_names[d.step], s);
                }
            }
        }
        Ok(())
    }

    /// Runs repeated dispatch `i` until its flag says done: rounds of 1, 2, 4 … runs, the flag
    /// read back after each.
    #[cfg(not(target_arch = "wasm32"))]
    fn run_repeated(&self, i: usize, repeat: Repeat) -> Result<()> {
        let (mut done, mut round) = (0, 1);
        while done < repeat.max_runs {
            let runs = round.min(repeat.max_runs - done);
            let mut encoder = self.device.create_command_encoder(&Default::default());
            Self::record(&mut encoder, &self.dispatches.borrow(), i..i + 1, runs, None);
            let step = self.dispatches.borrow()[i].step;
            let (scratch, word) = repeat.flag;
            encoder.copy_buffer_to_buffer(
                &self.scratch.borrow()[step][scratch],
                word as u64 * 4,
                &self.flag_staging,
                0,
                4,
            );
            self.queue.submit([encoder.finish()]);
            done += runs;
            round = (round * 2).min(MAX_ROUND);
            match pollster::block_on(super::mapped_words(&self.device, &self.flag_staging))?[0] {
                REPEAT_GOING => {}
                REPEAT_DONE => return Ok(()),
                // The runs after the kernel filled its buffer did nothing: they do not count.
                REPEAT_FULL => match repeat.grows {
                    Some(g) => {
                        self.grow(step, g)?;
                        (done, round) = (done - runs, 1);
                    }
                    None => return Err(self.bad_flag(step, REPEAT_FULL)),
                },
                other => return Err(self.bad_flag(step, other)),
            }
        }
        Ok(())
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn bad_flag(&self, step: usize, flag: u32) -> Error {
        Error::Gpu(format!(
            "{}: a repeated kernel wrote the unknown flag {flag}",
            self.op_names[step]
        ))
    }

    /// Doubles scratch buffer `g` of `step`, keeping its contents, and rebinds the step's dispatches.
    #[cfg(not(target_arch = "wasm32"))]
    fn grow(&self, step: usize, g: usize) -> Result<()> {
        let old = self.scratch.borrow()[step][g].clone();
        let bytes = old.size() * 2;
        let limit = self.device.limits().max_storage_buffer_binding_size;
        if bytes > limit {
            return Err(Error::Gpu(format!(
                "{}: scratch {g} is full at {} bytes, and doubling it would pass this GPU's binding \
                 limit of {limit} bytes",
                self.op_names[step],
                old.size(),
            )));
        }
        let new = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("grown scratch"),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&old, 0, &new, 0, old.size());
        self.queue.submit([encoder.finish()]);
        self.scratch.borrow_mut()[step][g] = new;
        let scratch = self.scratch.borrow();
        for d in self.dispatches.borrow_mut().iter_mut().filter(|d| d.step == step) {
            d.bind_group = d.binding.bind(&self.device, &scratch[step]);
        }
        Ok(())
    }
}

impl Compiled for GpuProgram {
    fn dispatches(&self) -> Option<usize> {
        Some(self.dispatches.borrow().len())
    }

    fn profile(&self) -> Option<Profile> {
        #[cfg(not(target_arch = "wasm32"))]
        return self.profile.as_ref().map(|p| p.borrow().clone());
        #[cfg(target_arch = "wasm32")]
        None
    }

    fn run(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(profile) = &self.profile {
            let mut profile = profile.borrow_mut();
            profile.start_run();
            for (name, work) in self.op_names.iter().zip(&self.work) {
                profile.count(name, *work);
            }
        }
        let count = self.dispatches.borrow().len();
        let mut start = 0;
        while start < count {
            // The dispatches up to the next repeated one, in one submission.
            let next = (start..count)
                .find(|&i| self.dispatches.borrow()[i].repeat.is_some())
                .unwrap_or(count);
            self.submit(start..next)?;
            if next == count {
                break;
            }
            let repeat = self.dispatches.borrow()[next].repeat.expect("found above");
            #[cfg(target_arch = "wasm32")]
            {
                let mut encoder = self.device.create_command_encoder(&Default::default());
                Self::record(
                    &mut encoder,
                    &self.dispatches.borrow(),
                    next..next + 1,
                    repeat.max_runs,
                );
                self.queue.submit([encoder.finish()]);
            }
            #[cfg(not(target_arch = "wasm32"))]
            match &self.profile {
                Some(profile) => {
                    // Timed on the host: the work before it first, so that it is not counted.
                    self.wait()?;
                    let started = Instant::now();
                    self.run_repeated(next, repeat)?;
                    let name = self.op_names[self.dispatches.borrow()[next].step];
                    profile.borrow_mut().record(name, started.elapsed().as_secs_f64());
                }
                None => self.run_repeated(next, repeat)?,
            }
            start = next + 1;
        }
        #[cfg(not(target_arch = "wasm32"))]
        self.finish_profile()?;
        match self.error.lock().expect("error lock").take() {
            Some(e) => Err(Error::Gpu(e)),
            None => Ok(()),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for GpuProgram {
    fn drop(&mut self) {
        // A program run once (an evaluation set of one batch) has nothing counted.
        if let Some(profile) = self.profile.as_ref().filter(|p| p.borrow().runs > 0) {
            eprint!("{}", profile.borrow());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::backend::{Bound, Buffer, Step};
    use crate::ops::elementwise::Scale;
    use crate::tensor::TensorMeta;
    use crate::testing::gpu;

    /// x → 2x between two buffers; a part of one arena may be read while another arena's part is
    /// written, but not beside a written part of its own arena, nor written where it is read.
    #[test]
    fn a_dispatch_may_not_write_a_buffer_it_also_binds_elsewhere() {
        let Some(gpu) = gpu() else { return };
        let bound = |buffer: &Buffer| Bound {
            name: "x".into(),
            meta: TensorMeta::f32(&[4]),
            buffer: buffer.clone(),
        };
        let scale = |from: &Buffer, to: &Buffer| {
            let step = Step {
                op: Rc::new(Scale(2.0)),
                inputs: vec![bound(from)],
                outputs: vec![bound(to)],
            };
            gpu.compile(&vec![step]).map(|_| ())
        };
        let parts = |label: &str| {
            let parts = [(4, format!("{label}0")), (4, format!("{label}1"))];
            gpu.alloc_packed(&parts).unwrap()
        };
        let (a, b) = (parts("a"), parts("b"));
        assert!(scale(&a[0], &b[1]).is_ok());
        for (from, to) in [(&a[0], &a[1]), (&a[0], &a[0])] {
            let err = scale(from, to).unwrap_err().to_string();
            assert!(err.contains("scale") && err.contains("WebGPU refuses"), "{err}");
        }
    }
}
