//! Studies: one base run, several variants of it, each trained with several seeds, and the claims
//! the runs are meant to test — what `posflow study FILE` reads, runs (resumably) and reports.
//!
//! # The study file
//!
//! TOML; unknown keys are errors everywhere, as in run configs.
//!
//! ```toml
//! [study]
//! name = "copy_s2l"                  # also the default output directory, runs/studies/<name>
//! description = "What the study asks; which paper figure it mirrors."
//! seeds = [0, 1, 2, 3, 4]            # optional: 0-4 by default
//! level = 0.95                       # optional: the claims' tests' confidence level
//! test = "t"                         # optional: or "permutation"
//! chance_margin = 0.1                # optional: how near chance a mean counts as at chance
//! trainer = "posflow"                # optional: or "torchrun" (python/posflow_torch, each run
//! processes = 2                      #   a DDP job of `processes`; needs POSFLOW_PYTHON with it)
//!
//! [base]                             # a complete run config (the schema of `RunConfig`)
//! data = { task = "copy", min_len = 1, max_len = 16 }
//! [base.model]
//! d_model = 32
//! heads = 2
//! layers = 2
//! ffn = 64
//! max_len = 256
//! kind = { type = "causal_lm" }
//! posenc = { type = "sinusoidal" }
//! [base.train]
//! steps = 400
//! batch = 32
//! lr = 3e-3
//! eval_every = 100
//! eval_lengths = [34, 68, 136]
//!
//! [[variant]]
//! name = "sinusoidal"                # unique; the run directory's name
//! label = "sinusoidal table"         # optional: tables and pictures use it
//! # set: nothing, the base as it is
//!
//! [[variant]]
//! name = "learned"
//! set = { "model.posenc" = { type = "learned" } }
//!
//! [[variant]]
//! name = "learned_longer"
//! set = { "train.steps" = 800, "train.lr" = 1e-3 }
//! warm_start = "learned"             # optional: start from that variant's final checkpoint
//! # data = { task = "names", ... }   # optional: this [data] in place of the base's (e.g. a
//! #                                    classifier fine-tuned from a masked-LM variant)
//!
//! [[claim]]
//! name = "extrapolation"
//! text = "sinusoidal > learned in accuracy at 2x the training length"
//! kind = "order"
//! metric = "accuracy"                # of the final evaluation: loss | accuracy (teacher-forced), or
//!                                    # a pair task's greedy decoding: error_rate | exact_match |
//!                                    # token_accuracy | bleu; a classifier's macro_f1
//! bin = "65-128"                     # a length bin as the metrics log writes it
//! order = ["sinusoidal", "learned"]  # best first
//!
//! [[claim]]
//! name = "faster"
//! text = "warm-started learned reaches learned's final loss in half the steps"
//! kind = "reaches"
//! metric = "loss"
//! bin = "33-64"
//! variant = "learned_longer"
//! baseline = "learned"
//!
//! [[claim]]
//! name = "solves"
//! text = "sinusoidal solves the task at the training lengths (≥ 90% accuracy)"
//! kind = "bound"
//! metric = "accuracy"
//! bin = "1-20"
//! variant = "sinusoidal"
//! bound = 0.9
//! beats = true                       # false: the claim is that it stays short of the bound
//!
//! [[claim]]
//! name = "randomizing_helps"
//! text = "randomized > standard on average over the encodings (Ruoss et al.: +12.0%)"
//! kind = "gain"
//! metric = "accuracy"
//! bin = "21-40"
//! pairs = [["sinusoidal_rand", "sinusoidal"], ["rope_rand", "rope"]]
//! ```
//!
//! - `set` maps *quoted* dotted paths into the run config to values; each replaces the value at
//!   its path wholesale (an inline table replaces the whole `posenc`). The path's parent must
//!   exist in the base; a path of one component (a whole section) is refused, because TOML reads
//!   an unquoted `model.posenc = ...` as a nested table and that would silently replace all of
//!   `[model]`.
//! - Outputs belong to the study: `train.checkpoint`, `train.metrics` and `train.seed` are
//!   refused in `[base]` and in `set` (the seeds come from `[study] seeds`); each run writes
//!   `OUT/runs/<variant>/seed<k>/{model.safetensors, metrics.jsonl, result.json}`.
//! - Every variant's run config is built and validated, the warm-start graph checked for unknown
//!   names and cycles, and every claim checked against the variants, the metrics and the length
//!   bins the variants' evaluations produce, before anything runs.
//!
//! # Running, resuming, outputs
//!
//! Runs go in variant order (a warm start after its source), seeds in the order given; `--jobs N`
//! trains N at once, each thread with its own backend. A run whose `result.json` exists and was
//! made with the run config planned now is skipped; a run killed halfway resumes from its last
//! checkpoint (written at every evaluation) with the trainer's own resume, so it ends as if never
//! interrupted; a checkpoint from another config is ignored and the run starts over. The first run
//! that fails stops the study (runs already going finish).
//!
//! `OUT` gets `study.md` and `study.json` (settings, mean ± sd per variant and length bin, time per
//! run, each claim's measurements, tests and verdicts, per-run values) and SVG pictures:
//! `training_loss.svg` (moving average of the training loss, mean over seeds, band min–max),
//! `eval_loss.svg` (the first bin's validation loss at every evaluation), and one
//! `length_<metric>.svg` per metric the study has (final values per length bin, error bars ± 1
//! sd, bins that start past the training length shaded): loss and accuracy always, and for a pair
//! task the greedy decoding's error_rate, exact_match, token_accuracy and bleu.
//!
//! # Verdicts
//!
//! Spreads are the sample standard deviation over seeds (0 with one seed). Each comparison is a
//! one-sided test on the per-seed values at the study's `level` (`[study] level`, default 0.95):
//! a t-test (`significance`), or with `[study] test = "permutation"` a permutation test
//! (`permutation`). Two variants whose runs share every seed's data stream (the same data and
//! batch size, so the same batches) are compared seed by seed (a paired test on the differences);
//! others by Welch's test.
//!
//! - `order` passes when every adjacent pair of `order` has its means in the stated order (lower
//!   loss and error rate, higher accuracy, exact match and BLEU are better) and its test passes
//!   (an intersection–union test: every pair must pass, so the claim's p is its pairs' largest).
//!   Fewer than two seeds on a side, or a variant without a value in the bin (a learned table
//!   that cannot reach the length), leave it untested.
//! - `reaches`: the target is the baseline's final value, averaged over seeds. For each seed of
//!   `variant`, the first evaluation step whose value is at least as good as the target, as a
//!   fraction of the baseline's `train.steps`. It passes when every seed reaches the target and a
//!   one-sample test puts the fractions' mean below 1; a seed that never reaches it is reported
//!   as such and leaves it untested.
//! - `bound` passes when a one-sample test puts the variant's mean beyond `bound` on the claimed
//!   side (better than it with `beats = true`, worse with `beats = false`). A bound is a **sanity
//!   check** ("learns the training lengths", "does not solve it"), reported apart from the
//!   **comparative claims** (order, reaches, gain) and never counted among their results.
//! - `gain` passes when, per seed, the first variant of each pair beats the second by a mean over
//!   the pairs whose mean over seeds a one-sample test puts above 0 (the seeds pair the runs).
//!
//! The verdict (`verdicts`): a claim's p is adjusted by Benjamini–Hochberg over the study's
//! comparative claims (its sanity checks apart), and the claim **holds** when q < 1 − level.
//! `posflow study FILE --replicate` also runs every variant with fresh seeds, as many as the file
//! lists, the integers after its largest (`Study::fresh_seeds`); the verdict then reads all seeds
//! together, and a claim that passes there but not on the file's seeds and the fresh ones each
//! alone is **not replicated**. A comparison whose every variant has its mean within
//! `[study] chance_margin` (default 0.1) of chance (a token classifier's accuracy: 1 over its
//! classes) is **at chance**, whatever its test. Otherwise it is **not shown**. Each claim
//! carries its evaluation's size (sequences per run in its bin) and the same comparison on every
//! other metric; an order or bound claim is also judged at every evaluation (unadjusted,
//! `over_training`), and `steps_<metric>.svg` draws every variant's metric per length bin and
//! step. The report keeps the earlier rules' verdicts (unpaired, unadjusted t-tests with the
//! fresh seeds merely pointing the claimed way; and the ±1 sd rule before them) in an appendix.
//!
//! `posflow results` judges every study published under `docs/studies/` again from its runs
//! (`published`), adjusts all their claims as one family (`family`), and writes the reports,
//! `docs/results/` and the README's results block (`results_pages`); `--check` compares instead.
//! The published runs are one file a study, `docs/studies/<name>/runs.jsonl.gz` (`archive`):
//! `posflow results --pack DIR` writes it from a study's `DIR/runs/`, `--unpack DIR` puts it
//! back there. It keeps each run's training loss as the mean of every ten steps (the run's own
//! `result.json` and metrics log have every step): the per-step losses were 18 of its 19 MB.

#[cfg(not(target_arch = "wasm32"))]
mod archive;
mod bootstrap;
mod claims;
mod family;
#[cfg(not(target_arch = "wasm32"))]
mod figure;
mod live;
mod multiplicity;
mod overrides;
mod permutation;
#[cfg(not(target_arch = "wasm32"))]
mod plan;
#[cfg(not(target_arch = "wasm32"))]
mod plot;
#[cfg(not(target_arch = "wasm32"))]
mod plot_steps;
#[cfg(not(target_arch = "wasm32"))]
mod published;
#[cfg(not(target_arch = "wasm32"))]
mod report;
#[cfg(not(target_arch = "wasm32"))]
mod report_claims;
mod results;
#[cfg(not(target_arch = "wasm32"))]
mod results_pages;
mod rule;
#[cfg(not(target_arch = "wasm32"))]
mod runner;
mod significance;
mod spec;
mod splitmix;
mod spread;
mod summary;
#[cfg(test)]
mod test_runs;
#[cfg(not(target_arch = "wasm32"))]
mod torchrun;
mod verdicts;

#[cfg(not(target_arch = "wasm32"))]
pub use archive::{ARCHIVE, pack, read_archive, unpack, write_archive};
pub use bootstrap::Bootstrap;
pub use claims::{
    ClaimKind, ClaimOutcome, ClaimSpec, Measured, Metric, PairOutcome, Reading, SeedReach, StepVerdict,
    Verdict, chance, judge, judge_at, verdicts_over_training,
};
pub use family::{FamilyClaim, Tally, adjust_family};
pub use live::{Advanced, Clock, LiveRun, LiveStudy};
pub use multiplicity::benjamini_hochberg;
#[cfg(not(target_arch = "wasm32"))]
pub use plan::{RunPlan, StudyProgress, plan_runs};
#[cfg(not(target_arch = "wasm32"))]
pub use plot::write_pictures;
#[cfg(not(target_arch = "wasm32"))]
pub use published::{Published, published_names};
#[cfg(not(target_arch = "wasm32"))]
pub use report::{Report, inline_toml, write_reports};
pub use results::{BinValue, EvalPoint, RunResult};
#[cfg(not(target_arch = "wasm32"))]
pub use results_pages::{
    HEADLINE_BEGIN, HEADLINE_END, README_BEGIN, README_END, index_page, readme_block, readme_headline,
    replace_block, study_page,
};
pub use rule::{DEFAULT_CHANCE_MARGIN, Rule, TestKind};
#[cfg(not(target_arch = "wasm32"))]
pub use runner::{BackendFactory, run_study};
pub use significance::{DEFAULT_LEVEL, OneSided, mean_below, welch};
pub use spec::{Study, StudyTrainer, Variant};
pub use spread::Spread;
pub use summary::{BinSummary, StudySummary, VariantSummary, bin_start, summarize};
pub use verdicts::{ClaimReport, EarlierVerdicts, OtherMetric, Replication, judge_claims};
