//! Tensor metadata: shape and element type. Data lives in backend buffers, never here.

use std::fmt;

use crate::error::{Result, shape_err};

/// Element type. Both are four bytes, so every buffer is a run of 32-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    F32,
    /// Token ids and targets.
    I32,
}

/// The shape and dtype of one tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl TensorMeta {
    pub fn f32(shape: &[usize]) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype: DType::F32,
        }
    }

    pub fn i32(shape: &[usize]) -> Self {
        Self {
            shape: shape.to_vec(),
            dtype: DType::I32,
        }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// (rows, row length): the tensor seen as rows of its last axis, as row-wise ops see it.
    pub fn rows(&self) -> (usize, usize) {
        let len = self.shape.last().copied().unwrap_or(1);
        (self.numel() / len.max(1), len)
    }
}

/// Tensors' metadata as an error message lists them: `[2, 3], [4] i32`.
pub fn list_metas(metas: &[&TensorMeta]) -> String {
    metas.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for TensorMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}{}",
            self.shape,
            if self.dtype == DType::I32 { " i32" } else { "" }
        )
    }
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// NumPy broadcasting of two shapes, aligned at the right.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for (i, o) in out.iter_mut().enumerate() {
        let da = dim_from_right(a, rank - 1 - i);
        let db = dim_from_right(b, rank - 1 - i);
        *o = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return shape_err(op, format!("cannot broadcast shapes {a:?} and {b:?}")),
        };
    }
    Ok(out)
}

fn dim_from_right(shape: &[usize], from_right: usize) -> usize {
    if from_right < shape.len() {
        shape[shape.len() - 1 - from_right]
    } else {
        1
    }
}

/// Strides that read `shape` as if broadcast to `out` (0 on broadcast axes), right-aligned.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(shape);
    let offset = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < offset || shape[i - offset] == 1 {
                0
            } else {
                own[i - offset]
            }
        })
        .collect()
}

/// The element offset of row-major index `i` of `shape`, read through `strides` (which may be 0 on
/// broadcast axes or permuted for a transpose).
pub fn strided_offset(mut i: usize, shape: &[usize], strides: &[usize]) -> usize {
    let mut offset = 0;
    for d in (0..shape.len()).rev() {
        offset += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    offset
}

/// Largest rank the GPU kernels index (shapes travel in two vec4s).
pub const MAX_RANK: usize = 8;

/// (outer, axis length, inner) of a row-major shape split at `axis`.
pub(crate) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes("t", &[3, 1, 5], &[4, 1]).unwrap(), vec![3, 4, 5]);
        assert_eq!(broadcast_shapes("t", &[], &[2, 3]).unwrap(), vec![2, 3]);
        let err = broadcast_shapes("add", &[3, 2], &[4]).unwrap_err().to_string();
        assert!(
            err.contains("add") && err.contains("[3, 2]") && err.contains("[4]"),
            "{err}"
        );
        assert_eq!(broadcast_strides(&[4, 1], &[3, 4, 5]), vec![0, 1, 0]);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}
