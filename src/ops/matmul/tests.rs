use super::kernels::{BLOCK8, BLOCK16, Epilogue, Kernel};
use super::{AdapterKind, KernelChoice, Layout, MatMul, kernel_for};
use crate::graph::Graph;
use crate::ops::unary::Activation;
use crate::tensor::TensorMeta;
use crate::testing::*;

fn product(sa: &'static [usize], sb: &'static [usize], ta: bool, tb: bool) -> impl Fn(&mut Graph) -> Built {
    product_with(sa, sb, ta, tb, None)
}

/// [`product`] with `kernel` named by hand (`None`: the op's own choice).
fn product_with(
    sa: &'static [usize],
    sb: &'static [usize],
    ta: bool,
    tb: bool,
    kernel: Option<KernelChoice>,
) -> impl Fn(&mut Graph) -> Built {
    move |g| {
        let a = param(g, "a", sa);
        let b = param(g, "b", sb);
        let op = MatMul {
            trans_a: ta,
            trans_b: tb,
            kernel,
            bias: false,
            activation: None,
        };
        Built {
            out: g.apply1(op, &[a, b]).unwrap(),
            feeds: vec![],
        }
    }
}

/// Shapes of a [m, k] and b [k, n] for the given transposes, with a batch prefix.
fn shapes(batch: &[usize], m: usize, k: usize, n: usize, ta: bool, tb: bool) -> (Vec<usize>, Vec<usize>) {
    let mut a = batch.to_vec();
    a.extend(if ta { [k, m] } else { [m, k] });
    let mut b = batch.to_vec();
    b.extend(if tb { [n, k] } else { [k, n] });
    (a, b)
}

fn layout(a: &[usize], b: &[usize], ta: bool, tb: bool) -> Layout {
    let op = MatMul {
        trans_a: ta,
        trans_b: tb,
        kernel: None,
        bias: false,
        activation: None,
    };
    op.plan(&TensorMeta::f32(a), &TensorMeta::f32(b)).unwrap().1
}

const TRANSPOSES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];

fn leak(v: Vec<usize>) -> &'static [usize] {
    Vec::leak(v)
}

/// A product's batch and (m, k, n), and the (entry, tile) it should take.
type Choice = (&'static [usize], (usize, usize, usize), (&'static str, usize));

/// Each product takes the entry and tile given on adapters of `kind`, unsplit, and computes
/// as the CPU does, for every transpose.
fn check_choices(kind: AdapterKind, cases: &[Choice]) {
    for &(batch, (m, k, n), (entry, tile)) in cases {
        for (ta, tb) in TRANSPOSES {
            let (sa, sb) = shapes(batch, m, k, n, ta, tb);
            let kernel = kernel_for(kind, &layout(&sa, &sb, ta, tb));
            assert_eq!(
                (kernel.entry, kernel.tile, kernel.splits),
                (entry, tile, 1),
                "{batch:?} {m}x{k}x{n}"
            );
            check_kind_matches_cpu(kind, &product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
        }
    }
}

/// Software adapters load straight from the buffers: every tile, odd sizes and sizes beyond one
/// tile with ragged edges.
#[test]
fn software_kernels_match_cpu_for_every_tile_and_transpose() {
    check_choices(
        AdapterKind::Software,
        &[
            (&[], (37, 91, 53), ("matmul_8x8_direct", 32)),
            (&[], (130, 257, 129), ("matmul_8x8_direct", 32)),
            (&[], (200, 40, 190), ("matmul_8x8_direct", 64)),
            (&[], (250, 40, 255), ("matmul_16x16_direct", 128)),
            (&[], (256, 44, 256), ("matmul_16x16_direct", 128)),
        ],
    );
}

/// GPUs stage in workgroup memory, with vec4 loads when every size is a multiple of 4 (k = 44
/// ends in half a K-step; n = 255 falls back to the general loads): every tile, the batches
/// large enough that a GPU takes it.
#[test]
fn gpu_kernels_match_cpu_for_every_tile_and_transpose() {
    check_choices(
        AdapterKind::Gpu,
        &[
            (&[], (37, 91, 53), ("matmul_8x8", 32)),
            (&[11], (200, 40, 190), ("matmul_8x8", 64)),
            (&[32], (250, 40, 255), ("matmul_8x8", 128)),
            (&[], (36, 92, 52), ("matmul_8x8_vec4", 32)),
            (&[11], (200, 44, 192), ("matmul_8x8_vec4", 64)),
            (&[32], (256, 44, 256), ("matmul_8x8_vec4", 128)),
            (&[32], (256, 44, 255), ("matmul_8x8", 128)),
        ],
    );
}

#[test]
fn batched_and_shared_operands_match_cpu_on_the_vec4_path() {
    // Batched and shared operands on the vec4 path.
    for (ta, tb) in TRANSPOSES {
        let (sa, sb) = shapes(&[2, 3], 20, 24, 16, ta, tb);
        let (sa2, _) = shapes(&[2, 5], 32, 16, 28, ta, tb);
        let (_, sb2) = shapes(&[], 32, 16, 28, ta, tb);
        let (sa3, _) = shapes(&[], 12, 40, 36, ta, tb);
        let (_, sb3) = shapes(&[4], 12, 40, 36, ta, tb);
        for (sa, sb) in [(sa, sb), (sa2, sb2), (sa3, sb3)] {
            assert!(
                kernel_for(AdapterKind::Gpu, &layout(&sa, &sb, ta, tb))
                    .entry
                    .ends_with("_vec4")
            );
            check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
        }
    }
}

/// naga validates each variant the op can ask for as wgpu will build it: its constants set.
#[test]
fn every_kernel_validates_with_its_constants() {
    for choice in KernelChoice::every(1) {
        let body = if choice.block == 16 { BLOCK16 } else { BLOCK8 };
        let prefetching = body.vec4_prefetch.filter(|_| choice.prefetch);
        for entry in [body.general, body.vec4, body.direct]
            .into_iter()
            .chain(prefetching)
        {
            let kernel = Kernel {
                entry,
                tile: choice.tile,
                splits: 1,
                kstep: choice.kstep,
            };
            for epilogue in EPILOGUES {
                let constants = kernel.constants(epilogue);
                crate::shaders::validate_variant(&crate::shaders::MATMUL, entry, &constants)
                    .unwrap_or_else(|e| panic!("{kernel:?}, {epilogue:?}: {e}"));
            }
        }
    }
    for epilogue in EPILOGUES {
        let constants = epilogue.constants();
        crate::shaders::validate_variant(&crate::shaders::MATMUL, "matmul_sum_splits", &constants)
            .unwrap_or_else(|e| panic!("{epilogue:?}: {e}"));
    }
}

/// Every epilogue: with or without the bias, and no activation, GELU or ReLU.
const EPILOGUES: [Epilogue; 6] = [
    Epilogue {
        bias: false,
        activation: None,
    },
    Epilogue {
        bias: true,
        activation: None,
    },
    Epilogue {
        bias: false,
        activation: Some(Activation::Gelu),
    },
    Epilogue {
        bias: true,
        activation: Some(Activation::Gelu),
    },
    Epilogue {
        bias: false,
        activation: Some(Activation::Relu),
    },
    Epilogue {
        bias: true,
        activation: Some(Activation::Relu),
    },
];

/// `x · w + bias` with x `[..batch, m, k]`, w `[k, n]` and bias `[n]`.
fn linear(batch: &[usize], m: usize, k: usize, n: usize) -> impl Fn(&mut Graph) -> Built + use<> {
    linear_t(batch, m, k, n, false)
}

/// `x · op(w) + bias`, w stored `[n, k]` when `trans_w` (a tied output layer's token table).
fn linear_t(
    batch: &[usize],
    m: usize,
    k: usize,
    n: usize,
    trans_w: bool,
) -> impl Fn(&mut Graph) -> Built + use<> {
    let mut sx = batch.to_vec();
    sx.extend([m, k]);
    let sx = leak(sx);
    let sw = leak(if trans_w { vec![n, k] } else { vec![k, n] });
    move |g| {
        let x = param(g, "x", sx);
        let w = param(g, "w", sw);
        let bias = param(g, "bias", leak(vec![n]));
        Built {
            out: g.matmul_t_bias(x, w, false, trans_w, bias).unwrap(),
            feeds: vec![],
        }
    }
}

/// The bias is added as the product is written, by every tile of both kinds' entry points (odd
/// sizes and multiples of 4, the 128-tiles at the model's shape), and after the sum of a split-K
/// product's parts (k = 1030 over few tiles splits on both kinds).
#[test]
fn products_with_a_bias_match_cpu() {
    for (batch, m, k, n) in [
        (&[][..], 37, 91, 53),
        (&[3][..], 70, 45, 133),
        (&[][..], 68, 44, 132),
        (&[16][..], 128, 128, 384),
        (&[][..], 20, 1030, 28),
        (&[2][..], 3, 1030, 5),
    ] {
        check_each_kind_matches_cpu(&linear(batch, m, k, n), 1e-4, 1e-4);
    }
    check_each_kind_matches_cpu(&linear_t(&[4], 31, 24, 65, true), 1e-4, 1e-4);
}

/// `act(x · w + bias)` written by the product; with `both`, plus half the product itself, so
/// that gradients reach the op through both its outputs.
fn linear_activated(
    activation: Activation,
    batch: &[usize],
    m: usize,
    k: usize,
    n: usize,
    both: bool,
) -> impl Fn(&mut Graph) -> Built + use<> {
    let mut sx = batch.to_vec();
    sx.extend([m, k]);
    let sx = leak(sx);
    let sw = leak(vec![k, n]);
    move |g| {
        let x = param(g, "x", sx);
        let w = param(g, "w", sw);
        let bias = param(g, "bias", leak(vec![n]));
        let (z, activated) = g.matmul_bias_activated(x, w, bias, activation).unwrap();
        let out = if both {
            let half = g.scale(z, 0.5).unwrap();
            g.add(activated, half).unwrap()
        } else {
            activated
        };
        Built { out, feeds: vec![] }
    }
}

const ACTIVATIONS: [Activation; 2] = [Activation::Gelu, Activation::Relu];

/// Each activation is applied as the product is written by every tile of both kinds' entry
/// points (odd sizes, multiples of 4, the model's up-projection), and after the sum of a split-K
/// product's parts; forward and backward, through either output.
#[test]
fn products_with_an_activation_match_cpu() {
    for act in ACTIVATIONS {
        for (batch, m, k, n) in [
            (&[][..], 37, 91, 53),
            (&[3][..], 68, 44, 132),
            (&[16][..], 128, 128, 512),
            (&[][..], 20, 1030, 28),
        ] {
            check_each_kind_matches_cpu(&linear_activated(act, batch, m, k, n, false), 1e-4, 1e-4);
        }
        check_each_kind_matches_cpu(&linear_activated(act, &[2], 3, 1030, 5, true), 1e-4, 1e-4);
        check_each_kind_matches_cpu(&linear_activated(act, &[3], 70, 45, 133, true), 1e-4, 1e-4);
    }
}

/// The fused op computes what the product and the activation's own op do, bit for bit on the
/// CPU, for each activation; and the two activations differ.
#[test]
fn the_activation_written_by_the_product_is_the_activation_of_the_product() {
    let mut fused_outputs = Vec::new();
    for act in ACTIVATIONS {
        let fused = run(
            cpu(),
            &linear_activated(act, &[2], 5, 6, 7, false),
            3,
            &Overrides::default(),
        );
        let apart = |g: &mut Graph| {
            let x = param(g, "x", &[2, 5, 6]);
            let w = param(g, "w", &[6, 7]);
            let bias = param(g, "bias", &[7]);
            let z = g.matmul_bias(x, w, bias).unwrap();
            Built {
                out: g.activate(act, z).unwrap(),
                feeds: vec![],
            }
        };
        let apart = run(cpu(), &apart, 3, &Overrides::default());
        assert_eq!(fused.out, apart.out, "{act:?}");
        assert_eq!(fused.grads, apart.grads, "{act:?}");
        fused_outputs.push(fused.out);
    }
    assert_ne!(fused_outputs[0], fused_outputs[1]);
}

#[test]
fn a_bias_of_the_wrong_shape_is_refused() {
    let mut g = Graph::new();
    let x = param(&mut g, "x", &[2, 3, 4]);
    let w = param(&mut g, "w", &[4, 5]);
    let bias = param(&mut g, "bias", &[4]);
    let err = g.matmul_bias(x, w, bias).unwrap_err().to_string();
    assert!(
        err.starts_with("matmul: ") && err.contains("the bias must be an f32 [5], got [4]"),
        "{err}"
    );
}

/// Every kernel `bench matmul --kernels` can name computes the product, on both kinds' entry
/// points: ragged sizes (the general loads) and multiples of 4 (vec4), split (k = 45 in three
/// ranges of one K-step or less) and unsplit.
#[test]
fn every_named_kernel_matches_cpu() {
    for choice in KernelChoice::every(1) {
        for splits in [1, 3] {
            for (m, k, n) in [(70, 45, 133), (68, 44, 132)] {
                let kernel = KernelChoice { splits, ..choice };
                let build = move |g: &mut Graph| {
                    let a = param(g, "a", leak(vec![m, k]));
                    let b = param(g, "b", leak(vec![k, n]));
                    let out = g.matmul_with_kernel(a, b, kernel).unwrap();
                    Built { out, feeds: vec![] }
                };
                check_each_kind_matches_cpu(&build, 1e-4, 1e-4);
            }
        }
    }
}

/// The prefetching entry, each tile and K-step it fits, on every transpose, batched, split and
/// not: its loads of the next K-step (into registers, stored after the barrier) are `stage_vec4`'s.
#[test]
fn prefetching_kernels_match_cpu_on_every_transpose() {
    let choices: Vec<KernelChoice> = KernelChoice::every(1).filter(|c| c.prefetch).collect();
    assert_eq!(choices.len(), 5, "{choices:?}");
    for choice in choices {
        for (ta, tb) in TRANSPOSES {
            for (batch, splits) in [(vec![2], 1), (vec![], 2)] {
                let (sa, sb) = shapes(&batch, 36, 52, 44, ta, tb);
                let (sa, sb) = (leak(sa), leak(sb));
                let kernel = KernelChoice { splits, ..choice };
                assert!(
                    kernel
                        .kernel(AdapterKind::Gpu, &layout(sa, sb, ta, tb))
                        .unwrap()
                        .entry
                        .ends_with("_prefetch")
                );
                let build = product_with(sa, sb, ta, tb, Some(kernel));
                check_kind_matches_cpu(AdapterKind::Gpu, &build, 1e-4, 1e-4);
            }
        }
    }
}

#[test]
fn a_kernel_that_does_not_exist_is_refused_by_name() {
    let kernel = |block, tile, splits, kstep| KernelChoice {
        block,
        tile,
        splits,
        kstep,
        prefetch: false,
    };
    for (kernel, why) in [
        (kernel(4, 32, 1, 8), "no kernel computes 4 x 4 blocks"),
        (kernel(16, 32, 1, 8), "no 32 x 32 tile of 16 x 16 blocks"),
        (kernel(8, 64, 0, 8), "0 splits of k = 9"),
        (kernel(8, 64, 10, 8), "10 splits of k = 9"),
        (kernel(8, 64, 1, 12), "no K-step of 12 depths on 64 x 64 tiles"),
        (kernel(8, 128, 1, 32), "no K-step of 32 depths on 128 x 128 tiles"),
        (
            KernelChoice {
                prefetch: true,
                ..kernel(16, 64, 1, 8)
            },
            "no prefetching kernel for 16 x 16 blocks",
        ),
        (
            KernelChoice {
                prefetch: true,
                ..kernel(8, 32, 1, 16)
            },
            "no prefetching kernel for 8 x 8 blocks on 32 x 32 tiles of 16 depths",
        ),
    ] {
        let mut g = Graph::new();
        let a = g.input("a", TensorMeta::f32(&[5, 9]));
        let b = g.input("b", TensorMeta::f32(&[9, 7]));
        let err = g.matmul_with_kernel(a, b, kernel).unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
    }
}

/// Long k over few output tiles splits k (the gradient of a weight, k = the batch's rows):
/// ranges that end inside a K-step, batched products, every transpose; on both adapter kinds'
/// choices (GPUs want many more workgroups, so they split where software adapters do not).
#[test]
fn split_k_products_match_cpu() {
    // (batch, m, k, n): splits on a software adapter, on a GPU.
    let cases = [
        (&[][..], (20, 1030, 28), (4, 4)),
        (&[2][..], (20, 1030, 28), (2, 4)),
        (&[][..], (33, 700, 17), (2, 2)),
        (&[][..], (64, 1100, 64), (4, 4)),
    ];
    for (batch, (m, k, n), (software, gpu)) in cases {
        for (ta, tb) in TRANSPOSES {
            let (sa, sb) = shapes(batch, m, k, n, ta, tb);
            let l = layout(&sa, &sb, ta, tb);
            assert_eq!(
                kernel_for(AdapterKind::Software, &l).splits,
                software,
                "{m}x{k}x{n}"
            );
            assert_eq!(kernel_for(AdapterKind::Gpu, &l).splits, gpu, "{m}x{k}x{n}");
            check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
        }
    }
}

/// The peers' step's weight gradients (k = 2,048 rows, few output tiles) as each kind splits
/// them.
#[test]
fn weight_gradients_split_k_per_adapter_kind() {
    let kernel = |kind, m, n| kernel_for(kind, &layout(&[2048, m], &[2048, n], true, false));
    let chosen = |k: Kernel| (k.tile, k.splits);
    assert_eq!(chosen(kernel(AdapterKind::Software, 128, 384)), (128, 2));
    assert_eq!(chosen(kernel(AdapterKind::Software, 128, 128)), (128, 4));
    assert_eq!(chosen(kernel(AdapterKind::Software, 128, 512)), (128, 1));
    assert_eq!(chosen(kernel(AdapterKind::Gpu, 128, 384)), (32, 3));
    assert_eq!(chosen(kernel(AdapterKind::Gpu, 128, 512)), (64, 8));
}

#[test]
fn gpu_matches_cpu_batched_and_shared_operands() {
    for (ta, tb) in TRANSPOSES {
        // Both batched, two batch axes.
        let (sa, sb) = shapes(&[2, 3], 19, 23, 17, ta, tb);
        check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
        // b shared by the batch (a linear layer), and a shared by the batch.
        let (sa, _) = shapes(&[2, 5], 33, 17, 29, ta, tb);
        let (_, sb) = shapes(&[], 33, 17, 29, ta, tb);
        check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
        let (_, sb) = shapes(&[4], 33, 17, 29, ta, tb);
        let (sa, _) = shapes(&[], 33, 17, 29, ta, tb);
        check_each_kind_matches_cpu(&product(leak(sa), leak(sb), ta, tb), 1e-4, 1e-4);
    }
}

#[test]
fn gradients_match_finite_differences() {
    for (ta, tb) in TRANSPOSES {
        let (sa, sb) = shapes(&[2], 3, 4, 5, ta, tb);
        check_gradients(&product(leak(sa), leak(sb), ta, tb), 1e-2, 1e-3, 12);
        let (sa, _) = shapes(&[2, 2], 3, 4, 5, ta, tb);
        let (_, sb) = shapes(&[], 3, 4, 5, ta, tb);
        check_gradients(&product(leak(sa), leak(sb), ta, tb), 1e-2, 1e-3, 12);
        let (sa, _) = shapes(&[], 3, 4, 5, ta, tb);
        let (_, sb) = shapes(&[3], 3, 4, 5, ta, tb);
        check_gradients(&product(leak(sa), leak(sb), ta, tb), 1e-2, 1e-3, 12);
    }
    check_gradients(&linear(&[2], 3, 4, 5), 1e-2, 1e-3, 12);
    check_gradients(&linear_t(&[2], 3, 4, 5, true), 1e-2, 1e-3, 12);
    for act in ACTIVATIONS {
        check_gradients(&linear_activated(act, &[2], 3, 4, 5, false), 1e-2, 1e-3, 12);
        check_gradients(&linear_activated(act, &[2], 3, 4, 5, true), 1e-2, 1e-3, 12);
    }
}

/// A case of `gen_matmul.py`: name, shapes of a and b, trans_a, trans_b.
type Case = (&'static str, &'static [usize], &'static [usize], bool, bool);

#[test]
fn matches_pytorch() {
    let cases: [Case; 9] = [
        ("plain", &[5, 7], &[7, 3], false, false),
        ("trans_a", &[7, 5], &[7, 3], true, false),
        ("trans_b", &[5, 7], &[3, 7], false, true),
        ("trans_ab", &[7, 5], &[3, 7], true, true),
        ("batched", &[2, 4, 6], &[2, 6, 3], false, false),
        ("batched_trans_b", &[2, 3, 4, 6], &[2, 3, 5, 6], false, true),
        ("shared_weight", &[2, 3, 4, 6], &[6, 5], false, false),
        ("shared_weight_trans", &[2, 6, 4], &[5, 6], true, true),
        ("shared_a", &[4, 6], &[3, 6, 5], false, false),
    ];
    for (case, sa, sb, ta, tb) in cases {
        check_reference("matmul", case, &product(sa, sb, ta, tb), 1e-5, 1e-4);
    }
    check_reference("linear", "linear", &linear(&[2], 3, 4, 5), 1e-5, 1e-4);
    for act in ACTIVATIONS {
        let name = act.name();
        let alone = linear_activated(act, &[2], 3, 4, 5, false);
        check_reference("linear", &format!("linear_{name}"), &alone, 1e-5, 1e-4);
        let both = linear_activated(act, &[2], 3, 4, 5, true);
        check_reference("linear", &format!("linear_{name}_both"), &both, 1e-5, 1e-4);
    }
}

#[test]
fn bad_shapes_name_the_op_and_both_shapes() {
    let cases: [(&[usize], &[usize], bool); 4] = [
        (&[3, 4], &[5, 6], false),
        (&[2, 3, 4], &[3, 4, 6], false),
        (&[4], &[4, 6], false),
        (&[3, 4], &[3, 6], true),
    ];
    for (sa, sb, tb) in cases {
        let mut g = Graph::new();
        let a = param(&mut g, "a", sa);
        let b = param(&mut g, "b", sb);
        let err = g.matmul_t(a, b, false, tb).unwrap_err().to_string();
        assert!(err.starts_with("matmul: "), "{err}");
        assert!(
            err.contains(&format!("{sa:?}")) && err.contains(&format!("{sb:?}")),
            "{err}"
        );
    }
}

/// A product's output with `kernel` named by hand (`None`: the op's own choice), on `gpu`.
fn output_with(
    gpu: &std::rc::Rc<dyn crate::backend::Backend>,
    (sa, sb): (&'static [usize], &'static [usize]),
    (ta, tb): (bool, bool),
    kernel: Option<KernelChoice>,
) -> Vec<f32> {
    run(
        gpu.clone(),
        &product_with(sa, sb, ta, tb, kernel),
        7,
        &Overrides::default(),
    )
    .out
}

/// The shapes of a product's operands, and whether each is transposed.
type TuningCase = ((&'static [usize], &'static [usize]), (bool, bool));

/// Products of each kind of layout: aligned (vec4 entries), odd, transposed, batched over a
/// shared operand, and split over k (1,000 in three splits: 336 depths each with K-steps of 8 or
/// 16, 352 with 32).
fn tuning_cases() -> Vec<TuningCase> {
    let mut cases = Vec::new();
    for (batch, (m, k, n), (ta, tb)) in [
        (vec![], (64, 48, 40), (false, false)),
        (vec![], (37, 29, 45), (false, false)),
        (vec![], (36, 52, 44), (true, false)),
        (vec![], (33, 20, 70), (true, true)),
        (vec![3], (20, 24, 28), (false, true)),
        (vec![], (8, 1024, 12), (false, false)),
        (vec![], (8, 1000, 12), (false, false)),
    ] {
        let (sa, sb) = shapes(&batch, m, k, n, ta, tb);
        cases.push(((leak(sa), leak(sb)), (ta, tb)));
    }
    cases
}

/// What lets the tuner choose by time alone: every alternative the op offers gives the op's own
/// bits, whatever its tile, block, K-step or staging, split or not (with the same ranges of k).
#[test]
fn every_alternative_gives_the_bits_of_the_ops_own_choice() {
    for kind in [AdapterKind::Gpu, AdapterKind::Software] {
        let Some(gpu) = gpu_with_kernels_for(kind) else {
            return;
        };
        for (shapes, trans) in tuning_cases() {
            let l = layout(shapes.0, shapes.1, trans.0, trans.1);
            let chosen = kernel_for(kind, &l);
            let alternatives = super::kernels::same_sums(kind, &l, &chosen);
            let want = output_with(&gpu, shapes, trans, None);
            let mut tried = 0;
            for choice in KernelChoice::every(chosen.splits) {
                if !choice.kernel(kind, &l).is_ok_and(|k| alternatives.contains(&k)) {
                    continue;
                }
                let got = output_with(&gpu, shapes, trans, Some(choice));
                let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{kind:?} {choice:?} on {shapes:?} {trans:?}: other bits than {chosen:?}"
                );
                tried += 1;
            }
            assert!(
                tried >= alternatives.len(),
                "{kind:?} {shapes:?}: {tried} of {alternatives:?}"
            );
            let least = if kind == AdapterKind::Gpu { 3 } else { 1 };
            assert!(
                alternatives.len() >= least,
                "{kind:?} {shapes:?}: {alternatives:?}"
            );
        }
    }
}

/// The alternatives keep the chosen split's ranges of k, and a GPU's keep to 8 x 8 blocks.
#[test]
fn alternatives_keep_the_ranges_of_k() {
    let l = layout(&[8, 1000], &[1000, 12], false, false);
    for kind in [AdapterKind::Gpu, AdapterKind::Software] {
        let chosen = kernel_for(kind, &l);
        assert!(chosen.splits > 1, "{kind:?}: {chosen:?}");
        let alternatives = super::kernels::same_sums(kind, &l, &chosen);
        assert!(!alternatives.is_empty());
        for k in &alternatives {
            assert_eq!(
                (k.splits, k.k_split(l.k)),
                (chosen.splits, chosen.k_split(l.k)),
                "{k:?}"
            );
            assert_ne!(k, &chosen);
        }
        if kind == AdapterKind::Gpu {
            assert!(
                alternatives.iter().all(|k| k.entry.starts_with("matmul_8x8")),
                "{alternatives:?}"
            );
        }
    }
}

/// A tuning backend times a product's kernels once per shape, remembers its choice, and gives
/// the bits of the op's own kernel, on both kinds' kernels.
#[test]
fn a_tuning_backend_gives_the_same_bits_and_times_each_shape_once() {
    for kind in [AdapterKind::Gpu, AdapterKind::Software] {
        let (Some(tuning), Some(plain)) = (gpu_tuning(kind), gpu_with_kernels_for(kind)) else {
            return;
        };
        assert!(
            tuning.describe().ends_with("kernels tuned"),
            "{}",
            tuning.describe()
        );
        assert_eq!(plain.tuning(), None);
        let cases = tuning_cases();
        for (shapes, trans) in &cases {
            let want = output_with(&plain, *shapes, *trans, None);
            let got = output_with(&tuning, *shapes, *trans, None);
            let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{kind:?} tuned {shapes:?} {trans:?}: other bits");
        }
        let done = tuning.tuning().unwrap();
        // Each case's forward product, and its two gradient products (their own shapes).
        assert!(done.sets.len() >= cases.len(), "{done:?}");
        assert!(done.seconds > 0.0);
        for set in &done.sets {
            assert!(set.what.starts_with("matmul ["), "{set:?}");
            assert!(
                set.candidates.len() >= 2 && set.chosen < set.candidates.len(),
                "{set:?}"
            );
            assert!(
                set.candidates
                    .iter()
                    .all(|(name, s)| name.starts_with("matmul_") && *s > 0.0)
            );
        }
        let (shapes, trans) = cases[0];
        output_with(&tuning, shapes, trans, None);
        assert_eq!(
            tuning.tuning().unwrap().sets.len(),
            done.sets.len(),
            "timed again"
        );
    }
}
