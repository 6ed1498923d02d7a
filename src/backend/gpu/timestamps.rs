//! GPU timestamps around every dispatch of a profiled program: each dispatch gets its own compute
//! pass whose start and end write a timestamp (WebGPU's `timestamp-query`, Vulkan's
//! `vkCmdWriteTimestamp`), resolved and read back after the run.

use crate::error::Result;

/// Dispatches per query set: two queries each, and a set holds at most `QUERY_SET_MAX_QUERIES`.
const PER_SET: usize = (wgpu::QUERY_SET_MAX_QUERIES / 2) as usize;

/// Bytes a resolved query takes.
const QUERY_BYTES: u64 = wgpu::QUERY_SIZE as u64;

pub(super) struct Timestamps {
    sets: Vec<wgpu::QuerySet>,
    dispatches: usize,
    resolve: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
}

impl Timestamps {
    /// Query sets for `dispatches` dispatches, where the device has timestamp queries.
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue, dispatches: usize) -> Option<Self> {
        if dispatches == 0 || !device.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
            return None;
        }
        let sets = (0..dispatches.div_ceil(PER_SET))
            .map(|k| {
                let count = (dispatches - k * PER_SET).min(PER_SET);
                device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("dispatch timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * count as u32,
                })
            })
            .collect();
        let bytes = 2 * dispatches as u64 * QUERY_BYTES;
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps resolved"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Some(Self {
            sets,
            dispatches,
            resolve,
            staging,
            period_ns: f64::from(queue.get_timestamp_period()),
        })
    }

    /// Where dispatch `i`'s pass writes its start and end.
    pub fn writes(&self, i: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        let first = 2 * (i % PER_SET) as u32;
        wgpu::ComputePassTimestampWrites {
            query_set: &self.sets[i / PER_SET],
            beginning_of_pass_write_index: Some(first),
            end_of_pass_write_index: Some(first + 1),
        }
    }

    /// Each dispatch's seconds in the run just submitted (only those whose pass wrote its
    /// timestamps mean anything).
    pub fn read(&self, device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Vec<f64>> {
        let mut encoder = device.create_command_encoder(&Default::default());
        for (k, set) in self.sets.iter().enumerate() {
            let count = (self.dispatches - k * PER_SET).min(PER_SET) as u32;
            // PER_SET queries' bytes are a multiple of the 256-byte resolve alignment.
            let offset = (k * PER_SET) as u64 * 2 * QUERY_BYTES;
            encoder.resolve_query_set(set, 0..2 * count, &self.resolve, offset);
        }
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.staging, 0, self.staging.size());
        queue.submit([encoder.finish()]);
        let words = pollster::block_on(super::mapped_words(device, &self.staging))?;
        let tick = |w: &[u32]| u64::from(w[0]) | (u64::from(w[1]) << 32);
        Ok(words
            .chunks_exact(4)
            .map(|q| tick(&q[2..]).saturating_sub(tick(&q[..2])) as f64 * self.period_ns * 1e-9)
            .collect())
    }
}
