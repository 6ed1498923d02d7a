//! Attention with T5's relative bias and ALiBi: the bias looked up in the kernels against the CPU,
//! its gradients, its agreement with the dense bias of its table, and PyTorch's values.

use super::*;

/// T5's relative bias, looked up in the kernels: odd lengths over one workgroup, offsets past
/// `max_distance`, a key mask with a fully padded entry, and buckets in no particular order.
#[test]
fn relative_bias_gpu_matches_cpu() {
    let cases = [
        Case::new([2, 3, 37, 16]).relative(8, 12),
        Case::new([2, 3, 37, 16]).causal().relative(8, 12),
        Case::new([3, 2, 37, 16]).relative(8, 12).lengths(&[37, 20, 0]),
        Case::new([1, 2, 130, 8]).causal().relative(32, 40).lengths(&[77]),
        Case::new([2, 1, 1, 8]).causal().relative(4, 3),
        Case::new([1, 2, 19, 5]).scrambled(6).lengths(&[11]),
        Case::new([2, 2, 41, 64]).causal().scrambled(5),
        Case::new([2, 3, 37, 16]).per_pair(8).lengths(&[37, 20]),
        Case::new([1, 2, 23, 64]).causal().per_pair(5),
    ];
    for case in cases {
        check_each_kind_matches_cpu(&case.attention(), 1e-5, 1e-4);
    }
}

/// Buckets given per pair (randomized positions) compute what the same buckets given per offset
/// do: the same outputs and gradients bit for bit, on the CPU and on both kinds' kernels.
#[test]
fn relative_bias_per_pair_matches_per_offset() {
    let cases = [
        Case::new([2, 3, 23, 8]).relative(8, 12).lengths(&[23, 9]),
        Case::new([1, 2, 19, 16]).causal().scrambled(6),
    ];
    for case in cases {
        let (by_offset, by_pair) = (case.attention(), case.clone().given_per_pair().attention());
        let mut backends = vec![("CPU".to_string(), cpu())];
        for kind in [AdapterKind::Gpu, AdapterKind::Software] {
            if let Some(gpu) = gpu_with_kernels_for(kind) {
                backends.push((format!("{kind:?} kernels"), gpu));
            }
        }
        for (name, backend) in backends {
            let want = run(backend.clone(), &by_offset, 3, &Overrides::default());
            let got = run(backend, &by_pair, 3, &Overrides::default());
            assert_eq!(got.out, want.out, "output, {name}");
            for (grad, values) in &got.grads {
                assert_eq!(values, &want.grads[grad], "grad {grad}, {name}");
            }
        }
    }
}

#[test]
fn relative_bias_gradients_match_finite_differences() {
    let cases = [
        Case::new([2, 2, 6, 3]).relative(4, 3),
        Case::new([2, 2, 6, 3]).causal().relative(4, 3).lengths(&[6, 4]),
        Case::new([1, 2, 5, 4]).scrambled(3).scale(0.7),
        Case::new([2, 2, 6, 3]).per_pair(4).lengths(&[6, 3]),
    ];
    for case in cases {
        check_gradients(&case.attention(), 1e-2, 1e-2, 20);
    }
}

/// The relative bias in the kernels gives what the dense bias built from the same table gives
/// (the table looked up at the `[L, L]` bucket matrix, as the model did before): the same
/// output bit for bit on the CPU, the same table gradient up to the order of its sums.
#[test]
fn relative_bias_matches_the_dense_bias_of_its_table() {
    let cases = [
        Case::new([2, 3, 23, 8]).relative(8, 12).lengths(&[23, 9]),
        Case::new([2, 2, 23, 8]).causal().relative(8, 12),
    ];
    for case in cases {
        let Bias::Bucketed { buckets, ids, .. } = case.bias.clone() else {
            unreachable!("relative cases")
        };
        let relative = case.attention();
        let [_, h, l, _] = case.shape;
        let unbiased = Case {
            bias: Bias::None,
            ..case.clone()
        };
        let dense = move |g: &mut Graph| {
            let [q, k, v] = ["q", "k", "v"].map(|n| param(g, n, &unbiased.shape));
            let table = param(g, "table", &[buckets, h]);
            let matrix: Vec<i32> = (0..l * l).map(|t| ids[t % l + l - 1 - t / l]).collect();
            let (pairs, feed) = int_input(g, "matrix", &[l, l], matrix);
            let per_pair = g.embedding(table, pairs).unwrap();
            let bias = g.permute(per_pair, &[2, 0, 1]).unwrap();
            let mut feeds = vec![feed];
            let opts = unbiased.opts(g, &mut feeds).with_bias(AttentionBias::Dense(bias));
            Built {
                out: g.attention(q, k, v, opts).unwrap(),
                feeds,
            }
        };
        let want = run(cpu(), &dense, 3, &Overrides::default());
        let got = run(cpu(), &relative, 3, &Overrides::default());
        assert_eq!(got.out, want.out, "output on the CPU");
        for (name, grad) in &got.grads {
            assert_close(&format!("grad {name}"), grad, &want.grads[name], 1e-6, 1e-5);
        }
        for kind in [AdapterKind::Gpu, AdapterKind::Software] {
            let Some(gpu) = gpu_with_kernels_for(kind) else {
                continue;
            };
            let got = run(gpu, &relative, 3, &Overrides::default());
            assert_close(
                &format!("output, {kind:?} kernels"),
                &got.out,
                &want.out,
                1e-5,
                1e-4,
            );
            for (name, grad) in &got.grads {
                assert_close(
                    &format!("grad {name}, {kind:?} kernels"),
                    grad,
                    &want.grads[name],
                    1e-5,
                    1e-4,
                );
            }
        }
    }
}

/// `tests/reference/attention_relative.safetensors` (from `gen_attention_relative.py`): the
/// bias built densely from T5's bucket function in float64 PyTorch, with offsets past
/// `max_distance`.
#[test]
fn relative_bias_matches_pytorch() {
    let base = Case::new([2, 2, 9, 6]).scale(0.4);
    let cases = [
        ("bidirectional_mask", base.clone().relative(8, 6).lengths(&[9, 5])),
        ("causal", base.causal().relative(8, 6)),
    ];
    for (name, case) in cases {
        check_reference("attention_relative", name, &case.attention(), 1e-5, 1e-4);
    }
}

/// ALiBi's constant table through the relative bias's lookups, on both kinds' kernels; the
/// backward writes no table sums and gives q, k and v their gradients.
#[test]
fn alibi_gpu_matches_cpu_and_finite_differences() {
    let cases = [
        Case::new([2, 4, 37, 16]).alibi(),
        Case::new([2, 4, 37, 16]).causal().alibi(),
        Case::new([3, 2, 33, 8]).alibi().lengths(&[33, 20, 0]),
        Case::new([1, 6, 70, 8]).causal().alibi(),
    ];
    for case in cases {
        check_each_kind_matches_cpu(&case.attention(), 1e-5, 1e-4);
    }
    check_gradients(
        &Case::new([2, 2, 6, 3]).causal().alibi().attention(),
        1e-2,
        1e-3,
        20,
    );
    check_gradients(
        &Case::new([2, 3, 5, 4]).alibi().lengths(&[5, 3]).attention(),
        1e-2,
        1e-3,
        20,
    );
}

/// `tests/reference/attention_alibi.safetensors` (from `gen_attention_alibi.py`): the bias built
/// densely in float64 PyTorch from the authors' `get_slopes`, causal (−m·(i − j)) and
/// bidirectional (−m·|i − j|), with 4 and 6 heads.
#[test]
fn alibi_matches_pytorch() {
    let cases = [
        ("causal", Case::new([2, 4, 9, 6]).scale(0.4).causal().alibi()),
        (
            "bidirectional_mask",
            Case::new([2, 6, 9, 6]).scale(0.4).alibi().lengths(&[9, 5]),
        ),
    ];
    for (name, case) in cases {
        check_reference("attention_alibi", name, &case.attention(), 1e-5, 1e-4);
    }
}

#[test]
fn relative_bias_probabilities_gpu_match_cpu() {
    let Some(gpu) = gpu() else { return };
    let cases = [
        Case::new([2, 3, 37, 16])
            .causal()
            .relative(8, 12)
            .lengths(&[37, 0]),
        Case::new([1, 2, 70, 32]).scrambled(7),
    ];
    for case in cases {
        let want = forward(cpu(), &case.probs(), &Overrides::default());
        let got = forward(gpu.clone(), &case.probs(), &Overrides::default());
        assert_close("probs", &got, &want, 1e-6, 1e-4);
    }
}
