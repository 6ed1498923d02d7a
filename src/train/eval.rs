//! Evaluation: loss and accuracy per length bin on validation sets. Each batch shape gets one
//! forward-only graph, built on first use and kept, so periodic evaluation compiles nothing new.

use std::collections::HashMap;
use std::fmt;

use super::class_report::ClassReport;
use super::pair_report::PairReport;
use super::task::{EvalBins, EvalSet};
use crate::data::{ClassBatch, LengthBins};
use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::Graph;
use crate::inference::EncodingCache;
use crate::model::GraphOptions;
use crate::model::Tokens;
use crate::model::{Model, ModelGraph};
use crate::params::ParamStore;

/// Forward graphs of one model, by batch shape, over one parameter store.
pub struct Evaluator {
    model: Model,
    /// A shape the model cannot take (a learned table shorter than the length) is kept as its
    /// error, so it is reported, not retried, at every evaluation.
    graphs: HashMap<[usize; 2], Result<(ModelGraph, Executor), String>>,
    /// FLOATER at randomized positions: its flow through every position of the range, which every
    /// evaluation graph reads, solved once per evaluation (built on first use; `None` inside for a
    /// model without one, or at positions 0..T, where each graph solves its own short flow).
    flow: Option<Option<EncodingCache>>,
}

/// The outcome of one evaluation.
#[derive(Clone, Debug, Default)]
pub struct EvalReport {
    pub bins: LengthBins,
    /// Requested lengths that could not be evaluated, and why.
    pub failures: Vec<(usize, String)>,
    /// The longest training sequence: bins past it measure extrapolation.
    pub train_len: usize,
    /// A seq2seq model's scores by bin of source length (then `bins` is empty).
    pub pairs: Option<PairReport>,
    /// A classifier's scores by bin of text length (then `bins` is empty).
    pub classes: Option<ClassReport>,
}

impl Evaluator {
    pub fn new(model: Model) -> Self {
        Self {
            model,
            graphs: HashMap::new(),
            flow: None,
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Evaluates `params` (always the same store for one evaluator: its graphs are bound to it) on
    /// `sets`.
    pub async fn evaluate(
        &mut self,
        params: &ParamStore,
        sets: Vec<EvalSet>,
        binning: EvalBins,
        train_len: usize,
    ) -> EvalReport {
        let mut report = EvalReport {
            bins: binning.empty(),
            // Bins of a task's own lengths are past training beyond its own longest length.
            train_len: match binning {
                EvalBins::RowLength => train_len,
                EvalBins::SetLength { train_max_len } => train_max_len,
            },
            ..EvalReport::default()
        };
        let flow = match self.solve_flow(params).await {
            Ok(flow) => flow,
            Err(e) => {
                let why = e.to_string();
                report.failures = sets.iter().map(|set| (set.length, why.clone())).collect();
                return report;
            }
        };
        for set in sets {
            let (length, binned_at) = (set.length, binning.binned_at(set.length));
            let flow = flow.as_deref();
            if let Err(e) = self
                .evaluate_set(params, set, binned_at, flow, &mut report.bins)
                .await
            {
                report.failures.push((length, e));
            }
        }
        report
    }

    /// FLOATER's flow through every randomized position, solved afresh for this evaluation's
    /// parameters; `None` for a model that solves nothing so (see [`Evaluator::flow`]). Solving
    /// 2,048 positions per batch would cost more than the batches themselves.
    async fn solve_flow(&mut self, params: &ParamStore) -> Result<Option<Vec<f32>>> {
        let Some(range) = self.model.config().random_positions else {
            return Ok(None);
        };
        if self.flow.is_none() {
            self.flow = Some(EncodingCache::new(&self.model, params, range)?);
        }
        match self.flow.as_ref().and_then(Option::as_ref) {
            Some(cache) => {
                cache.invalidate();
                Ok(Some(cache.values().await?))
            }
            None => Ok(None),
        }
    }

    /// A classifier's logits `[B, n_classes]` for `batch` (the `index`th of its length), on the
    /// padded graph of its shape.
    pub(super) async fn logits_of(
        &mut self,
        params: &ParamStore,
        batch: &ClassBatch,
        index: usize,
    ) -> Result<Vec<f32>> {
        let [rows, len] = batch.batch.shape();
        let model = &self.model;
        let graph = self
            .graphs
            .entry([rows, len])
            .or_insert_with(|| forward_graph(model, params, rows, len, false).map_err(|e| e.to_string()));
        let (graph, exec) = graph.as_ref().map_err(|e| Error::Input(e.clone()))?;
        graph.draw_positions(exec, eval_positions_seed(len, index))?;
        graph.feed(exec, batch.batch.tokens(), &batch.classes, batch.batch.mask())?;
        exec.run()?;
        exec.check().await?;
        exec.read(graph.logits).await
    }

    async fn evaluate_set(
        &mut self,
        params: &ParamStore,
        set: EvalSet,
        binned_at: Option<usize>,
        flow: Option<&[f32]>,
        bins: &mut LengthBins,
    ) -> std::result::Result<(), String> {
        // A token classifier's logits are over its classes, the LMs' over the vocabulary.
        let config = self.model.config();
        let vocab = config.kind.n_classes().unwrap_or(config.vocab);
        // A set's batches are recorded together or not at all.
        let mut set_bins = bins.empty_like();
        for (index, batch) in set.batches.map_err(|e| e.to_string())?.into_iter().enumerate() {
            let [rows, len] = batch.shape();
            let model = &self.model;
            let graph = self.graphs.entry([rows, len]).or_insert_with(|| {
                forward_graph(model, params, rows, len, flow.is_some()).map_err(|e| e.to_string())
            });
            let (graph, exec) = graph.as_ref().map_err(Clone::clone)?;
            let logits = async {
                if let Some(flow) = flow {
                    graph.feed_encodings(exec, flow)?;
                }
                graph.draw_positions(exec, eval_positions_seed(set.length, index))?;
                graph.feed_batch(exec, &batch)?;
                exec.run()?;
                exec.check().await?;
                exec.read(graph.logits).await
            }
            .await
            .map_err(|e| e.to_string())?;
            set_bins
                .record_logits(&batch, &logits, vocab, binned_at)
                .map_err(|e| e.to_string())?;
        }
        bins.merge(&set_bins);
        Ok(())
    }
}

/// The seed of randomized positions for batch `index` of the evaluation set at `length`: fixed, so
/// that every run and every evaluation of a study reads the same positions (Ruoss et al. fix their
/// evaluation's generator too), and apart from the training draws (the top bit set).
fn eval_positions_seed(length: usize, index: usize) -> u64 {
    (1 << 63) | ((length as u64) << 24) | index as u64
}

/// The model's graph for `rows` × `len`, running only forward, FLOATER's encodings an input when
/// `cached_flow` (solved once per evaluation, [`Evaluator::solve_flow`]). The loss stays among the outputs so
/// that the targets are part of the plan and one `feed` serves training and evaluation.
fn forward_graph(
    model: &Model,
    params: &ParamStore,
    rows: usize,
    len: usize,
    cached_flow: bool,
) -> Result<(ModelGraph, Executor)> {
    let mut g = Graph::new();
    // A classifier's and a token classifier's batches are padded (rows of many lengths).
    let mut options = match model.config().kind.pads_batches() {
        true => GraphOptions::default().padded(),
        false => GraphOptions::default(),
    };
    if cached_flow {
        options = options.cached_encodings();
    }
    let graph = model.build(&mut g, Tokens { batch: rows, len }, options)?;
    let exec = Executor::new(&g, &[graph.logits, graph.loss], params)?;
    Ok((graph, exec))
}

impl fmt::Display for EvalReport {
    /// A table: one row per length bin, marked where all its lengths are longer than training,
    /// then the lengths that failed.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if let Some(classes) = &self.classes {
            write!(f, "{classes}")?;
            for (length, why) in &self.failures {
                writeln!(f, "texts from {length} characters: not evaluated: {why}")?;
            }
            return Ok(());
        }
        if let Some(pairs) = &self.pairs {
            write!(f, "{pairs}")?;
            for (length, why) in &self.failures {
                writeln!(f, "sources from {length}: not evaluated: {why}")?;
            }
            return Ok(());
        }
        writeln!(
            f,
            "{:>10}  {:>8}  {:>8}  {:>9}  {:>9}",
            "length", "loss", "accuracy", "tokens", ""
        )?;
        for (lengths, totals) in self.bins.bins() {
            let beyond = if *lengths.start() > self.train_len {
                "> trained"
            } else {
                ""
            };
            writeln!(
                f,
                "{:>10}  {:>8.4}  {:>7.1}%  {:>9}  {beyond:>9}",
                format!("{}-{}", lengths.start(), lengths.end()),
                totals.mean_loss(),
                100.0 * totals.accuracy(),
                totals.tokens
            )?;
        }
        for (length, why) in &self.failures {
            writeln!(f, "{length:>10}  not evaluated: {why}")?;
        }
        Ok(())
    }
}
