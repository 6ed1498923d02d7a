//! A seq2seq model's evaluation, bin by bin of source length: the teacher-forced loss and token
//! accuracy, and what greedy decoding gets right (exact match, token accuracy, edit-distance error
//! rate, corpus BLEU), with a few examples of each bin.

use super::eval::{EvalReport, Evaluator};
use super::pair_report::PairReport;
use crate::data::{BinTotals, IGNORE_INDEX, PairBatch, PairData};
use crate::error::Result;
use crate::exec::Executor;
use crate::graph::Graph;
use crate::inference::{DecodeOptions, Seq2SeqDecoder};
use crate::math;
use crate::model::Pairs;
use crate::model::{GraphOptions, Model, Seq2SeqGraph};
use crate::params::ParamStore;
use crate::score::SequenceScores;

/// Examples kept per bin for the report.
const EXAMPLES_PER_BIN: usize = 3;

impl Evaluator {
    /// Scores `params` on up to `max_batches` batches of `rows` pairs of every evaluation bin of
    /// `data`. A bin the model cannot take (sources longer than a learned table) is reported as
    /// a failure, the others are scored.
    pub async fn evaluate_pairs(
        &mut self,
        params: &ParamStore,
        data: &PairData,
        rows: usize,
        max_batches: usize,
    ) -> EvalReport {
        let mut report = EvalReport {
            train_len: data.train_max_len(),
            ..EvalReport::default()
        };
        let mut pairs = PairReport {
            train_max_len: data.train_max_len(),
            forced: Vec::new(),
            decoded: SequenceScores::new(data.train_max_len()),
            examples: Vec::new(),
        };
        let decoder = match Seq2SeqDecoder::new(self.model(), params) {
            Ok(decoder) => decoder,
            Err(e) => {
                report.failures.push((0, e.to_string()));
                return report;
            }
        };
        for bin in data.eval() {
            let scored = async {
                let batches = bin.batches(rows)?;
                let mut forced = BinTotals::default();
                let mut decoded = SequenceScores::new(data.train_max_len());
                let mut examples = Vec::new();
                for batch in batches.iter().take(max_batches) {
                    forced_totals(self.model(), params, batch, &mut forced).await?;
                    let sources = batch_sources(batch);
                    let found = decoder.decode(&sources, &DecodeOptions::default()).await?;
                    for (row, hypothesis) in found.iter().enumerate() {
                        let reference = batch_target(batch, row);
                        let tokenizer = data.tokenizer();
                        let (hyp_text, ref_text) = (
                            tokenizer.decode_target(&hypothesis.tokens)?,
                            tokenizer.decode_target(&reference)?,
                        );
                        decoded.record(
                            sources[row].len(),
                            &hypothesis.tokens,
                            &reference,
                            &hyp_text,
                            &ref_text,
                        );
                        if examples.len() < EXAMPLES_PER_BIN {
                            examples.push((tokenizer.decode_source(&sources[row])?, ref_text, hyp_text));
                        }
                    }
                }
                Ok::<_, crate::Error>((forced, decoded, examples))
            }
            .await;
            match scored {
                Ok((forced, decoded, examples)) => {
                    pairs.forced.push((bin.lengths(), forced));
                    pairs.decoded.merge(&decoded);
                    pairs.examples.extend(examples);
                }
                Err(e) => report.failures.push((*bin.lengths().start(), e.to_string())),
            }
        }
        report.pairs = Some(pairs);
        report
    }
}

/// Adds the teacher-forced loss and argmax hits of `batch`'s counted targets to `totals`.
async fn forced_totals(
    model: &Model,
    params: &ParamStore,
    batch: &PairBatch,
    totals: &mut BinTotals,
) -> Result<()> {
    let (graph, exec) = forward_graph(model, params, batch)?;
    graph.feed(&exec, batch)?;
    exec.run()?;
    exec.check().await?;
    let logits = exec.read(graph.logits).await?;
    let vocab = model.config().vocab;
    for (row, &target) in logits.chunks(vocab).zip(batch.target_out()) {
        if target == IGNORE_INDEX {
            continue;
        }
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let log_total = math::ln(row.iter().map(|&l| math::exp(l - max)).sum::<f32>()) + max;
        totals.loss_sum += f64::from(log_total - row[target as usize]);
        totals.tokens += 1;
        let argmax = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i);
        totals.correct += usize::from(argmax == Some(target as usize));
    }
    totals.sequences += batch.rows();
    Ok(())
}

/// The forward graph of `batch`'s shape.
fn forward_graph(model: &Model, params: &ParamStore, batch: &PairBatch) -> Result<(Seq2SeqGraph, Executor)> {
    let mut g = Graph::new();
    let graph = model.build(
        &mut g,
        Pairs {
            batch: batch.rows(),
            source_len: batch.source_len(),
            target_len: batch.target_len(),
        },
        GraphOptions::default(),
    )?;
    let exec = Executor::new(&g, &[graph.logits, graph.loss], params)?;
    Ok((graph, exec))
}

/// Each row's source without padding.
fn batch_sources(batch: &PairBatch) -> Vec<Vec<i32>> {
    let len = batch.source_len();
    batch
        .source_lengths()
        .iter()
        .enumerate()
        .map(|(row, &n)| batch.source()[row * len..row * len + n].to_vec())
        .collect()
}

/// Row `row`'s target without EOS and padding.
fn batch_target(batch: &PairBatch, row: usize) -> Vec<i32> {
    let len = batch.target_len();
    batch.target_out()[row * len..row * len + batch.target_lengths()[row]].to_vec()
}
