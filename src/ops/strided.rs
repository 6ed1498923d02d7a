//! CPU loops over strided views (broadcast operands, permuted inputs): they walk whole rows of
//! the innermost axis, with the axes merged where every operand allows, instead of dividing out
//! each element's coordinates.

use rayon::prelude::*;

use super::par::PAR_CHUNK;

/// `shape` with size-1 axes dropped and neighbouring axes merged wherever every operand steps
/// through them as through one axis; `strides[o]` are operand o's strides over `shape`. Returns
/// the merged shape (at least one axis) and each operand's strides over it.
fn collapse<const N: usize>(shape: &[usize], strides: [&[usize]; N]) -> (Vec<usize>, [Vec<usize>; N]) {
    let mut merged: Vec<usize> = Vec::with_capacity(shape.len());
    let mut merged_strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::with_capacity(shape.len()));
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        // Axes p, d merge when one step along p is `size` steps along d for every operand.
        let joins = !merged.is_empty()
            && merged_strides
                .iter()
                .zip(&strides)
                .all(|(m, s)| m[m.len() - 1] == s[d] * size);
        if joins {
            *merged.last_mut().expect("not empty") *= size;
            for (m, s) in merged_strides.iter_mut().zip(&strides) {
                *m.last_mut().expect("not empty") = s[d];
            }
        } else {
            merged.push(size);
            for (m, s) in merged_strides.iter_mut().zip(&strides) {
                m.push(s[d]);
            }
        }
    }
    if merged.is_empty() {
        merged.push(1);
        for m in &mut merged_strides {
            m.push(0);
        }
    }
    (merged, merged_strides)
}

/// Calls `f(starts, steps, out_row)` for every row of the innermost merged axis of `out`, whose
/// row-major shape is `shape`: operand o's elements for that row are at `starts[o] + j·steps[o]`.
/// Rows are split across threads in chunks of about [`PAR_CHUNK`] elements.
pub(crate) fn par_strided_rows<const N: usize>(
    out: &mut [f32],
    shape: &[usize],
    strides: [&[usize]; N],
    f: impl Fn([usize; N], [usize; N], &mut [f32]) + Sync,
) {
    if out.is_empty() {
        return;
    }
    let (shape, strides) = collapse(shape, strides);
    let (outer, inner) = shape.split_at(shape.len() - 1);
    let len = inner[0];
    let steps: [usize; N] = std::array::from_fn(|o| strides[o][outer.len()]);
    let rows_per_chunk = (PAR_CHUNK / len).max(1);
    out.par_chunks_mut(rows_per_chunk * len)
        .enumerate()
        .for_each(|(c, chunk)| {
            // The coordinates of the chunk's first row over the outer axes, then an odometer.
            let mut coords = vec![0; outer.len()];
            let mut rest = c * rows_per_chunk;
            for d in (0..outer.len()).rev() {
                coords[d] = rest % outer[d];
                rest /= outer[d];
            }
            let mut starts: [usize; N] =
                std::array::from_fn(|o| coords.iter().zip(&strides[o]).map(|(c, s)| c * s).sum());
            for row in chunk.chunks_mut(len) {
                f(starts, steps, row);
                for d in (0..outer.len()).rev() {
                    coords[d] += 1;
                    if coords[d] < outer[d] {
                        for (start, s) in starts.iter_mut().zip(&strides) {
                            *start += s[d];
                        }
                        break;
                    }
                    coords[d] = 0;
                    for (start, s) in starts.iter_mut().zip(&strides) {
                        *start -= s[d] * (outer[d] - 1);
                    }
                }
            }
        });
}

/// out[i] = x[offset of i through `src_strides`] for a row-major `out` of `shape`.
pub(crate) fn par_gather(out: &mut [f32], x: &[f32], shape: &[usize], src_strides: &[usize]) {
    par_strided_rows(out, shape, [src_strides], |[start], [step], row| match step {
        1 => row.copy_from_slice(&x[start..start + row.len()]),
        0 => row.fill(x[start]),
        _ => {
            for (j, o) in row.iter_mut().enumerate() {
                *o = x[start + j * step];
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{collapse, par_gather};
    use crate::tensor::{broadcast_strides, strided_offset};

    #[test]
    fn contiguous_axes_merge_and_broadcast_axes_stay() {
        let (shape, [a, b]) = collapse(&[2, 3, 1, 4], [&[12, 4, 4, 1], &[0, 0, 0, 1]]);
        assert_eq!((shape, a, b), (vec![6, 4], vec![4, 1], vec![0, 1]));
        let (shape, [a]) = collapse(&[1, 1], [&[1, 1]]);
        assert_eq!((shape, a), (vec![1], vec![0]));
    }

    /// Against the per-element offset formula, on shapes that span several chunks and rows
    /// that cross chunk boundaries.
    #[test]
    fn gathers_match_the_per_element_offsets() {
        let cases: [(&[usize], &[usize]); 4] = [
            (&[3, 37, 5, 91], &[0, 2, 1, 3]),
            (&[7, 1, 300], &[2, 0, 1]),
            (&[5, 64, 129], &[1, 2, 0]),
            (&[2, 3, 4, 5], &[3, 1, 0, 2]),
        ];
        for (in_shape, perm) in cases {
            let n: usize = in_shape.iter().product();
            let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let own = crate::tensor::strides(in_shape);
            let shape: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
            let src: Vec<usize> = perm.iter().map(|&p| own[p]).collect();
            let mut out = vec![f32::NAN; n];
            par_gather(&mut out, &x, &shape, &src);
            let expected: Vec<f32> = (0..n).map(|i| x[strided_offset(i, &shape, &src)]).collect();
            assert_eq!(out, expected, "permute {perm:?} of {in_shape:?}");
        }
        let (x_shape, shape) = ([3, 1, 5], [4, 3, 6000, 5]);
        let x: Vec<f32> = (0..15).map(|i| i as f32).collect();
        let src = broadcast_strides(&x_shape, &shape);
        let n: usize = shape.iter().product();
        let mut out = vec![f32::NAN; n];
        par_gather(&mut out, &x, &shape, &src);
        let expected: Vec<f32> = (0..n).map(|i| x[strided_offset(i, &shape, &src)]).collect();
        assert_eq!(out, expected, "broadcast of {x_shape:?} to {shape:?}");
    }
}
