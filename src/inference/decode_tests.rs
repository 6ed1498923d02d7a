//! Beam search against exhaustive search and against the teacher-forced model, and its errors.

use super::{DecodeOptions, Seq2SeqDecoder};
use crate::data::{EOS, Pair, PairBatch};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::math;
use crate::model::Pairs;
use crate::model::{
    Activation, Block, EmbedScale, GraphOptions, InitScheme, Model, ModelConfig, ModelKind, Norm, PosEnc,
};
use crate::params::ParamStore;
use crate::testing::{cpu, gpu, posenc, preset, random_vec};

fn model(vocab: usize, posenc: PosEnc) -> Model {
    Model::new(config(vocab, posenc)).unwrap()
}

fn config(vocab: usize, posenc: PosEnc) -> ModelConfig {
    ModelConfig {
        vocab,
        d_model: 8,
        heads: 2,
        layers: 1,
        ffn: 16,
        dropout: 0.0,
        max_len: 16,
        kind: ModelKind::Seq2Seq {
            tied_head: false,
            decoder_layers: 2,
            decoder_block: Block::Rk2 { gamma: [0.5, 0.5] },
        },
        posenc,
        embed_scale: EmbedScale::None,
        block: Block::Residual,
        ..ModelConfig::default()
    }
}

/// FLOATER's translation model with fairseq's backbone around it: post-LN blocks (the
/// decoder's cross-attention between its self-attention and FFN), no embedding layer norm, no
/// final norms, Xavier-uniform init, ReLU.
fn fairseq_post(vocab: usize) -> Model {
    let mut c = config(vocab, posenc(r#"{ type = "floater" }"#));
    c.kind = ModelKind::Seq2Seq {
        tied_head: false,
        decoder_layers: 2,
        decoder_block: Block::Residual,
    };
    c.norm = Norm::Post;
    c.embedding_norm = Some(false);
    c.init = Some(InitScheme::Fairseq);
    c.activation = Activation::Relu;
    Model::new(c).unwrap()
}

/// Parameters uniform in ±`scale`: far from uniform next-token distributions, so that the
/// hypotheses' scores are well apart.
fn params(model: &Model, backend: std::rc::Rc<dyn crate::backend::Backend>, scale: f32) -> ParamStore {
    let g = model.declare_params().unwrap();
    let params = ParamStore::init(backend, &g, 1).unwrap();
    for (i, (name, meta)) in g.params().enumerate() {
        let values: Vec<f32> = random_vec(meta.numel(), 100 + i as u64)
            .iter()
            .map(|v| v * scale)
            .collect();
        params.set(name, &values).unwrap();
    }
    params
}

/// The teacher-forced log-probability of each token of `target` then EOS, given `source`.
fn teacher_forced_log_probs(model: &Model, params: &ParamStore, source: &[i32], target: &[i32]) -> Vec<f32> {
    let pair = Pair {
        source: source.to_vec(),
        target: target.to_vec(),
    };
    let b = PairBatch::new([&pair], source.len(), target.len() + 1).unwrap();
    let mut g = Graph::new();
    let built = model
        .build(
            &mut g,
            Pairs {
                batch: 1,
                source_len: b.source_len(),
                target_len: b.target_len(),
            },
            GraphOptions::default(),
        )
        .unwrap();
    let exec = Executor::new(&g, &[built.logits], params).unwrap();
    built.feed(&exec, &b).unwrap();
    exec.run().unwrap();
    let logits = exec.read_blocking(built.logits).unwrap();
    let vocab = model.config().vocab;
    b.target_out()
        .iter()
        .zip(logits.chunks(vocab))
        .map(|(&token, row)| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let log_total = math::ln(row.iter().map(|&l| math::exp(l - max)).sum::<f32>()) + max;
            row[token as usize] - log_total
        })
        .collect()
}

/// With beam = vocabulary size on a vocabulary of two real tokens and at most 3 generated, every
/// prefix fits in the beam: the search is exhaustive, and must find the best of all 6 allowed
/// sequences (EOS never first, always last) under fairseq's length-normalised score.
#[test]
fn a_beam_as_wide_as_the_vocabulary_finds_the_exhaustive_search_s_best() {
    let (a, b) = (3, 4);
    let model = model(5, preset("sinusoidal"));
    let params = params(&model, cpu(), 1.0);
    let decoder = Seq2SeqDecoder::new(&model, &params).unwrap();
    let sources = [vec![a, b, b], vec![b], vec![a, a, b, a]];
    for length_penalty in [0.0, 1.0] {
        let options = DecodeOptions {
            beam: 5,
            length_penalty,
            max_len_a: 0.0,
            max_len_b: 3,
        };
        let found = pollster::block_on(decoder.decode(&sources, &options)).unwrap();
        for (source, hypothesis) in sources.iter().zip(&found) {
            let candidates: [&[i32]; 6] = [&[a], &[b], &[a, a], &[a, b], &[b, a], &[b, b]];
            let score = |target: &[i32]| {
                let log_probs = teacher_forced_log_probs(&model, &params, source, target);
                log_probs.iter().sum::<f32>() / math::powf(log_probs.len() as f32, length_penalty)
            };
            let best = candidates
                .iter()
                .max_by(|x, y| score(x).total_cmp(&score(y)))
                .unwrap();
            assert_eq!(
                &hypothesis.tokens, best,
                "source {source:?}, length penalty {length_penalty}"
            );
            assert!((hypothesis.score - score(best)).abs() < 1e-4, "{hypothesis:?}");
        }
    }
}

/// Every hypothesis' per-token log-probabilities are the teacher-forced model's, on the CPU and
/// the GPU: the cache rows followed their hypotheses through the beam's reordering.
#[test]
fn beam_hypotheses_carry_the_teacher_forced_log_probabilities() {
    let mut backends = vec![cpu()];
    backends.extend(gpu());
    for backend in backends {
        let relative = posenc(r#"{ type = "relative", buckets = 8, max_distance = 20 }"#);
        let floater = posenc(r#"{ type = "floater" }"#);
        for model in [model(9, relative), model(9, floater), fairseq_post(9)] {
            let posenc = &model.config().posenc;
            let params = params(&model, backend.clone(), 0.5);
            let decoder = Seq2SeqDecoder::new(&model, &params).unwrap();
            let sources = [vec![3, 4, 5, 6], vec![8, 7]];
            for beam in [1, 3] {
                let options = DecodeOptions {
                    beam,
                    max_len_a: 0.0,
                    max_len_b: 7,
                    ..DecodeOptions::default()
                };
                let found = pollster::block_on(decoder.decode(&sources, &options)).unwrap();
                assert!(
                    found.iter().any(|h| h.tokens.len() >= 3),
                    "{posenc:?}, norm {:?}: decoding stopped too early to test the cache: {found:?}",
                    model.config().norm
                );
                for (source, hypothesis) in sources.iter().zip(&found) {
                    let expected = teacher_forced_log_probs(&model, &params, source, &hypothesis.tokens);
                    let what = format!(
                        "{posenc:?}, norm {:?}, beam {beam}, on {:?}: {hypothesis:?}",
                        model.config().norm,
                        backend.kind()
                    );
                    crate::testing::assert_close(&what, &hypothesis.token_log_probs, &expected, 1e-4, 1e-4);
                    let mean = expected.iter().sum::<f32>() / expected.len() as f32;
                    assert!((hypothesis.score - mean).abs() < 1e-4, "{what}");
                    assert!(!hypothesis.tokens.contains(&EOS), "{what}");
                }
            }
        }
    }
}

#[test]
fn bad_requests_are_errors_naming_the_problem() {
    let model = model(6, preset("learned"));
    let params = params(&model, cpu(), 0.1);
    let decoder = Seq2SeqDecoder::new(&model, &params).unwrap();
    let decode = |sources: &[Vec<i32>], beam| {
        let options = DecodeOptions {
            beam,
            ..DecodeOptions::default()
        };
        pollster::block_on(decoder.decode(sources, &options))
            .unwrap_err()
            .to_string()
    };
    assert!(decode(&[vec![3], vec![]], 1).contains("source 1 is empty"));
    assert!(decode(&[vec![3, 9]], 1).contains("source 0 holds token id 9, outside the vocabulary [0, 6)"));
    assert!(decode(&[vec![3]], 0).contains("the beam must be in 1..=64, got 0"));
    assert!(decode(&[], 1).contains("no sources"));
    // A source longer than the encoder's learned table.
    let err = decode(&[vec![3; 17]], 1);
    assert!(
        err.contains("sequence length 17 is over the learned position table's max_len 16"),
        "{err}"
    );
    // The decoder's table bounds the output: max_len_a 2 and b 10 would allow 14 for a 2-token
    // source, the table 16; a 5-token source is held to 16.
    assert_eq!(decoder.max_len(2, &DecodeOptions::default()), 14);
    assert_eq!(decoder.max_len(5, &DecodeOptions::default()), 16);
    let lm = Model::new(ModelConfig {
        kind: ModelKind::CausalLm { tied_head: true },
        ..model.config().clone()
    })
    .unwrap();
    let err = Seq2SeqDecoder::new(&lm, &params).err().unwrap().to_string();
    assert!(err.contains("only a seq2seq model translates"), "{err}");
}
