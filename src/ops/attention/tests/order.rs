//! The CPU kernels against the definition's order of operations, bit for bit: each score summed
//! over the head dimension ascending from 0, each softmax total and each weighted sum over keys
//! (or, for dk and dv, over queries) ascending from 0. However the kernels lay the work out (rows
//! in groups, queries in vector lanes, padded tiles), every number must be the same sequence of
//! roundings, so that a kernel change leaves training runs equal to the bit.

use super::super::{Attention, AttentionBackward, BiasKind};
use crate::graph::Op;
use crate::kernel::{In, Out};
use crate::math;
use crate::ops::dropout::DropMask;
use crate::ops::unary::exp;
use crate::tensor::TensorMeta;

/// The bias of a [`Problem`].
#[derive(Clone, Copy, Debug)]
enum Bias {
    None,
    /// `[H, Lq, Lk]`.
    Dense,
    /// A table `[buckets, H]` read through the bucket of each offset.
    PerOffset,
    /// A table read through the bucket of each (query, key) pair.
    PerPair,
}

const BUCKETS: usize = 7;

/// One attention problem with every input filled, and the op that computes it.
#[derive(Debug)]
struct Problem {
    dims: [usize; 5],
    causal: bool,
    bias: Bias,
    lengths: Option<Vec<usize>>,
    dropout: Option<DropMask>,
}

/// A value that makes every rounding visible, with exact zeros of both signs now and then.
fn value(i: usize) -> f32 {
    match i % 23 {
        0 => 0.0,
        11 => -0.0,
        _ => ((i * 7919 % 2003) as f32 - 1001.0) / 409.0,
    }
}

fn ints_as_f32(x: &[i32]) -> Vec<f32> {
    x.iter().map(|&v| f32::from_bits(v as u32)).collect()
}

impl Problem {
    fn new(dims: [usize; 5]) -> Self {
        Self {
            dims,
            causal: false,
            bias: Bias::None,
            lengths: None,
            dropout: None,
        }
    }

    fn op(&self) -> Attention {
        Attention {
            causal: self.causal,
            scale: 1.0 / (self.dims[4] as f32).sqrt(),
            bias: match self.bias {
                Bias::None => BiasKind::None,
                Bias::Dense => BiasKind::Dense,
                Bias::PerOffset | Bias::PerPair => BiasKind::Bucketed { trained: true },
            },
            has_key_mask: self.lengths.is_some(),
            dropout: self.dropout,
        }
    }

    /// The inputs in the op's order, each with its shape.
    fn inputs(&self) -> Vec<(TensorMeta, Vec<f32>)> {
        let [b, h, lq, lk, dh] = self.dims;
        let filled = |shape: &[usize], from: usize| {
            let n = shape.iter().product::<usize>();
            (TensorMeta::f32(shape), (from..from + n).map(value).collect())
        };
        let mut inputs = vec![
            filled(&[b, h, lq, dh], 0),
            filled(&[b, h, lk, dh], 100_000),
            filled(&[b, h, lk, dh], 200_000),
        ];
        let buckets = |n: usize| ints_as_f32(&(0..n).map(|t| (t * 5 % BUCKETS) as i32).collect::<Vec<_>>());
        match self.bias {
            Bias::None => {}
            Bias::Dense => inputs.push(filled(&[h, lq, lk], 300_000)),
            Bias::PerOffset => {
                inputs.push(filled(&[BUCKETS, h], 300_000));
                inputs.push((TensorMeta::i32(&[lq + lk - 1]), buckets(lq + lk - 1)));
            }
            Bias::PerPair => {
                inputs.push(filled(&[BUCKETS, h], 300_000));
                inputs.push((TensorMeta::i32(&[lq, lk]), buckets(lq * lk)));
            }
        }
        if let Some(lengths) = &self.lengths {
            let mask: Vec<i32> = lengths
                .iter()
                .flat_map(|&n| (0..lk).map(move |j| i32::from(j < n)))
                .collect();
            inputs.push((TensorMeta::i32(&[b, lk]), ints_as_f32(&mask)));
        }
        if self.dropout.is_some() {
            inputs.push((TensorMeta::i32(&[1]), ints_as_f32(&[1234])));
        }
        inputs
    }

    /// Query i of (b, h)'s scores by the definition: −∞ where hidden.
    fn scores(&self, inputs: &[(TensorMeta, Vec<f32>)], bh: usize, i: usize) -> Vec<f32> {
        let [_, h, lq, lk, dh] = self.dims;
        let (q, k) = (&inputs[0].1, &inputs[1].1);
        let scale = self.op().scale;
        let end = self.key_end(i);
        let visible = |j: usize| j < end && self.lengths.as_ref().is_none_or(|lengths| j < lengths[bh / h]);
        let ids = |t: usize| inputs[4].1[t].to_bits() as usize;
        let bias = |j: usize| match self.bias {
            Bias::None => 0.0,
            Bias::Dense => inputs[3].1[((bh % h) * lq + i) * lk + j],
            Bias::PerOffset => inputs[3].1[ids(lq - 1 - i + j) * h + bh % h],
            Bias::PerPair => inputs[3].1[ids(i * lk + j) * h + bh % h],
        };
        (0..lk)
            .map(|j| {
                if !visible(j) {
                    return f32::NEG_INFINITY;
                }
                let dot = (0..dh).fold(0.0f32, |s, d| {
                    s + q[(bh * lq + i) * dh + d] * k[(bh * lk + j) * dh + d]
                });
                dot * scale + bias(j)
            })
            .collect()
    }

    fn key_end(&self, i: usize) -> usize {
        let [_, _, lq, lk, _] = self.dims;
        if self.causal {
            (i + 1 + lk).saturating_sub(lq).min(lk)
        } else {
            lk
        }
    }

    /// Query row `row`'s dropout factors over its keys (1 without dropout).
    fn factors(&self, row: usize) -> Vec<f32> {
        let lk = self.dims[3];
        (0..lk)
            .map(|j| match self.dropout {
                Some(mask) => mask.factor(mask.stream(1234), row * lk + j),
                None => 1.0,
            })
            .collect()
    }

    /// out and lse by the definition.
    fn forward(&self, inputs: &[(TensorMeta, Vec<f32>)]) -> (Vec<f32>, Vec<f32>) {
        let [b, h, lq, lk, dh] = self.dims;
        let v = &inputs[2].1;
        let (mut out, mut lse) = (vec![0.0; b * h * lq * dh], vec![0.0; b * h * lq]);
        for bh in 0..b * h {
            for i in 0..lq {
                let row = bh * lq + i;
                let s = self.scores(inputs, bh, i);
                let end = self.key_end(i);
                let max = s[..end].iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut p = vec![0.0f32; lk];
                if max == f32::NEG_INFINITY {
                    lse[row] = f32::NEG_INFINITY;
                } else {
                    let e: Vec<f32> = s[..end].iter().map(|&s| exp(s - max)).collect();
                    let total = e.iter().fold(0.0f32, |t, &e| t + e);
                    let z = self.factors(row);
                    for j in 0..end {
                        p[j] = e[j] / total;
                        if self.dropout.is_some() {
                            p[j] *= z[j];
                        }
                    }
                    lse[row] = max + math::ln(total);
                }
                for d in 0..dh {
                    out[row * dh + d] = (0..end).fold(0.0f32, |a, j| a + p[j] * v[(bh * lk + j) * dh + d]);
                }
            }
        }
        (out, lse)
    }

    /// dq, dk, dv and the bias's gradient by the definition, from `dout`.
    fn backward(
        &self,
        inputs: &[(TensorMeta, Vec<f32>)],
        out: &[f32],
        lse: &[f32],
        dout: &[f32],
    ) -> Vec<Vec<f32>> {
        let [b, h, lq, lk, dh] = self.dims;
        let (q, k, v) = (&inputs[0].1, &inputs[1].1, &inputs[2].1);
        let scale = self.op().scale;
        // dS and P ∘ Z of every row, [B·H·Lq, Lk].
        let (mut ds, mut pz) = (vec![0.0f32; b * h * lq * lk], vec![0.0f32; b * h * lq * lk]);
        for bh in 0..b * h {
            for i in 0..lq {
                let row = bh * lq + i;
                let s = self.scores(inputs, bh, i);
                let z = self.factors(row);
                let go = &dout[row * dh..][..dh];
                let delta: f32 = go.iter().zip(&out[row * dh..][..dh]).map(|(a, b)| a * b).sum();
                for j in 0..self.key_end(i) {
                    if s[j] == f32::NEG_INFINITY {
                        continue;
                    }
                    let p = exp(s[j] - lse[row]);
                    let dp = (0..dh).fold(0.0f32, |a, d| a + go[d] * v[(bh * lk + j) * dh + d]);
                    pz[row * lk + j] = p * z[j];
                    ds[row * lk + j] = p * (z[j] * dp - delta);
                }
            }
        }
        let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
        let scaled: Vec<f32> = ds.iter().map(|&ds| ds * scale).collect();
        for bh in 0..b * h {
            for i in 0..lq {
                let row = bh * lq + i;
                for d in 0..dh {
                    dq[row * dh + d] = (0..self.key_end(i)).fold(0.0f32, |a, j| {
                        a + scaled[row * lk + j] * k[(bh * lk + j) * dh + d]
                    });
                }
            }
            for j in 0..lk {
                let start = if self.causal {
                    (j + lq).saturating_sub(lk)
                } else {
                    0
                };
                for d in 0..dh {
                    let sum = |w: &[f32], x: &[f32]| {
                        (start..lq).fold(0.0f32, |a, i| {
                            a + w[(bh * lq + i) * lk + j] * x[(bh * lq + i) * dh + d]
                        })
                    };
                    dk[(bh * lk + j) * dh + d] = sum(&scaled, q);
                    dv[(bh * lk + j) * dh + d] = sum(&pz, dout);
                }
            }
        }
        let mut grads = vec![dq, dk, dv];
        match self.bias {
            Bias::None => {}
            Bias::Dense => grads.push(
                (0..h * lq * lk)
                    .map(|t| {
                        let (hh, ij) = (t / (lq * lk), t % (lq * lk));
                        (0..b).fold(0.0f32, |a, bb| a + ds[(bb * h + hh) * lq * lk + ij])
                    })
                    .collect(),
            ),
            Bias::PerOffset | Bias::PerPair => {
                let ids = |t: usize| inputs[4].1[t].to_bits() as usize;
                let mut sums = vec![0.0f32; b * h * lq * BUCKETS];
                for row in 0..b * h * lq {
                    let i = row % lq;
                    for j in 0..self.key_end(i) {
                        let id = match self.bias {
                            Bias::PerOffset => ids(lq - 1 - i + j),
                            _ => ids(i * lk + j),
                        };
                        sums[row * BUCKETS + id] += ds[row * lk + j];
                    }
                }
                grads.push(sums);
            }
        }
        grads
    }
}

/// Runs `op`'s CPU kernel on `inputs` into outputs of `metas`, each first filled with NaN (so an
/// element left unwritten shows).
fn run(op: &dyn Op, inputs: &[(TensorMeta, Vec<f32>)], metas: &[TensorMeta]) -> Vec<Vec<f32>> {
    let ins: Vec<In> = inputs.iter().map(|(meta, data)| In { meta, data }).collect();
    let mut datas: Vec<Vec<f32>> = metas.iter().map(|m| vec![f32::NAN; m.numel()]).collect();
    let mut outs: Vec<Out> = metas
        .iter()
        .zip(&mut datas)
        .map(|(meta, data)| Out { meta, data })
        .collect();
    op.cpu(&ins, &mut outs);
    drop(outs);
    datas
}

fn assert_bits(name: &str, problem: &Problem, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{name} of {problem:?}");
    for (t, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{name} of {problem:?}: element {t} is {g}, the definition's order gives {w}"
        );
    }
}

fn problems() -> Vec<Problem> {
    let mask = DropMask::new("attention", 0.25, 9).unwrap();
    let with = |dims, f: &dyn Fn(&mut Problem)| {
        let mut p = Problem::new(dims);
        f(&mut p);
        p
    };
    vec![
        // The Chomsky studies' training shape, each option alone and together.
        with([2, 3, 20, 20, 8], &|_| {}),
        with([2, 3, 20, 20, 8], &|p| p.lengths = Some(vec![20, 13])),
        with([2, 3, 20, 20, 8], &|p| p.dropout = Some(mask)),
        with([2, 3, 20, 20, 8], &|p| p.bias = Bias::Dense),
        with([2, 3, 22, 22, 8], &|p| {
            p.bias = Bias::PerPair;
            p.lengths = Some(vec![17, 22]);
            p.dropout = Some(mask);
        }),
        // Causal, square and with queries past the keys (the first rows see no key), a fully
        // padded entry, heads of 5, 16 and 32, lengths of one, of 17, past 32, 64 and 256.
        with([2, 2, 33, 33, 16], &|p| p.causal = true),
        with([1, 2, 40, 7, 8], &|p| p.causal = true),
        with([1, 2, 7, 40, 8], &|p| p.causal = true),
        with([3, 2, 17, 17, 8], &|p| {
            p.lengths = Some(vec![17, 0, 5]);
            p.bias = Bias::PerOffset;
        }),
        with([1, 3, 1, 1, 8], &|_| {}),
        with([2, 1, 70, 70, 5], &|p| {
            p.causal = true;
            p.bias = Bias::PerOffset;
            p.dropout = Some(mask);
        }),
        with([1, 2, 45, 31, 32], &|p| p.bias = Bias::Dense),
        with([1, 1, 300, 300, 8], &|p| p.lengths = Some(vec![290])),
    ]
}

#[test]
fn cpu_forward_is_the_definitions_order_to_the_bit() {
    for problem in problems() {
        let inputs = problem.inputs();
        let metas: Vec<&TensorMeta> = inputs.iter().map(|(m, _)| m).collect();
        let op = problem.op();
        let got = run(&op, &inputs, &op.infer(&metas).unwrap());
        let (out, lse) = problem.forward(&inputs);
        assert_bits("out", &problem, &got[0], &out);
        assert_bits("lse", &problem, &got[1], &lse);
    }
}

#[test]
fn cpu_backward_is_the_definitions_order_to_the_bit() {
    for problem in problems() {
        let mut inputs = problem.inputs();
        let (out, lse) = problem.forward(&inputs);
        let dout: Vec<f32> = (0..out.len()).map(|t| value(t + 500_000)).collect();
        let want = problem.backward(&inputs, &out, &lse, &dout);
        let [b, h, lq, _, dh] = problem.dims;
        inputs.push((TensorMeta::f32(&[b, h, lq, dh]), out));
        inputs.push((TensorMeta::f32(&[b, h, lq]), lse));
        inputs.push((TensorMeta::f32(&[b, h, lq, dh]), dout));
        let metas: Vec<&TensorMeta> = inputs.iter().map(|(m, _)| m).collect();
        let op = AttentionBackward(problem.op());
        let got = run(&op, &inputs, &op.infer(&metas).unwrap());
        for (name, (got, want)) in ["dq", "dk", "dv", "the bias's gradient"]
            .iter()
            .zip(got.iter().zip(&want))
        {
            assert_bits(name, &problem, got, want);
        }
        assert_eq!(got.len(), want.len(), "{problem:?}: outputs");
    }
}
