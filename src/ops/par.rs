//! The CPU references' parallel loops, shared by every op: work split across rayon's threads in
//! chunks large enough to be worth a thread.

use rayon::prelude::*;

use crate::vector::vectorised_fn;

/// Work below this many elements is not worth splitting across threads.
pub(crate) const PAR_CHUNK: usize = 1 << 14;

/// out[i] = f(i) for every element, split across threads in chunks.
pub(crate) fn par_fill(out: &mut [f32], f: impl Fn(usize) -> f32 + Sync) {
    out.par_chunks_mut(PAR_CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| fill_chunk(chunk, c * PAR_CHUNK, &f));
}

/// out[i] = f(i, x[i]) for every element (`x` as long as `out`), split across threads in chunks.
/// The element comes with its index rather than being read as `x[i]` in `f`, whose bounds check
/// kept such a loop scalar.
pub(crate) fn par_map_indexed(out: &mut [f32], x: &[f32], f: impl Fn(usize, f32) -> f32 + Sync) {
    assert_eq!(out.len(), x.len(), "par_map_indexed: out and x differ in length");
    out.par_chunks_mut(PAR_CHUNK)
        .zip(x.par_chunks(PAR_CHUNK))
        .enumerate()
        .for_each(|(c, (out, x))| map_chunk(out, x, c * PAR_CHUNK, &f));
}

vectorised_fn! {
    fn map_chunk(out: &mut [f32], x: &[f32], first: usize, f: &impl Fn(usize, f32) -> f32) {
        for (j, (o, &x)) in out.iter_mut().zip(x).enumerate() {
            *o = f(first + j, x);
        }
    }
}

vectorised_fn! {
    fn fill_chunk(out: &mut [f32], first: usize, f: &impl Fn(usize) -> f32) {
        for (j, o) in out.iter_mut().enumerate() {
            *o = f(first + j);
        }
    }
}

/// f(row, out_row) for every row of `len` elements of `out`, rows split across threads in
/// chunks of about [`PAR_CHUNK`] elements.
pub(crate) fn par_rows(out: &mut [f32], len: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let len = len.max(1);
    let rows = (PAR_CHUNK / len).max(1);
    out.par_chunks_mut(rows * len)
        .enumerate()
        .for_each(|(c, chunk)| rows_chunk(chunk, len, c * rows, &f));
}

vectorised_fn! {
    fn rows_chunk(out: &mut [f32], len: usize, first: usize, f: &impl Fn(usize, &mut [f32])) {
        for (r, row) in out.chunks_mut(len).enumerate() {
            f(first + r, row);
        }
    }
}
