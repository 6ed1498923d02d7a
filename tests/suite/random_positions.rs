//! Ruoss et al.'s randomized positions (`[model] random_positions = L`) for every encoding that
//! reads positions: over their whole range (L = T) they are the standard model exactly; at
//! positions drawn from a larger range the GPU computes what the CPU does; every run draws its own
//! positions from a seed; and the config refuses what cannot work, naming why.

use crate::common::models;

use std::rc::Rc;

use models::*;
use posflow::backend::{Backend, gpu_for_tests};
use posflow::data::IGNORE_INDEX;
use posflow::exec::Executor;
use posflow::inference::{Generator, INFERENCE_POSITIONS_SEED};
use posflow::model::{
    GraphOptions, Learned, Model, ModelConfig, ModelGraph, ModelKind, NoEncoding, PosEnc, Sinusoidal, Tokens,
};
use posflow::params::ParamStore;
use posflow::{Graph, TensorId};

const TAGGER: ModelKind = ModelKind::TokenClassifier { n_classes: 3 };

/// Every encoding that reads positions, as the Chomsky studies run them and in their other forms.
fn randomizable() -> Vec<PosEnc> {
    ALL_POSENCS
        .into_iter()
        .filter(|p| !matches!(p, PosEnc::None(_)))
        .collect()
}

/// A token classifier of `posenc` (with randomized positions from 0..`range`, if any).
fn tagger(posenc: PosEnc, range: Option<usize>) -> ModelConfig {
    of_kind(TAGGER, posenc, range)
}

/// A model of `kind` and `posenc` (with randomized positions from 0..`range`, if any).
fn of_kind(kind: ModelKind, posenc: PosEnc, range: Option<usize>) -> ModelConfig {
    ModelConfig {
        random_positions: range,
        max_len: 64,
        ..tiny(kind, posenc)
    }
}

/// The model kinds that take randomized positions: the Chomsky tasks' token classifier and the
/// causal LM (the Compare tab's copy, reverse and Moby Dick).
const KINDS: [ModelKind; 2] = [TAGGER, LM];

/// Every randomizable encoding on every kind that takes randomized positions.
fn cases() -> Vec<(ModelKind, PosEnc)> {
    KINDS
        .into_iter()
        .flat_map(|kind| randomizable().into_iter().map(move |posenc| (kind, posenc)))
        .collect()
}

/// A forward-and-backward graph of a config, bound on a backend.
struct Harness {
    model: ModelGraph,
    grads: Vec<(String, TensorId)>,
    exec: Executor,
}

fn harness(config: ModelConfig, batch: usize, len: usize, backend: Rc<dyn Backend>) -> Harness {
    let model = Model::new(config).unwrap();
    let mut graph = Graph::new();
    let built = model
        .build(
            &mut graph,
            Tokens { batch, len },
            GraphOptions::default().padded(),
        )
        .unwrap();
    let grads = graph.backward(built.loss).unwrap();
    let grads: Vec<(String, TensorId)> = grads
        .iter()
        .map(|(p, g)| (graph.info(p).name.clone(), g))
        .collect();
    let params = ParamStore::init(backend, &graph, 7).unwrap();
    let mut outputs = vec![built.logits, built.loss];
    outputs.extend(grads.iter().map(|(_, g)| *g));
    let exec = Executor::new(&graph, &outputs, &params).unwrap();
    Harness {
        model: built,
        grads,
        exec,
    }
}

/// Logits, loss and every gradient of one run.
type Outputs = Vec<(String, Vec<f32>)>;

impl Harness {
    /// One run on two padded rows, at the positions drawn from `seed`; returns its outputs and the
    /// positions.
    fn run(&self, seed: u64) -> (Outputs, Vec<i32>) {
        let [batch, len] = [self.model.batch, self.model.len];
        let tokens = tokens(batch, len, 30, 5);
        let targets: Vec<i32> = (0..batch * len)
            .map(|i| if i % 2 == 1 { (i % 3) as i32 } else { IGNORE_INDEX })
            .collect();
        let mask: Vec<f32> = (0..batch * len)
            .map(|i| if i >= 2 * len - 3 { 0.0 } else { 1.0 })
            .collect();
        let positions = self.model.draw_positions(&self.exec, seed).unwrap();
        self.model
            .feed(&self.exec, &tokens, &targets, Some(&mask))
            .unwrap();
        self.exec.run().unwrap();
        let read = |t| self.exec.read_blocking(t).unwrap();
        let mut outputs = vec![
            ("logits".to_string(), read(self.model.logits)),
            ("loss".to_string(), read(self.model.loss)),
        ];
        outputs.extend(self.grads.iter().map(|(name, g)| (name.clone(), read(*g))));
        (outputs, positions)
    }
}

/// Drawn from a range as long as the sequence, the positions are 0..T, and the model computes
/// exactly what the standard one does, for every encoding: the rows of its tables, its relative
/// offsets and FLOATER's flow are read at the positions through one path.
#[test]
fn randomized_positions_over_their_whole_range_are_the_standard_model() {
    let (batch, len) = (2, 9);
    for (kind, posenc) in cases() {
        let standard = harness(of_kind(kind, posenc, None), batch, len, cpu());
        let randomized = harness(of_kind(kind, posenc, Some(len)), batch, len, cpu());
        let (want, none) = standard.run(0);
        let (got, positions) = randomized.run(3);
        assert!(none.is_empty(), "a standard graph draws nothing");
        assert_eq!(positions, (0..len as i32).collect::<Vec<_>>(), "{posenc:?}");
        assert_eq!(got.len(), want.len(), "{kind:?} {posenc:?}");
        for ((name, got), (_, want)) in got.iter().zip(&want) {
            assert_eq!(got, want, "{kind:?} {posenc:?}: {name}");
        }
    }
}

/// At positions drawn from a range of 200, every encoding's logits and gradients agree between
/// the GPU and the CPU, and differ from the standard model's (the positions matter).
#[test]
fn randomized_positions_gpu_matches_cpu() {
    let Some(gpu) = gpu_for_tests() else {
        return;
    };
    let (batch, len) = (2, 11);
    for (kind, posenc) in cases() {
        // FLOATER's flow through 200 positions at its Δ stays within its solver's budget.
        let config = of_kind(kind, posenc, Some(200));
        let config = ModelConfig {
            max_len: 200,
            ..config
        };
        let (cpu_out, cpu_positions) = harness(config.clone(), batch, len, cpu()).run(17);
        let (gpu_out, gpu_positions) = harness(config.clone(), batch, len, gpu.clone()).run(17);
        assert_eq!(cpu_positions, gpu_positions, "one seed, one draw");
        for ((name, c), (_, g)) in cpu_out.iter().zip(&gpu_out) {
            let scale = c.iter().fold(1.0f32, |m, x| m.max(x.abs()));
            let worst = c.iter().zip(g).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
            assert!(
                worst <= 1e-4 * scale,
                "{kind:?} {posenc:?} {name}: |gpu - cpu| = {worst}"
            );
        }
        let (standard, _) = harness(
            ModelConfig {
                random_positions: None,
                ..config
            },
            batch,
            len,
            cpu(),
        )
        .run(0);
        assert_ne!(
            standard[0].1, cpu_out[0].1,
            "{kind:?} {posenc:?}: the positions change the logits"
        );
    }
}

/// Every run draws its positions from a seed: the same seed the same positions and logits,
/// another seed others; a feed without a draw is an error naming what to do.
#[test]
fn every_run_draws_its_positions_from_a_seed() {
    let sinusoidal = PosEnc::Sinusoidal(Sinusoidal::default());
    let h = harness(tagger(sinusoidal, Some(2048)), 2, 8, cpu());
    let (a, pa) = h.run(1);
    let (b, pb) = h.run(1);
    let (c, pc) = h.run(2);
    assert_eq!((pa.clone(), &a[0].1), (pb, &b[0].1));
    assert_ne!(pa, pc);
    assert_ne!(a[0].1, c[0].1);
    assert!(pa.windows(2).all(|w| w[0] < w[1]) && pa.iter().all(|&p| (0..2048).contains(&p)));
    let tokens = tokens(2, 8, 30, 5);
    let err = h
        .model
        .feed(&h.exec, &tokens, &[IGNORE_INDEX; 16], None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("randomized positions (random_positions = 2048)") && err.contains("draw_positions"),
        "{err}"
    );
}

/// A graph longer than the range cannot have distinct positions; the error says what to raise.
#[test]
fn a_sequence_longer_than_the_range_is_refused() {
    let model = Model::new(tagger(PosEnc::Sinusoidal(Sinusoidal::default()), Some(8))).unwrap();
    let err = model
        .build(
            &mut Graph::new(),
            Tokens { batch: 1, len: 9 },
            GraphOptions::default(),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("random_positions = 8") && err.contains("at least 9"),
        "{err}"
    );
}

/// The config refuses randomized positions where they cannot work, and says why.
#[test]
fn the_config_refuses_what_randomized_positions_cannot_do() {
    let refused = |config: ModelConfig, expect: &str| {
        let err = Model::new(config).unwrap_err().to_string();
        assert!(err.contains(expect), "{expect}: {err}");
    };
    refused(
        tagger(PosEnc::None(NoEncoding {}), Some(64)),
        "reads no positions, so random_positions has nothing to randomize",
    );
    refused(
        tagger(PosEnc::Learned(Learned {}), Some(65)),
        "the learned position table has max_len = 64 rows; set max_len to at least 65",
    );
    refused(
        tagger(TUPE_A, Some(100)),
        "the TUPE position table has max_len = 64 rows",
    );
    refused(
        tagger(ROPE, Some(0)),
        "random_positions must be in 1..=65536, got 0",
    );
    let seq2seq = ModelKind::Seq2Seq {
        tied_head: true,
        decoder_layers: 1,
        decoder_block: Default::default(),
    };
    refused(
        of_kind(seq2seq, ROPE, Some(64)),
        "a seq2seq model cannot have it yet",
    );
}

/// FLOATER at randomized positions reads its flow through the whole range: solved once (as an
/// evaluation does, `EncodingCache`) and fed to a graph built with cached encodings, it gives the
/// logits of the graph that solves the flow itself, at the same drawn positions.
#[test]
fn floater_s_flow_solved_once_serves_every_draw() {
    for posenc in [FLOATER, FLOATER_COMPATIBLE] {
        let config = tagger(posenc, Some(64));
        let model = Model::new(config).unwrap();
        let (batch, len) = (2, 7);
        let logits = |cached: bool| {
            let mut g = Graph::new();
            let mut options = GraphOptions::default().padded();
            if cached {
                options = options.cached_encodings();
            }
            let built = model.build(&mut g, Tokens { batch, len }, options).unwrap();
            // Every parameter, the flow's too (a cached graph declares none of them).
            let params = ParamStore::init(cpu(), &model.declare_params().unwrap(), 7).unwrap();
            let exec = Executor::new(&g, &[built.logits], &params).unwrap();
            if cached {
                let cache = posflow::inference::EncodingCache::new(&model, &params, 64)
                    .unwrap()
                    .unwrap();
                let flow = pollster::block_on(cache.values()).unwrap();
                built.feed_encodings(&exec, &flow).unwrap();
            }
            let tokens = tokens(batch, len, 30, 2);
            built.draw_positions(&exec, 9).unwrap();
            built.feed(&exec, &tokens, &[IGNORE_INDEX; 14], None).unwrap();
            exec.run().unwrap();
            exec.read_blocking(built.logits).unwrap()
        };
        assert_eq!(logits(true), logits(false), "{posenc:?}");
    }
}

/// A randomized causal LM generates from its context's n tokens at the inference draw of n
/// positions (Ruoss et al. test at a draw for the sequence's own length): the generator's window
/// and its padding change nothing, for an encoding reading a table (learned), a rotation (RoPE),
/// pair offsets (T5) and FLOATER's flow through the whole range.
#[test]
fn generation_reads_a_context_at_the_draw_for_its_own_length() {
    let tokenizer = posflow::data::CharTokenizer::from_text("abcdefghijklmnopqrstuvwxyz ");
    for posenc in [PosEnc::Learned(Learned {}), ROPE, T5, FLOATER_COMPATIBLE] {
        let config = ModelConfig {
            vocab: tokenizer.vocab_size(),
            ..of_kind(LM, posenc, Some(64))
        };
        let model = Model::new(config).unwrap();
        let params = ParamStore::init(cpu(), &model.declare_params().unwrap(), 7).unwrap();
        let generator = Generator::new(&model, &params, tokenizer.clone(), 16).unwrap();
        let n = 5;
        let context = tokens(1, n, tokenizer.vocab_size(), 3);
        let probs = pollster::block_on(generator.next_probabilities(&context)).unwrap();
        let mut g = Graph::new();
        let built = model
            .build(&mut g, Tokens { batch: 1, len: n }, GraphOptions::default())
            .unwrap();
        let exec = Executor::new(&g, &[built.logits], &params).unwrap();
        let positions = built.draw_positions(&exec, INFERENCE_POSITIONS_SEED).unwrap();
        assert!(positions.windows(2).all(|w| w[0] < w[1]) && positions.iter().any(|&p| p >= n as i32));
        built.feed(&exec, &context, &[IGNORE_INDEX; 5], None).unwrap();
        exec.run().unwrap();
        let vocab = tokenizer.vocab_size();
        let last = &exec.read_blocking(built.logits).unwrap()[(n - 1) * vocab..n * vocab];
        let max = last.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let total: f32 = last.iter().map(|l| (l - max).exp()).sum();
        for (p, l) in probs.iter().zip(last) {
            assert!(
                (p - (l - max).exp() / total).abs() < 1e-6,
                "{posenc:?}: {p} vs {l}"
            );
        }
    }
}
