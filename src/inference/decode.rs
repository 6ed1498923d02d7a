//! Decoding a seq2seq model: beam search as fairseq's `SequenceGenerator` does it (greedy is a
//! beam of 1), over the incremental graphs of [`crate::model::DecoderStep`].
//!
//! Each sentence keeps up to `beam` live hypotheses, one row each; a step runs every row's last
//! token at position t and gives the next token's log-probabilities. Of all (hypothesis, token)
//! extensions, the best 2·beam by summed log-probability are taken in order: one ending in EOS is
//! finished (while fewer than `beam` are) with the score `sum / length^length_penalty` (length
//! counting the EOS), any other becomes a live hypothesis of the next step (while fewer than
//! `beam` are). A sentence is done when `beam` hypotheses finished; the best finished score wins.
//! As fairseq: PAD and BOS are never generated, EOS not first (no empty output), and at the
//! maximum length `a·source_len + b` only EOS is.
//!
//! The rows' cached keys and values live on the host and follow their hypotheses: after each step
//! every new hypothesis takes its parent row's cache plus the parent's new keys and values.

use std::cell::RefCell;
use std::rc::Rc;

use crate::data::{BOS, EOS, PAD};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::math;
use crate::model::{DecoderFlow, DecodingStep, GraphOptions, Sources};
use crate::model::{DecoderStep, Model, ModelKind};
use crate::params::ParamStore;

/// How to decode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeOptions {
    /// Live hypotheses per sentence: 1 is greedy decoding.
    pub beam: usize,
    /// fairseq's `lenpen`: a finished hypothesis scores `sum of log-probs / length^this`; 1
    /// (fairseq's default) is the mean, 0 the raw sum (favours short outputs).
    pub length_penalty: f32,
    /// At most `max_len_a · source_len + max_len_b` tokens are generated, EOS included.
    pub max_len_a: f32,
    pub max_len_b: usize,
}

impl Default for DecodeOptions {
    /// Greedy, fairseq's length penalty, and room for targets twice the source's length.
    fn default() -> Self {
        Self {
            beam: 1,
            length_penalty: 1.0,
            max_len_a: 2.0,
            max_len_b: 10,
        }
    }
}

/// The most hypotheses per sentence: a beam's rows are each a decoder batch row.
pub const MAX_BEAM: usize = 64;

/// One decoded sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Hypothesis {
    /// The generated tokens, without the final EOS.
    pub tokens: Vec<i32>,
    /// The log-probability of each generated token, the final EOS's included.
    pub token_log_probs: Vec<f32>,
    /// The beam's ranking score: the sum of `token_log_probs` over length^length_penalty.
    pub score: f32,
}

/// Decodes sources with one model's parameters (read at every call: decoding during training
/// sees the latest weights).
pub struct Seq2SeqDecoder {
    model: Model,
    params: ParamStore,
    /// Step graphs of the current (rows, source length), by position.
    steps: RefCell<StepGraphs>,
}

#[derive(Default)]
struct StepGraphs {
    shape: (usize, usize),
    by_position: Vec<Rc<(DecoderStep, Executor)>>,
}

/// A live hypothesis.
#[derive(Clone)]
struct Live {
    tokens: Vec<i32>,
    log_probs: Vec<f32>,
    sum: f32,
    /// Its row in the last step.
    row: usize,
}

/// One sentence's search.
struct Search {
    live: Vec<Live>,
    finished: Vec<Hypothesis>,
    max_len: usize,
    done: bool,
}

impl Seq2SeqDecoder {
    pub fn new(model: &Model, params: &ParamStore) -> Result<Self> {
        if !matches!(model.config().kind, ModelKind::Seq2Seq { .. }) {
            return Err(Error::Input(
                "only a seq2seq model translates; this model has no decoder reading a source".into(),
            ));
        }
        Ok(Self {
            model: model.clone(),
            params: params.clone(),
            steps: RefCell::new(StepGraphs::default()),
        })
    }

    /// The most tokens (EOS included) the decoder may generate for a source of `source_len`:
    /// `options`' bound, and no more positions than a learned or TUPE table holds.
    pub fn max_len(&self, source_len: usize, options: &DecodeOptions) -> usize {
        let c = self.model.config();
        let bound = (options.max_len_a * source_len as f32).floor().max(0.0) as usize + options.max_len_b;
        let table = if c.posenc.has_table() {
            c.max_len
        } else {
            usize::MAX
        };
        bound.min(table).max(1)
    }

    /// The best hypothesis for each source (token ids without specials).
    pub async fn decode(&self, sources: &[Vec<i32>], options: &DecodeOptions) -> Result<Vec<Hypothesis>> {
        self.check(sources, options)?;
        let beam = options.beam;
        let n = sources.len();
        let rows = n * beam;
        let source_len = sources.iter().map(Vec::len).max().unwrap_or(1);
        let mut searches: Vec<Search> = sources
            .iter()
            .map(|s| Search {
                live: vec![Live {
                    tokens: Vec::new(),
                    log_probs: Vec::new(),
                    sum: 0.0,
                    row: 0,
                }],
                finished: Vec::new(),
                max_len: self.max_len(s.len(), options),
                done: false,
            })
            .collect();
        let longest = searches.iter().map(|s| s.max_len).max().unwrap_or(1);
        let (memory, mask) = self.encode(sources, source_len, beam).await?;
        let flow = self.decoder_flow(longest).await?;
        let vocab = self.model.config().vocab;
        // cache[block][stage] = (keys, values), each [rows, H, t, Dh].
        let mut cache: Vec<Vec<(Vec<f32>, Vec<f32>)>> = Vec::new();
        for t in 0..longest {
            let tokens = row_tokens(&searches, beam, rows);
            let inputs = StepInputs {
                rows,
                source_len,
                tokens: &tokens,
                mask: &mask,
                memory: &memory,
                cache: &cache,
                flow: flow.as_deref().map(|f| (f, f.len() / longest)),
            };
            let (logits, new_kv) = self.step(t, inputs).await?;
            // The row each new hypothesis continues (None: a free row).
            let mut parents = vec![None; rows];
            for (s, search) in searches.iter_mut().enumerate() {
                if search.done {
                    continue;
                }
                let max_len = search.max_len;
                search.advance(t, beam, options.length_penalty, |live| {
                    let row = s * beam + live.row;
                    allowed_log_probs(&logits[row * vocab..(row + 1) * vocab], t, max_len)
                });
                for (i, live) in search.live.iter_mut().enumerate() {
                    parents[s * beam + i] = Some(s * beam + live.row);
                    live.row = i;
                }
            }
            if searches.iter().all(|s| s.done) {
                break;
            }
            cache = extend_cache(&cache, &new_kv, &parents, self.model.config().heads);
        }
        Ok(searches.into_iter().map(Search::best).collect())
    }

    /// Runs the encoder on the sources (padded to `source_len`) and returns every decoder
    /// block's cross-attention keys and values and the source mask, each sentence's rows repeated
    /// for its `beam` hypotheses.
    async fn encode(
        &self,
        sources: &[Vec<i32>],
        source_len: usize,
        beam: usize,
    ) -> Result<(Vec<(Vec<f32>, Vec<f32>)>, Vec<i32>)> {
        let n = sources.len();
        let mut g = Graph::new();
        let graph = self
            .model
            .build(&mut g, Sources { batch: n, source_len }, GraphOptions::default())?;
        let outputs: Vec<_> = graph.keys_values.iter().flat_map(|&(k, v)| [k, v]).collect();
        let exec = Executor::new(&g, &outputs, &self.params)?;
        let mut tokens = Vec::with_capacity(n * source_len);
        let mut mask = Vec::with_capacity(n * source_len);
        for source in sources {
            tokens.extend(
                source
                    .iter()
                    .copied()
                    .chain(std::iter::repeat_n(PAD, source_len - source.len())),
            );
            mask.extend((0..source_len).map(|i| i32::from(i < source.len())));
        }
        graph.feed(&exec, &tokens, &mask)?;
        exec.run()?;
        exec.check().await?;
        let mut memory = Vec::with_capacity(graph.keys_values.len());
        for &(k, v) in &graph.keys_values {
            memory.push((
                repeat_rows(&exec.read(k).await?, n, beam),
                repeat_rows(&exec.read(v).await?, n, beam),
            ));
        }
        Ok((memory, repeat_rows(&mask, n, beam)))
    }

    /// FLOATER: the decoder's flow through `len` positions, `[len, rows, D]`; `None` otherwise.
    async fn decoder_flow(&self, len: usize) -> Result<Option<Vec<f32>>> {
        let mut g = Graph::new();
        let Some(trajectory) = self
            .model
            .build(&mut g, DecoderFlow { len }, GraphOptions::default())?
        else {
            return Ok(None);
        };
        let exec = Executor::new(&g, &[trajectory], &self.params)?;
        exec.run()?;
        exec.check().await.map_err(|e| {
            Error::Input(format!(
                "the decoder's position encodings cannot be computed: {e}"
            ))
        })?;
        Ok(Some(exec.read(trajectory).await?))
    }

    /// The step graph at position `t` for `rows` rows of sources of `source_len`, built on first
    /// use and kept (a new shape replaces the kept ones). Shared out, so that no borrow of the
    /// cache is held while a step runs.
    fn step_graph(&self, rows: usize, source_len: usize, t: usize) -> Result<Rc<(DecoderStep, Executor)>> {
        let mut steps = self.steps.borrow_mut();
        if steps.shape != (rows, source_len) {
            *steps = StepGraphs {
                shape: (rows, source_len),
                by_position: Vec::new(),
            };
        }
        while steps.by_position.len() <= t {
            let mut g = Graph::new();
            let position = steps.by_position.len();
            let step = self.model.build(
                &mut g,
                DecodingStep {
                    batch: rows,
                    source_len,
                    position,
                },
                GraphOptions::default(),
            )?;
            let mut outputs = vec![step.logits];
            outputs.extend(step.keys_values.iter().flatten().flat_map(|&(k, v)| [k, v]));
            let exec = Executor::new(&g, &outputs, &self.params)?;
            steps.by_position.push(Rc::new((step, exec)));
        }
        Ok(steps.by_position[t].clone())
    }

    /// One step at position `t`: every row's next-token logits `[rows, vocab]` and its keys and
    /// values `[rows, H, 1, Dh]` per block and stage.
    async fn step(&self, t: usize, inputs: StepInputs<'_>) -> Result<(Vec<f32>, KeysValues)> {
        let graphs = self.step_graph(inputs.rows, inputs.source_len, t)?;
        let (step, exec) = &*graphs;
        exec.set_i32(step.token, inputs.tokens)?;
        exec.set_i32(step.source_mask, inputs.mask)?;
        for (&(k, v), (keys, values)) in step.memory.iter().zip(inputs.memory) {
            exec.set_f32(k, keys)?;
            exec.set_f32(v, values)?;
        }
        for (block, cached) in step.cache.iter().zip(inputs.cache) {
            for (&(k, v), (keys, values)) in block.iter().zip(cached) {
                exec.set_f32(k, keys)?;
                exec.set_f32(v, values)?;
            }
        }
        if let (Some(input), Some((flow, row))) = (step.encodings, inputs.flow) {
            exec.set_f32(input, &flow[t * row..(t + 1) * row])?;
        }
        step.feed_constants(exec)?;
        exec.run()?;
        exec.check().await?;
        let logits = exec.read(step.logits).await?;
        let mut new_kv = Vec::with_capacity(step.keys_values.len());
        for block in &step.keys_values {
            let mut stages = Vec::with_capacity(block.len());
            for &(k, v) in block {
                stages.push((exec.read(k).await?, exec.read(v).await?));
            }
            new_kv.push(stages);
        }
        Ok((logits, new_kv))
    }

    fn check(&self, sources: &[Vec<i32>], options: &DecodeOptions) -> Result<()> {
        if !(1..=MAX_BEAM).contains(&options.beam) {
            return Err(Error::Input(format!(
                "the beam must be in 1..={MAX_BEAM}, got {}",
                options.beam
            )));
        }
        if !(options.length_penalty.is_finite() && options.max_len_a.is_finite() && options.max_len_a >= 0.0)
        {
            return Err(Error::Input(format!(
                "the length penalty and max_len_a must be finite (max_len_a ≥ 0), got {} and {}",
                options.length_penalty, options.max_len_a
            )));
        }
        if sources.is_empty() {
            return Err(Error::Input("nothing to decode: no sources given".into()));
        }
        let vocab = self.model.config().vocab;
        for (i, source) in sources.iter().enumerate() {
            if source.is_empty() {
                return Err(Error::Input(format!(
                    "source {i} is empty: a seq2seq model needs at least one source token"
                )));
            }
            if let Some(&t) = source
                .iter()
                .find(|&&t| usize::try_from(t).map_or(true, |t| t >= vocab))
            {
                return Err(Error::Input(format!(
                    "source {i} holds token id {t}, outside the vocabulary [0, {vocab})"
                )));
            }
        }
        Ok(())
    }
}

/// Per block, per stage: (keys, values).
type KeysValues = Vec<Vec<(Vec<f32>, Vec<f32>)>>;

/// What one step reads besides its position.
struct StepInputs<'a> {
    rows: usize,
    source_len: usize,
    /// i32 `[rows]`: each row's last token.
    tokens: &'a [i32],
    /// i32 `[rows, S]`.
    mask: &'a [i32],
    /// Per block, the cross-attention (keys, values) `[rows, H, S, Dh]`.
    memory: &'a [(Vec<f32>, Vec<f32>)],
    /// `[rows, H, t, Dh]` per block and stage; empty at t = 0.
    cache: &'a [Vec<(Vec<f32>, Vec<f32>)>],
    /// FLOATER's decoder flow `[len, rows, D]` and the width of one position's row.
    flow: Option<(&'a [f32], usize)>,
}

impl Search {
    /// Extends the live hypotheses by one token (the one at position t + 1), `log_probs(live)`
    /// giving a live hypothesis' next-token log-probabilities (−∞ where a token is not allowed).
    fn advance(&mut self, t: usize, beam: usize, length_penalty: f32, log_probs: impl Fn(&Live) -> Vec<f32>) {
        // (sum, hypothesis, token, the token's log-probability)
        let mut candidates = Vec::new();
        for (i, live) in self.live.iter().enumerate() {
            for (token, p) in log_probs(live).into_iter().enumerate() {
                if p > f32::NEG_INFINITY {
                    candidates.push((live.sum + p, i, token as i32, p));
                }
            }
        }
        // Best first; a stable sort keeps ties in (hypothesis, token) order.
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut next = Vec::with_capacity(beam);
        for &(sum, i, token, p) in candidates.iter().take(2 * beam) {
            let parent = &self.live[i];
            let mut log_probs = parent.log_probs.clone();
            log_probs.push(p);
            if token == EOS {
                if self.finished.len() < beam {
                    let length = (t + 1) as f32;
                    self.finished.push(Hypothesis {
                        tokens: parent.tokens.clone(),
                        token_log_probs: log_probs,
                        score: sum / math::powf(length, length_penalty),
                    });
                }
            } else if next.len() < beam {
                let mut tokens = parent.tokens.clone();
                tokens.push(token);
                next.push(Live {
                    tokens,
                    log_probs,
                    sum,
                    row: parent.row,
                });
            }
        }
        self.live = next;
        self.done = self.finished.len() >= beam || self.live.is_empty();
        if self.done {
            self.live.clear();
        }
    }

    /// The finished hypothesis of the best score (the first of equals); an empty one scoring −∞
    /// if none finished (a vocabulary of special tokens only).
    fn best(self) -> Hypothesis {
        self.finished
            .into_iter()
            .reduce(|best, h| if h.score > best.score { h } else { best })
            .unwrap_or(Hypothesis {
                tokens: Vec::new(),
                token_log_probs: Vec::new(),
                score: f32::NEG_INFINITY,
            })
    }
}

/// Each row's input token at the next step: a live hypothesis' last token (BOS before any),
/// PAD in free rows.
fn row_tokens(searches: &[Search], beam: usize, rows: usize) -> Vec<i32> {
    let mut tokens = vec![PAD; rows];
    for (s, search) in searches.iter().enumerate() {
        for (i, live) in search.live.iter().enumerate() {
            tokens[s * beam + i] = live.tokens.last().copied().unwrap_or(BOS);
        }
    }
    tokens
}

/// The log-softmax of `logits`, −∞ where fairseq allows no token: PAD and BOS always, EOS at
/// the first position (no empty output), everything but EOS at the last one allowed.
fn allowed_log_probs(logits: &[f32], t: usize, max_len: usize) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_total = math::ln(logits.iter().map(|&l| math::exp(l - max)).sum::<f32>()) + max;
    let last = t + 1 >= max_len;
    logits
        .iter()
        .enumerate()
        .map(|(token, &l)| {
            let token = token as i32;
            let allowed = match token {
                PAD | BOS => false,
                EOS => t > 0 || last,
                _ => !last,
            };
            if allowed { l - log_total } else { f32::NEG_INFINITY }
        })
        .collect()
}

/// `[n, rest]` row-major values with each row repeated `times` times in place.
fn repeat_rows<T: Copy>(values: &[T], n: usize, times: usize) -> Vec<T> {
    let width = values.len() / n;
    values
        .chunks(width)
        .flat_map(|row| std::iter::repeat_n(row, times).flatten().copied())
        .collect()
}

/// The cache of the next step: row r becomes its parent's cached keys and values `[H, t, Dh]`
/// followed by the parent's new ones `[H, 1, Dh]` (zeros for a free row).
fn extend_cache(
    cache: &[Vec<(Vec<f32>, Vec<f32>)>],
    new_kv: &KeysValues,
    parents: &[Option<usize>],
    heads: usize,
) -> KeysValues {
    let rows = parents.len();
    let extend = |old: Option<&Vec<f32>>, new: &Vec<f32>| -> Vec<f32> {
        // new: [rows, H, 1, Dh]; old: [rows, H, t, Dh].
        let dh = new.len() / (rows * heads);
        let t = old.map_or(0, |o| o.len() / (rows * heads * dh));
        let mut out = vec![0.0; rows * heads * (t + 1) * dh];
        for (r, parent) in parents.iter().enumerate() {
            let Some(p) = *parent else { continue };
            for h in 0..heads {
                let to = (r * heads + h) * (t + 1) * dh;
                if let Some(old) = old {
                    let from = (p * heads + h) * t * dh;
                    out[to..to + t * dh].copy_from_slice(&old[from..from + t * dh]);
                }
                let from = (p * heads + h) * dh;
                out[to + t * dh..to + (t + 1) * dh].copy_from_slice(&new[from..from + dh]);
            }
        }
        out
    };
    new_kv
        .iter()
        .enumerate()
        .map(|(block, stages)| {
            stages
                .iter()
                .enumerate()
                .map(|(stage, (k, v))| {
                    let old = cache.get(block).and_then(|b| b.get(stage));
                    (extend(old.map(|o| &o.0), k), extend(old.map(|o| &o.1), v))
                })
                .collect()
        })
        .collect()
}
