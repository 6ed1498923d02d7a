use std::collections::BTreeMap;
use std::rc::Rc;

use super::{AttentionBackward, AttentionBias, AttentionOpts, BucketedBias};
use crate::backend::Backend;
use crate::exec::Executor;
use crate::graph::Op;
use crate::graph::{Graph, TensorId};
use crate::kernel::AdapterKind;
use crate::model::posenc::{alibi_table, buckets_by_offset};
use crate::params::ParamStore;
use crate::tensor::TensorMeta;
use crate::testing::*;

mod order;
mod relative;

/// The dropout site of the [`Case`]s with dropout.
const DROPOUT_SALT: u32 = 5;

/// The bias of a [`Case`].
#[derive(Clone)]
enum Bias {
    None,
    /// The parameter `bias` `[H, Lq, Lk]`.
    Dense,
    /// The parameter `table` `[buckets, H]` and the input `buckets` `[Lq + Lk − 1]` (or
    /// `[Lq, Lk]`, `per_pair`) with these values.
    Bucketed {
        buckets: usize,
        ids: Vec<i32>,
        per_pair: bool,
    },
    /// ALiBi: the input `table` `[2L − 1, H]` (`alibi_table`, no gradient) and the identity
    /// `buckets`.
    PerOffset,
}

/// One attention problem: q, k, v (and the bias's table) are parameters, the key mask (and the
/// relative bias's buckets) inputs.
#[derive(Clone)]
struct Case {
    /// q's `[B, H, Lq, Dh]`.
    shape: [usize; 4],
    /// Lk, when it is not Lq.
    k_len: Option<usize>,
    causal: bool,
    bias: Bias,
    /// Real tokens per batch entry; the rest of each row of the key mask is padding.
    lengths: Option<Vec<usize>>,
    scale: f32,
    /// Dropout on the probabilities: its probability and the step's seed.
    dropout: Option<(f32, i32)>,
}

impl Case {
    fn new(shape: [usize; 4]) -> Self {
        Self {
            shape,
            k_len: None,
            causal: false,
            bias: Bias::None,
            lengths: None,
            scale: 1.0 / (shape[3] as f32).sqrt(),
            dropout: None,
        }
    }

    /// Dropout of probability `p` on the probabilities, the step seeded `seed`.
    fn dropout(self, p: f32, seed: i32) -> Self {
        Self {
            dropout: Some((p, seed)),
            ..self
        }
    }

    fn causal(self) -> Self {
        Self { causal: true, ..self }
    }

    /// Keys (and values) of length `k_len`: cross-attention.
    fn keys(self, k_len: usize) -> Self {
        Self {
            k_len: Some(k_len),
            ..self
        }
    }

    fn lk(&self) -> usize {
        self.k_len.unwrap_or(self.shape[2])
    }

    fn k_shape(&self) -> [usize; 4] {
        let [b, h, _, dh] = self.shape;
        [b, h, self.lk(), dh]
    }

    fn bias(self) -> Self {
        Self {
            bias: Bias::Dense,
            ..self
        }
    }

    /// T5's relative bias with `buckets` buckets up to `max_distance`, bidirectional unless
    /// causal (as the models use it).
    fn relative(self, buckets: usize, max_distance: usize) -> Self {
        let ids = buckets_by_offset(self.shape[2], !self.causal, buckets, max_distance);
        Self {
            bias: Bias::Bucketed {
                buckets,
                ids,
                per_pair: false,
            },
            ..self
        }
    }

    /// ALiBi's constant bias (square problems only: a table row per offset of one length).
    fn alibi(self) -> Self {
        Self {
            bias: Bias::PerOffset,
            ..self
        }
    }

    /// A relative bias whose offsets fall in random buckets: the kernels must not rely on T5's
    /// buckets being monotone in the offset.
    fn scrambled(self, buckets: usize) -> Self {
        let ids = random_ints(self.shape[2] + self.lk() - 1, buckets as i32, 5);
        Self {
            bias: Bias::Bucketed {
                buckets,
                ids,
                per_pair: false,
            },
            ..self
        }
    }

    /// A relative bias given per (query, key) pair `[Lq, Lk]`, in random buckets (randomized
    /// positions).
    fn per_pair(self, buckets: usize) -> Self {
        let ids = random_ints(self.shape[2] * self.lk(), buckets as i32, 7);
        Self {
            bias: Bias::Bucketed {
                buckets,
                ids,
                per_pair: true,
            },
            ..self
        }
    }

    /// The same relative bias given per pair instead of per offset: entry (i, j) is the bucket of
    /// offset j − i.
    fn given_per_pair(self) -> Self {
        let Bias::Bucketed {
            buckets,
            ids,
            per_pair: false,
        } = &self.bias
        else {
            panic!("given_per_pair expands a relative bias given per offset")
        };
        let (lq, lk) = (self.shape[2], self.lk());
        let ids = (0..lq * lk).map(|t| ids[t % lk + lq - 1 - t / lk]).collect();
        Self {
            bias: Bias::Bucketed {
                buckets: *buckets,
                ids,
                per_pair: true,
            },
            ..self
        }
    }

    fn lengths(self, lengths: &[usize]) -> Self {
        Self {
            lengths: Some(lengths.to_vec()),
            ..self
        }
    }

    fn scale(self, scale: f32) -> Self {
        Self { scale, ..self }
    }

    fn key_mask(&self) -> Option<Vec<i32>> {
        let l = self.lk();
        let lengths = self.lengths.as_ref()?;
        Some(
            lengths
                .iter()
                .flat_map(|&n| (0..l).map(move |j| (j < n) as i32))
                .collect(),
        )
    }

    /// The optional inputs, and the options that name them.
    fn opts(&self, g: &mut Graph, feeds: &mut Vec<(TensorId, Feed)>) -> AttentionOpts {
        let [b, h, lq, _] = self.shape;
        let lk = self.lk();
        let bias = match &self.bias {
            Bias::None => None,
            Bias::Dense => Some(AttentionBias::Dense(param(g, "bias", &[h, lq, lk]))),
            Bias::Bucketed {
                buckets,
                ids,
                per_pair,
            } => {
                let table = param(g, "table", &[*buckets, h]);
                let shape = if *per_pair {
                    vec![lq, lk]
                } else {
                    vec![lq + lk - 1]
                };
                let (buckets, feed) = int_input(g, "buckets", &shape, ids.clone());
                feeds.push(feed);
                Some(AttentionBias::Bucketed(BucketedBias {
                    table,
                    buckets,
                    trained: true,
                }))
            }
            Bias::PerOffset => {
                let table = g.input("table", TensorMeta::f32(&[2 * lq - 1, h]));
                let values = alibi_table(lq, h, !self.causal, 0.0);
                feeds.push((table, Feed::F32(values)));
                let ids = (0..2 * lq as i32 - 1).collect();
                let (buckets, feed) = int_input(g, "buckets", &[2 * lq - 1], ids);
                feeds.push(feed);
                Some(AttentionBias::Bucketed(BucketedBias {
                    table,
                    buckets,
                    trained: false,
                }))
            }
        };
        let key_mask = self.key_mask().map(|values| {
            let (t, feed) = int_input(g, "key_mask", &[b, lk], values);
            feeds.push(feed);
            t
        });
        let opts = AttentionOpts::new(self.scale)
            .causal(self.causal)
            .with_bias(bias)
            .with_key_mask(key_mask);
        match self.dropout {
            Some((p, seed)) => {
                let (seed, feed) = int_input(g, "seed", &[1], vec![seed]);
                feeds.push(feed);
                opts.with_dropout(seed, p, DROPOUT_SALT).unwrap()
            }
            None => opts,
        }
    }

    fn attention(&self) -> impl Fn(&mut Graph) -> Built + 'static {
        let case = self.clone();
        move |g| {
            let q = param(g, "q", &case.shape);
            let [k, v] = ["k", "v"].map(|n| param(g, n, &case.k_shape()));
            let mut feeds = vec![];
            let opts = case.opts(g, &mut feeds);
            Built {
                out: g.attention(q, k, v, opts).unwrap(),
                feeds,
            }
        }
    }

    fn probs(&self) -> impl Fn(&mut Graph) -> Built + 'static {
        let case = self.clone();
        move |g| {
            let q = param(g, "q", &case.shape);
            let k = param(g, "k", &case.k_shape());
            let mut feeds = vec![];
            let opts = case.opts(g, &mut feeds);
            Built {
                out: g.attention_probs(q, k, opts).unwrap(),
                feeds,
            }
        }
    }
}

/// Runs a graph forward only (the probabilities have no gradient), with parameters from
/// seed 7 unless `params` names them.
fn forward(backend: Rc<dyn Backend>, build: &dyn Fn(&mut Graph) -> Built, over: &Overrides) -> Vec<f32> {
    let mut g = Graph::new();
    let built = build(&mut g);
    let store = ParamStore::init(backend, &g, 7).unwrap();
    for (name, v) in &over.params {
        store.set(name, v).unwrap();
    }
    let exec = Executor::new(&g, &[built.out], &store).unwrap();
    for (t, f) in &built.feeds {
        match over.inputs.get(&g.info(*t).name).unwrap_or(f) {
            Feed::F32(v) => exec.set_f32(*t, v),
            Feed::I32(v) => exec.set_i32(*t, v),
        }
        .unwrap();
    }
    exec.run().unwrap();
    exec.read_blocking(built.out).unwrap()
}

#[test]
fn gpu_matches_cpu_on_odd_shapes() {
    let cases = [
        Case::new([2, 3, 37, 16]),
        Case::new([2, 3, 37, 16]).causal().bias(),
        // Some padded keys, and a batch entry whose every key is padded.
        Case::new([3, 2, 37, 16]).bias().lengths(&[37, 20, 0]),
        Case::new([3, 2, 37, 16]).causal().lengths(&[5, 37, 0]),
        // Longer than one workgroup's 16 rows and one block of 8 keys.
        Case::new([1, 2, 130, 16]).causal().bias(),
        Case::new([1, 2, 130, 8]).lengths(&[77]),
        Case::new([2, 1, 1, 8]),
        Case::new([2, 1, 1, 8]).causal().bias(),
        // Head dimensions that are not a multiple of 4.
        Case::new([1, 2, 19, 5]).causal().bias().lengths(&[11]),
    ];
    for case in cases {
        check_each_kind_matches_cpu(&case.attention(), 1e-5, 1e-4);
    }
}

/// The CPU's blocks of queries in vector lanes (16 a block, the last ≤ 8 in a half block) at
/// the studies' head widths 8 and 16: lengths that fill blocks exactly, leave a half block or a
/// part of a full one, and run past 256 positions (the papers' test lengths).
#[test]
fn gpu_matches_cpu_on_the_cpu_query_blocks() {
    let cases = [
        Case::new([4, 8, 20, 8]).lengths(&[20, 13, 1, 0]),
        Case::new([2, 8, 20, 8]).dropout(0.1, 3),
        Case::new([2, 4, 25, 16]).causal().lengths(&[25, 17]),
        Case::new([2, 4, 24, 16]).bias(),
        Case::new([1, 2, 32, 8]).relative(8, 12),
        Case::new([1, 2, 300, 8]).lengths(&[290]),
        Case::new([1, 2, 270, 16]).causal().relative(32, 128),
        Case::new([1, 2, 260, 8]).keys(300),
    ];
    for case in cases {
        check_each_kind_matches_cpu(&case.attention(), 1e-5, 1e-4);
    }
}

/// Dh 32 is the widest head the software adapters' rows kernels take; 33 goes to the tiles.
#[test]
fn gpu_matches_cpu_on_wide_heads() {
    for dh in [32, 33, 64, 128] {
        check_each_kind_matches_cpu(
            &Case::new([1, 2, 29, dh]).bias().lengths(&[23]).attention(),
            1e-5,
            1e-4,
        );
        check_each_kind_matches_cpu(&Case::new([1, 1, 41, dh]).causal().attention(), 1e-5, 1e-4);
    }
}

/// Each adapter kind gets its family's kernels: software adapters the rows kernels wherever a
/// row fits their registers, GPUs always the tiles.
#[test]
fn kernels_are_chosen_by_adapter_kind_and_head_width() {
    let bh = |dh: usize| TensorMeta::f32(&[2, 3, 37, dh]);
    let entry = |kind: AdapterKind, dh: usize| {
        let q = bh(dh);
        let op = AttentionOpts::new(0.5).op();
        op.gpu(kind, &[&q, &q, &q], &[]).dispatches[0].entry
    };
    assert_eq!(entry(AdapterKind::Software, 32), "attention_forward_rows");
    assert_eq!(entry(AdapterKind::Software, 5), "attention_forward_rows");
    assert_eq!(entry(AdapterKind::Software, 33), "attention_forward");
    assert_eq!(entry(AdapterKind::Gpu, 32), "attention_forward");
    // Dropout has entries of its own, the only ones that bind a ninth buffer (the seed).
    let mut g = Graph::new();
    let seed = g.input("seed", TensorMeta::i32(&[1]));
    let dropped = AttentionOpts::new(0.5).with_dropout(seed, 0.1, 0).unwrap().op();
    let (q, one) = (bh(16), TensorMeta::i32(&[1]));
    for (kind, want) in [
        (AdapterKind::Software, "attention_forward_rows_dropout"),
        (AdapterKind::Gpu, "attention_forward_dropout"),
    ] {
        let kernels = dropped.gpu(kind, &[&q, &q, &q, &one], &[]);
        assert_eq!(
            (kernels.dispatches[0].entry, kernels.dispatches[0].args.len()),
            (want, 9)
        );
        let plain = AttentionOpts::new(0.5).op().gpu(kind, &[&q, &q, &q], &[]);
        assert_eq!(plain.dispatches[0].args.len(), 8);
    }
    let q = bh(16);
    let (out, lse) = (TensorMeta::f32(&[2, 3, 37, 16]), TensorMeta::f32(&[2, 3, 37]));
    let backward = AttentionBackward(AttentionOpts::new(0.5).op());
    let entries = |kind| {
        backward
            .gpu(kind, &[&q, &q, &q, &out, &lse, &out], &[])
            .dispatches
            .iter()
            .map(|d| d.entry)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        entries(AdapterKind::Software),
        [
            "attention_backward_stats",
            "attention_backward_dkdv_rows",
            "attention_backward_dq_rows"
        ]
    );
    assert_eq!(
        entries(AdapterKind::Gpu),
        [
            "attention_backward_stats",
            "attention_backward_dkdv",
            "attention_backward_dq"
        ]
    );
}

#[test]
fn fully_padded_rows_give_zeros_and_no_nan() {
    let case = Case::new([2, 2, 9, 4]).bias().lengths(&[6, 0]);
    let mut backends = vec![("CPU", Some(cpu()))];
    backends.push(("GPU kernels", gpu_with_kernels_for(AdapterKind::Gpu)));
    backends.push(("software kernels", gpu_with_kernels_for(AdapterKind::Software)));
    for (on, backend) in backends {
        let Some(backend) = backend else { continue };
        let r = run(backend, &case.attention(), 3, &Overrides::default());
        let half = r.out.len() / 2;
        assert!(r.out.iter().all(|v| v.is_finite()), "{on}");
        assert!(r.out[..half].iter().any(|&v| v != 0.0), "{on}");
        assert!(r.out[half..].iter().all(|&v| v == 0.0), "{on}: padded entry");
        for (name, grad) in &r.grads {
            assert!(grad.iter().all(|v| v.is_finite()), "{on}: grad {name}");
            if name != "bias" {
                assert!(grad[half..].iter().all(|&v| v == 0.0), "{on}: grad {name}");
            }
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    let cases = [
        Case::new([2, 2, 5, 3]),
        Case::new([2, 2, 5, 3]).causal().bias().lengths(&[5, 3]),
        Case::new([1, 2, 6, 4]).bias().scale(0.7),
    ];
    for case in cases {
        check_gradients(&case.attention(), 1e-2, 1e-2, 20);
    }
}

#[test]
fn matches_pytorch() {
    let base = Case::new([2, 2, 7, 6]).scale(0.4);
    let cases = [
        ("plain", base.clone()),
        ("causal", base.clone().causal()),
        ("bias", base.clone().bias()),
        ("mask", base.clone().lengths(&[7, 4])),
        ("causal_bias_mask", base.clone().causal().bias().lengths(&[7, 4])),
        (
            "cross_mask",
            Case::new([2, 2, 5, 6]).scale(0.4).keys(9).lengths(&[9, 6]),
        ),
        (
            "cross_causal_bias",
            Case::new([2, 2, 5, 6]).scale(0.4).keys(9).causal().bias(),
        ),
        (
            "cross_long_queries_bias",
            Case::new([2, 2, 7, 6]).scale(0.4).keys(4).bias(),
        ),
    ];
    for (name, case) in cases {
        check_reference("attention", name, &case.attention(), 1e-5, 1e-4);
    }
}

/// The probabilities against `torch.softmax` of the masked scores (`probs` in
/// `gen_attention.py`), on the CPU and the GPU.
#[test]
fn probabilities_match_pytorch() {
    let path = format!(
        "{}/tests/reference/attention.safetensors",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let data = |name: &str| file.tensor(&format!("probs/{name}")).unwrap().data().to_vec();
    let floats = |name: &str| -> Vec<f32> { bytemuck::pod_collect_to_vec(&data(name)) };
    let over = Overrides {
        params: ["q", "k", "bias"].map(|n| (n.to_string(), floats(n))).into(),
        inputs: BTreeMap::from([(
            "key_mask".to_string(),
            Feed::I32(bytemuck::pod_collect_to_vec(&data("key_mask"))),
        )]),
        upstream: None,
    };
    let case = Case::new([2, 2, 7, 6])
        .scale(0.4)
        .causal()
        .bias()
        .lengths(&[7, 4]);
    let mut backends = vec![("CPU", Some(cpu()))];
    backends.push(("GPU kernels", gpu_with_kernels_for(AdapterKind::Gpu)));
    backends.push(("software kernels", gpu_with_kernels_for(AdapterKind::Software)));
    for (on, backend) in backends {
        let Some(backend) = backend else { continue };
        let got = forward(backend, &case.probs(), &over);
        assert_close(&format!("probs on {on}"), &got, &floats("out"), 1e-6, 1e-4);
    }
}

#[test]
fn gpu_probabilities_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let cases = [
        Case::new([2, 3, 37, 16]).causal().bias().lengths(&[37, 0]),
        Case::new([1, 2, 70, 128]).lengths(&[50]),
    ];
    for case in cases {
        let want = forward(cpu(), &case.probs(), &Overrides::default());
        let got = forward(gpu.clone(), &case.probs(), &Overrides::default());
        assert_close("probs", &got, &want, 1e-6, 1e-4);
        // Rows sum to 1, or to 0 for a batch entry with every key padded.
        let l = case.shape[2];
        for (r, row) in want.chunks(l).enumerate() {
            let total: f32 = row.iter().sum();
            let padded = case
                .lengths
                .as_ref()
                .is_some_and(|n| n[r / (case.shape[1] * l)] == 0);
            let expected = if padded { 0.0 } else { 1.0 };
            assert!((total - expected).abs() < 1e-5, "row {r} sums to {total}");
        }
    }
}

#[test]
fn probabilities_have_no_gradient() {
    let case = Case::new([1, 1, 3, 2]);
    let mut g = Graph::new();
    let built = case.probs()(&mut g);
    let loss = g.sum_all(built.out).unwrap();
    let err = g.backward(loss).unwrap_err().to_string();
    assert!(err.contains("attention_probs has no gradient"), "{err}");
}

#[test]
fn bad_shapes_name_the_op_and_every_shape() {
    let mut g = Graph::new();
    let q = param(&mut g, "q", &[2, 3, 5, 8]);
    let k = param(&mut g, "k", &[2, 3, 5, 8]);
    let v_short = param(&mut g, "v", &[2, 3, 4, 8]);
    let wide = param(&mut g, "wide", &[1, 1, 2, 129]);
    let bias = param(&mut g, "bias", &[3, 5, 4]);
    let mask = g.input("key_mask", crate::tensor::TensorMeta::i32(&[2, 4]));
    let plain = AttentionOpts::new(1.0);
    let table = param(&mut g, "table", &[4, 3]);
    let buckets = g.input("buckets", crate::tensor::TensorMeta::i32(&[10]));
    // k and v may be longer or shorter than q, but not than each other.
    let err = g.attention(q, k, v_short, plain).unwrap_err().to_string();
    assert!(
        err.starts_with("attention: ") && err.contains("[2, 3, 5, 8]") && err.contains("[2, 3, 4, 8]"),
        "{err}"
    );
    let other_heads = param(&mut g, "other_heads", &[2, 2, 5, 8]);
    let err = g
        .attention(q, other_heads, other_heads, plain)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("v f32 [B, H, Lk, Dh]") && err.contains("k [2, 2, 5, 8]"),
        "{err}"
    );
    let err = g.attention(wide, wide, wide, plain).unwrap_err().to_string();
    assert!(
        err.starts_with("attention: ") && err.contains("[1, 1, 2, 129]"),
        "{err}"
    );
    let with_bias = plain.with_bias(AttentionBias::Dense(bias));
    let err = g.attention(q, k, q, with_bias).unwrap_err().to_string();
    assert!(
        err.contains("bias [3, 5, 4]") && err.contains("[3, 5, 5]"),
        "{err}"
    );
    let with_mask = plain.with_key_mask(mask);
    let err = g.attention_probs(q, k, with_mask).unwrap_err().to_string();
    assert!(
        err.starts_with("attention_probs: ") && err.contains("key_mask [2, 4] i32") && err.contains("[2, 5]"),
        "{err}"
    );
    // L = 5 needs 9 buckets, one per offset −4..=4.
    let relative = plain.with_bias(AttentionBias::Bucketed(BucketedBias {
        table,
        buckets,
        trained: true,
    }));
    let err = g.attention(q, k, q, relative).unwrap_err().to_string();
    assert!(
        err.starts_with("attention: ")
            && err.contains("buckets i32 [Lq + Lk − 1] = [9] (one per offset) or [Lq, Lk] = [5, 5]")
            && err.contains("table [4, 3], buckets [10] i32"),
        "{err}"
    );
}

/// Queries and keys of different lengths (cross-attention; new queries over cached keys), on
/// every path: causal aligned at the end (query i at key position i + Lk − Lq), dense and
/// relative biases, padded keys, rows with no visible key (Lq > Lk, causal), several workgroups.
#[test]
fn gpu_matches_cpu_with_different_query_and_key_lengths() {
    let cases = [
        Case::new([2, 3, 5, 16]).keys(37).lengths(&[37, 20]),
        Case::new([2, 3, 37, 16]).keys(5).bias(),
        Case::new([2, 2, 19, 8]).keys(41).causal().bias(),
        Case::new([2, 2, 41, 8]).keys(19).causal().lengths(&[19, 7]),
        Case::new([1, 2, 1, 16]).keys(130).causal().scrambled(6),
        Case::new([1, 2, 23, 5]).keys(70).scrambled(9).lengths(&[50]),
        Case::new([2, 1, 130, 8]).keys(3).causal(),
    ];
    for case in cases {
        check_each_kind_matches_cpu(&case.attention(), 1e-5, 1e-4);
        let want = forward(cpu(), &case.probs(), &Overrides::default());
        if let Some(gpu) = gpu() {
            let got = forward(gpu, &case.probs(), &Overrides::default());
            assert_close("probs", &got, &want, 1e-6, 1e-4);
        }
    }
}

/// With Lq ≠ Lk the gradients of q, k, v and both biases still match finite differences, and
/// a causal query that precedes every key outputs 0 with zero gradients.
#[test]
fn cross_length_gradients_match_finite_differences() {
    let cases = [
        Case::new([2, 2, 3, 4]).keys(6).causal().bias().lengths(&[6, 4]),
        Case::new([1, 2, 6, 3]).keys(4).causal().scrambled(3),
    ];
    for case in cases {
        check_gradients(&case.attention(), 1e-2, 1e-2, 20);
    }
    // Queries 0 and 1 of 5 sit before key 0 of 3 (positions −2 and −1): no visible key.
    let case = Case::new([1, 1, 5, 4]).keys(3).causal();
    let r = run(cpu(), &case.attention(), 3, &Overrides::default());
    assert!(r.out[..8].iter().all(|&v| v == 0.0), "{:?}", &r.out[..8]);
    assert!(r.out[8..].iter().any(|&v| v != 0.0));
    assert!(r.grads["q"][..8].iter().all(|&v| v == 0.0));
}

/// Dropout on the probabilities, with every kind of bias, masks, causal and cross lengths, and
/// heads for both kernel families: the GPU draws the CPU's mask, forward and backward.
#[test]
fn dropout_gpu_matches_cpu() {
    let cases = [
        Case::new([2, 3, 37, 16]).dropout(0.1, 7),
        Case::new([2, 3, 37, 16]).causal().bias().dropout(0.5, -3),
        Case::new([3, 2, 37, 16])
            .bias()
            .lengths(&[37, 20, 0])
            .dropout(0.3, 11),
        Case::new([1, 2, 130, 16])
            .causal()
            .relative(8, 20)
            .dropout(0.2, 1),
        Case::new([1, 2, 29, 8]).alibi().dropout(0.2, 4),
        Case::new([2, 2, 9, 8]).keys(13).scrambled(6).dropout(0.4, 2),
        Case::new([1, 2, 29, 33]).causal().lengths(&[23]).dropout(0.25, 9),
        Case::new([1, 2, 19, 5])
            .causal()
            .bias()
            .lengths(&[11])
            .dropout(0.6, 0),
    ];
    for case in cases {
        check_each_kind_matches_cpu(&case.attention(), 1e-5, 1e-4);
    }
}

#[test]
fn dropout_gradients_match_finite_differences() {
    for case in [
        Case::new([2, 2, 6, 4]).causal().bias().dropout(0.3, 5),
        Case::new([2, 2, 5, 4])
            .relative(4, 6)
            .lengths(&[5, 3])
            .dropout(0.5, -8),
    ] {
        check_gradients(&case.attention(), 1e-2, 1e-2, 20);
    }
}

/// The op with dropout is `(Z ∘ P)·v`, P the probabilities without it and Z the mask the
/// dropout op draws at the same seed and salt: kept probabilities scaled by 1/(1 − p), about
/// 1 − p of them kept. A probability of 0 is no dropout at all.
#[test]
fn dropout_is_the_kept_probabilities_scaled() {
    let (p, seed) = (0.3, 42);
    let case = Case::new([2, 3, 40, 8]).causal().bias();
    let [b, h, l, dh] = case.shape;
    let over = Overrides::default();
    let probs = forward(cpu(), &case.probs(), &over);
    let plain = forward(cpu(), &case.attention(), &over);
    let dropped = forward(cpu(), &case.clone().dropout(p, seed).attention(), &over);
    let v = {
        let mut g = Graph::new();
        case.attention()(&mut g);
        let store = ParamStore::init(cpu(), &g, 7).unwrap();
        pollster::block_on(store.read("v")).unwrap()
    };
    let mask = crate::ops::dropout::DropMask::new("attention", p, DROPOUT_SALT).unwrap();
    let stream = mask.stream(seed);
    let (mut kept, mut visible) = (0usize, 0usize);
    for row in 0..b * h * l {
        let bh = row / l;
        for c in 0..dh {
            let mut want = 0.0f64;
            for j in 0..l {
                let z = mask.factor(stream, row * l + j);
                want += f64::from(probs[row * l + j] * z) * f64::from(v[(bh * l + j) * dh + c]);
            }
            let got = f64::from(dropped[row * dh + c]);
            assert!(
                (got - want).abs() < 1e-5,
                "row {row}, column {c}: {got} against {want}"
            );
        }
        for j in 0..=row % l {
            visible += 1;
            kept += usize::from(mask.factor(stream, row * l + j) != 0.0);
        }
    }
    let rate = kept as f64 / visible as f64;
    assert!(
        (rate - 0.7).abs() < 0.03,
        "kept {rate} of the visible probabilities"
    );
    assert_ne!(dropped, plain);
    let none = forward(cpu(), &case.clone().dropout(0.0, seed).attention(), &over);
    assert_eq!(none, plain);
    let mut g = Graph::new();
    let seed = g.input("seed", TensorMeta::i32(&[1]));
    let err = AttentionOpts::new(1.0)
        .with_dropout(seed, 1.0, 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attention") && err.contains("[0, 1), got 1"),
        "{err}"
    );
}
