//! The visualizer on seq2seq checkpoints: the translate view decodes as `posflow translate` does
//! and shows cross-attention as output × source maps; the position-encoding view shows both sides'
//! encodings (and FLOATER's cross-attention flow); the other views say what a seq2seq model is.
#![cfg(feature = "viz")]

use std::rc::Rc;

use posflow::backend::{Backend, CpuBackend};
use posflow::checkpoint::{Checkpoint, Metadata, TrainingState};
use posflow::data::{CharTokenizer, PairTokenizer, TaskTokenizer};
use posflow::inference::{DecodeOptions, Seq2SeqDecoder};
use posflow::model::{Block, EmbedScale, FloaterConfig, FloaterForm, Model, ModelConfig, ModelKind, PosEnc};
use posflow::model::{Learned, Sinusoidal};
use posflow::params::ParamStore;
use posflow::viz::posenc::position_encodings;
use posflow::viz::prompt::complete;
use posflow::viz::translate::translate;
use posflow::viz::{LoadedCheckpoint, Spawner, View, Viewer};

const LETTERS: &str = "abcdefgh";

fn tokenizer() -> PairTokenizer {
    PairTokenizer::Chars(CharTokenizer::from_text(LETTERS))
}

fn config(posenc: PosEnc) -> ModelConfig {
    ModelConfig {
        vocab: tokenizer().vocab_size(),
        d_model: 16,
        heads: 2,
        layers: 1,
        ffn: 32,
        dropout: 0.0,
        max_len: 12,
        kind: ModelKind::Seq2Seq {
            tied_head: true,
            decoder_layers: 2,
            decoder_block: Block::Residual,
        },
        posenc,
        embed_scale: EmbedScale::SqrtD,
        block: Block::Rk2 { gamma: [0.5, 0.5] },
        ..ModelConfig::default()
    }
}

fn cpu() -> Rc<dyn Backend> {
    Rc::new(CpuBackend::new())
}

/// A seq2seq checkpoint of `config` at its initial parameters (seed 5), with the pair tokenizer.
fn checkpoint_bytes(config: &ModelConfig) -> Vec<u8> {
    let model = Model::new(config.clone()).unwrap();
    let g = model.declare_params().unwrap();
    let params = ParamStore::init(cpu(), &g, 5).unwrap();
    let metadata = Metadata {
        config: serde_json::to_string(config).unwrap(),
        training: TrainingState::default(),
        tokenizer: Some(TaskTokenizer::Pairs(tokenizer()).to_json()),
    };
    pollster::block_on(Checkpoint::gather(&params, None, metadata))
        .unwrap()
        .to_bytes()
        .unwrap()
}

fn load(config: &ModelConfig) -> LoadedCheckpoint {
    LoadedCheckpoint::from_bytes(cpu(), "s2s", &checkpoint_bytes(config)).unwrap()
}

#[test]
fn translating_decodes_as_the_decoder_does_and_maps_output_against_source() {
    let loaded = load(&config(PosEnc::Sinusoidal(Sinusoidal {
        every_block: false,
        ..Sinusoidal::default()
    })));
    assert!(
        loaded.describe().contains("seq2seq, 1 + 2 layers"),
        "{}",
        loaded.describe()
    );
    for beam in [1, 3] {
        let t = pollster::block_on(translate(&loaded, "abcdef", beam)).unwrap();
        // The same search as the library's decoder on the same parameters.
        let ids = tokenizer().encode_source("abcdef").unwrap();
        let decoder = Seq2SeqDecoder::new(&loaded.saved.model, &loaded.saved.params).unwrap();
        let options = DecodeOptions {
            beam,
            ..DecodeOptions::default()
        };
        let best = pollster::block_on(decoder.decode(&[ids], &options))
            .unwrap()
            .remove(0);
        assert_eq!(
            t.output,
            tokenizer().decode_target(&best.tokens).unwrap(),
            "beam {beam}"
        );
        assert_eq!(t.score, best.score);
        assert_eq!(t.source_tokens, ["a", "b", "c", "d", "e", "f"]);
        let n = best.tokens.len();
        assert_eq!(t.produced.len(), n + 1);
        assert_eq!(t.produced.last().unwrap(), "<eos>");
        assert_eq!(t.decoder_inputs[0], "<bos>");
        if n == 0 {
            assert!(t.attention.is_none());
            continue;
        }
        let maps = t.attention.unwrap();
        // Cross-attention: a row per output position over the six source tokens, per decoder layer.
        assert_eq!(
            (
                maps.cross.layers.len(),
                maps.cross.heads,
                maps.cross.queries,
                maps.cross.keys
            ),
            (2, 2, n + 1, 6)
        );
        assert_eq!(
            (maps.encoder.layers.len(), maps.encoder.queries, maps.encoder.keys),
            (1, 6, 6)
        );
        for head in 0..2 {
            for row in maps.cross.head(1, head).chunks(6) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
            }
        }
    }
    // Bad sources: named, not panics.
    let err = pollster::block_on(translate(&loaded, "abz", 1)).unwrap_err();
    assert!(
        err.to_string().contains("never saw") && err.to_string().contains('z'),
        "{err}"
    );
    let err = pollster::block_on(translate(&loaded, "  ", 1)).unwrap_err();
    assert!(err.to_string().contains("type a source"), "{err}");
    // The prompt view says what the model is instead of failing obscurely.
    let err = pollster::block_on(complete(&loaded, "abc", 4)).unwrap_err();
    assert!(err.to_string().contains("seq2seq model"), "{err}");
}

#[test]
fn a_learned_table_too_short_for_the_source_is_refused_naming_both_lengths() {
    let loaded = load(&config(PosEnc::Learned(Learned {})));
    let err = pollster::block_on(translate(&loaded, &"abcd".repeat(4), 1)).unwrap_err();
    assert!(
        err.to_string().contains("16 tokens") && err.to_string().contains("holds 12"),
        "{err}"
    );
}

#[test]
fn the_encodings_of_both_sides_are_shown() {
    // A learned model: each side's own table.
    let loaded = load(&config(PosEnc::Learned(Learned {})));
    let e = pollster::block_on(position_encodings(&loaded, 8)).unwrap();
    let labels: Vec<&str> = e.maps.iter().map(|m| m.label.as_str()).collect();
    assert_eq!(labels, ["encoder: input", "decoder: input"]);
    let table = |name: &str| pollster::block_on(loaded.saved.params.read(name)).unwrap();
    assert_eq!(e.maps[0].values, table("encoder.pos_emb.weight")[..8 * 16]);
    assert_eq!(e.maps[1].values, table("decoder.pos_emb.weight")[..8 * 16]);

    // FLOATER as the authors' translation model: the encoder's q/k/v biases, the decoder's q/k/v
    // and cross q biases, and the cross k/v biases of the flow over source positions.
    let floater = PosEnc::Floater(FloaterConfig {
        form: FloaterForm::Bias,
        ..FloaterConfig::default()
    });
    let loaded = load(&config(floater));
    let e = pollster::block_on(position_encodings(&loaded, 8)).unwrap();
    let labels: Vec<&str> = e.maps.iter().map(|m| m.label.as_str()).collect();
    for wanted in [
        "encoder: input",
        "encoder: block 0: q bias",
        "encoder: block 0: v bias",
        "decoder: input",
        "decoder: block 1: k bias",
        "decoder: block 1: cross-attention q bias",
        "source positions: block 0: cross-attention k bias",
        "source positions: block 1: cross-attention v bias",
    ] {
        assert!(labels.contains(&wanted), "{wanted} missing from {labels:?}");
    }
    // 2 inputs, 3 encoder biases, 2 × 3 decoder, 2 cross q, 2 × 2 cross k/v.
    assert_eq!(labels.len(), 2 + 3 + 6 + 2 + 4, "{labels:?}");
    for m in &e.maps {
        assert_eq!(
            (m.positions, m.dims, m.values.len()),
            (8, 16, 8 * 16),
            "{}",
            m.label
        );
        assert!(m.values.iter().all(|v| v.is_finite()), "{}", m.label);
    }
    // The three flows have their own parameters: their biases differ.
    let map = |label: &str| &e.maps.iter().find(|m| m.label == label).unwrap().values;
    assert_ne!(map("encoder: block 0: k bias"), map("decoder: block 0: k bias"));
    assert_ne!(
        map("decoder: block 0: k bias"),
        map("source positions: block 0: cross-attention k bias")
    );
}

#[test]
fn the_translate_tab_decodes_a_typed_source_through_the_handle() {
    let viewer = Viewer::new(cpu(), Spawner::blocking());
    let handle = viewer.handle();
    handle
        .load_checkpoint_bytes(
            "s2s",
            &checkpoint_bytes(&config(PosEnc::Sinusoidal(Sinusoidal {
                every_block: false,
                ..Sinusoidal::default()
            }))),
        )
        .unwrap();
    handle.select_view(View::Translate);
    handle.set_source("abc", 2);
    let (source, output) = handle.last_translation().unwrap().unwrap();
    assert_eq!(source, "abc");
    let direct = pollster::block_on(translate(&handle.loaded_checkpoint(0).unwrap(), "abc", 2)).unwrap();
    assert_eq!(output, direct.output);
    handle.set_source("ab!", 2);
    let err = handle.last_translation().unwrap().unwrap_err();
    assert!(err.contains("never saw"), "{err}");
    // Fine-tuning is a language model's: refused with the reason.
    assert!(
        handle
            .start_fine_tune("abcabcabc", 2)
            .unwrap_err()
            .to_string()
            .contains("seq2seq model")
    );
}
