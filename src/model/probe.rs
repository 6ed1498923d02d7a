//! What a model attends to: every layer's attention probabilities for one token sequence, or for a
//! seq2seq model one (source, target) pair's encoder, decoder and cross-attention, from a graph
//! built by [`GraphOptions::probed`] (the visualizer's attention and translate views read them).

use super::{Model, ModelKind};
use crate::data::{IGNORE_INDEX, Pair, PairBatch};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::model::GraphOptions;
use crate::model::{Pairs, Tokens};
use crate::params::ParamStore;

/// The attention probabilities of one sequence: per layer `[heads, queries, keys]`, row `i` the
/// distribution of query `i` over the keys (zero where the causal mask hides a key). Self-attention
/// has as many queries as keys; cross-attention has a query per target and a key per source token.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionMaps {
    pub heads: usize,
    pub queries: usize,
    pub keys: usize,
    pub layers: Vec<Vec<f32>>,
}

impl AttentionMaps {
    /// The probability that query `query` of head `head` in layer `layer` gives key `key`.
    pub fn get(&self, layer: usize, head: usize, query: usize, key: usize) -> f32 {
        self.layers[layer][(head * self.queries + query) * self.keys + key]
    }

    /// Head `head` of layer `layer` as a row-major `[queries, keys]` slice.
    pub fn head(&self, layer: usize, head: usize) -> &[f32] {
        let size = self.queries * self.keys;
        &self.layers[layer][head * size..(head + 1) * size]
    }
}

/// A seq2seq model's attention on one (source, target) pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Seq2SeqAttention {
    /// The encoder's self-attention over the source, per encoder layer.
    pub encoder: AttentionMaps,
    /// The decoder's causal self-attention, a query per target position (`<bos>` and the target).
    pub decoder: AttentionMaps,
    /// The decoder's attention to the source: target positions × source tokens.
    pub cross: AttentionMaps,
}

/// Runs `model` with `params` on `tokens` (one sequence; an encoder's starts with BOS) and returns
/// every layer's attention probabilities.
pub async fn attention_maps(model: &Model, params: &ParamStore, tokens: &[i32]) -> Result<AttentionMaps> {
    if tokens.is_empty() {
        return Err(Error::Input(
            "attention needs at least one token: the text is empty".into(),
        ));
    }
    let len = tokens.len();
    let mut g = Graph::new();
    let graph = model.build(&mut g, Tokens { batch: 1, len }, GraphOptions::default().probed())?;
    let exec = Executor::new(&g, &graph.attention_probs, params)?;
    // No loss is read: the targets only have to be valid.
    let targets = match model.config().kind {
        ModelKind::CausalLm { .. } | ModelKind::MaskedLm {} | ModelKind::TokenClassifier { .. } => {
            vec![IGNORE_INDEX; len]
        }
        ModelKind::Encoder { .. } => vec![0],
        ModelKind::Seq2Seq { .. } => return Err(super::transformer::seq2seq_needs_pairs()),
    };
    // Randomized positions: one fixed draw, so that a text always shows the same maps.
    graph.draw_positions(&exec, 0)?;
    graph.feed(&exec, tokens, &targets, None)?;
    exec.run()?;
    exec.check().await?;
    let mut layers = Vec::with_capacity(graph.attention_probs.len());
    for &probs in &graph.attention_probs {
        layers.push(exec.read(probs).await?);
    }
    Ok(AttentionMaps {
        heads: model.config().heads,
        queries: len,
        keys: len,
        layers,
    })
}

/// Runs a seq2seq `model` teacher-forced on one pair (token ids without specials; the decoder reads
/// `<bos>` and the target, so it has `target.len() + 1` query positions, the last predicting
/// `<eos>`) and returns its encoder, decoder and cross-attention probabilities.
pub async fn seq2seq_attention_maps(
    model: &Model,
    params: &ParamStore,
    source: &[i32],
    target: &[i32],
) -> Result<Seq2SeqAttention> {
    let pair = Pair {
        source: source.to_vec(),
        target: target.to_vec(),
    };
    let (source_len, target_len) = (source.len(), target.len() + 1);
    let batch = PairBatch::new([&pair], source_len, target_len)
        .map_err(|e| Error::Input(format!("cannot show the attention of this pair: {e}")))?;
    let mut g = Graph::new();
    let graph = model.build(
        &mut g,
        Pairs {
            batch: 1,
            source_len,
            target_len,
        },
        GraphOptions::default().probed(),
    )?;
    let outputs: Vec<TensorId> = [&graph.encoder_probs, &graph.decoder_probs, &graph.cross_probs]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    let exec = Executor::new(&g, &outputs, params)?;
    graph.feed(&exec, &batch)?;
    exec.run()?;
    exec.check().await?;
    let heads = model.config().heads;
    let read = async |probs: &[TensorId], queries: usize, keys: usize| -> Result<AttentionMaps> {
        let mut layers = Vec::with_capacity(probs.len());
        for &p in probs {
            layers.push(exec.read(p).await?);
        }
        Ok(AttentionMaps {
            heads,
            queries,
            keys,
            layers,
        })
    };
    Ok(Seq2SeqAttention {
        encoder: read(&graph.encoder_probs, source_len, source_len).await?,
        decoder: read(&graph.decoder_probs, target_len, target_len).await?,
        cross: read(&graph.cross_probs, target_len, source_len).await?,
    })
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;
    use crate::backend::CpuBackend;
    use crate::model::{Block, EmbedScale, LN_EPS, ModelConfig, PosEnc};

    fn config(layers: usize, block: Block) -> ModelConfig {
        ModelConfig {
            vocab: 11,
            d_model: 8,
            heads: 2,
            layers,
            ffn: 16,
            dropout: 0.0,
            max_len: 16,
            kind: ModelKind::CausalLm { tied_head: true },
            posenc: PosEnc::default(),
            embed_scale: EmbedScale::None,
            block,
            ..ModelConfig::default()
        }
    }

    fn store(model: &Model) -> ParamStore {
        let g = model.declare_params().unwrap();
        ParamStore::init(Rc::new(CpuBackend::new()), &g, 7).unwrap()
    }

    fn read(params: &ParamStore, name: &str) -> Vec<f32> {
        pollster::block_on(params.read(name)).unwrap()
    }

    /// Layer 0's probabilities computed on the host from the parameters: LN1 of the token
    /// embeddings, the q and k columns of `attn.qkv`, a causal softmax of q·k/√Dh.
    fn direct_first_layer(c: &ModelConfig, params: &ParamStore, tokens: &[i32]) -> Vec<f32> {
        let (d, heads, dh, len) = (c.d_model, c.heads, c.head_dim(), tokens.len());
        let emb = read(params, "tok_emb.weight");
        let (gain, bias) = (
            read(params, "blocks.0.ln1.gain"),
            read(params, "blocks.0.ln1.bias"),
        );
        let (w, b) = (
            read(params, "blocks.0.attn.qkv.weight"),
            read(params, "blocks.0.attn.qkv.bias"),
        );
        let normed: Vec<Vec<f32>> = tokens
            .iter()
            .map(|&t| {
                let x = &emb[t as usize * d..(t as usize + 1) * d];
                let mean = x.iter().sum::<f32>() / d as f32;
                let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
                let rstd = 1.0 / (var + LN_EPS).sqrt();
                (0..d).map(|i| (x[i] - mean) * rstd * gain[i] + bias[i]).collect()
            })
            .collect();
        let project = |x: &[f32], column: usize| -> f32 {
            b[column] + (0..d).map(|i| x[i] * w[i * 3 * d + column]).sum::<f32>()
        };
        let mut out = vec![0.0; heads * len * len];
        for h in 0..heads {
            for i in 0..len {
                let q: Vec<f32> = (0..dh).map(|e| project(&normed[i], h * dh + e)).collect();
                let scores: Vec<f32> = (0..=i)
                    .map(|j| {
                        let k = (0..dh).map(|e| project(&normed[j], d + h * dh + e));
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() / (dh as f32).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let total: f32 = scores.iter().map(|s| crate::math::exp(s - max)).sum();
                for (j, s) in scores.iter().enumerate() {
                    out[(h * len + i) * len + j] = crate::math::exp(s - max) / total;
                }
            }
        }
        out
    }

    #[test]
    fn rows_sum_to_one_and_the_first_layer_matches_a_direct_computation() {
        let tokens = [3, 4, 5, 6, 7, 3, 10];
        for block in [Block::Residual, Block::Rk2 { gamma: [0.5, 0.5] }] {
            let c = config(3, block);
            let model = Model::new(c.clone()).unwrap();
            let params = store(&model);
            let maps = pollster::block_on(attention_maps(&model, &params, &tokens)).unwrap();
            assert_eq!(
                (maps.heads, maps.queries, maps.keys, maps.layers.len()),
                (2, 7, 7, 3),
                "{block:?}"
            );
            for layer in 0..3 {
                for head in 0..2 {
                    for row in maps.head(layer, head).chunks(7) {
                        let total: f32 = row.iter().sum();
                        assert!((total - 1.0).abs() < 1e-5, "{block:?} layer {layer}: {row:?}");
                    }
                }
            }
            // Causal: query 2 gives nothing to key 5.
            assert_eq!(maps.get(1, 1, 2, 5), 0.0);
            let direct = direct_first_layer(&c, &params, &tokens);
            for (i, (a, b)) in maps.layers[0].iter().zip(&direct).enumerate() {
                assert!((a - b).abs() < 1e-5, "{block:?} entry {i}: probe {a}, direct {b}");
            }
        }
    }

    #[test]
    fn a_seq2seq_pair_gives_encoder_decoder_and_cross_maps_whose_rows_are_distributions() {
        let c = ModelConfig {
            kind: ModelKind::Seq2Seq {
                tied_head: true,
                decoder_layers: 2,
                decoder_block: Block::Residual,
            },
            posenc: toml::from_str(r#"type = "sinusoidal""#).unwrap(),
            ..config(1, Block::Rk2 { gamma: [0.5, 0.5] })
        };
        let model = Model::new(c).unwrap();
        let params = store(&model);
        let (source, target) = ([3, 4, 5, 6, 7], [8, 9, 10]);
        let maps = pollster::block_on(seq2seq_attention_maps(&model, &params, &source, &target)).unwrap();
        let shape = |m: &AttentionMaps| (m.layers.len(), m.heads, m.queries, m.keys);
        assert_eq!(shape(&maps.encoder), (1, 2, 5, 5));
        assert_eq!(shape(&maps.decoder), (2, 2, 4, 4));
        assert_eq!(shape(&maps.cross), (2, 2, 4, 5));
        for m in [&maps.encoder, &maps.decoder, &maps.cross] {
            for layer in &m.layers {
                for row in layer.chunks(m.keys) {
                    let total: f32 = row.iter().sum();
                    assert!((total - 1.0).abs() < 1e-5, "{row:?}");
                }
            }
        }
        // The decoder is causal; the encoder reads the source both ways.
        assert_eq!(maps.decoder.get(1, 0, 1, 2), 0.0);
        assert!(maps.encoder.get(0, 1, 0, 4) > 0.0);
        // Causal, so a shorter target's rows are the longer one's first rows.
        let prefix =
            pollster::block_on(seq2seq_attention_maps(&model, &params, &source, &target[..1])).unwrap();
        for layer in 0..2 {
            for head in 0..2 {
                for query in 0..2 {
                    for key in 0..5 {
                        let (a, b) = (
                            prefix.cross.get(layer, head, query, key),
                            maps.cross.get(layer, head, query, key),
                        );
                        assert!(
                            (a - b).abs() < 1e-6,
                            "layer {layer} head {head} ({query}, {key}): {a} vs {b}"
                        );
                    }
                }
            }
        }
        // An empty target has nothing to attend with: a clear error.
        let err = pollster::block_on(seq2seq_attention_maps(&model, &params, &source, &[])).unwrap_err();
        assert!(err.to_string().contains("the target is empty"), "{err}");
    }

    #[test]
    fn an_empty_sequence_is_an_error() {
        let model = Model::new(config(1, Block::Residual)).unwrap();
        let params = store(&model);
        let err = pollster::block_on(attention_maps(&model, &params, &[])).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
