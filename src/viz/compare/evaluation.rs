//! What a comparison evaluates: every length of the bin that holds the training lengths (read by
//! the sanity checks) and of each bin that lies wholly inside the test lengths (read by the
//! comparisons), so that a bin's number stands for all of its lengths rather than one or two; at
//! the final evaluation, enough sequences of each length that every bin holds at least
//! [`BIN_SEQUENCES`]. Bins the test lengths only partly cover are not evaluated.

use std::ops::RangeInclusive;

use super::task::CompareTask;
use crate::error::{Error, Result};
use crate::train::EvalBins;

/// The fewest sequences a bin holds at the final evaluation, over all its lengths: the bin's
/// accuracy then has a sampling error of at most 0.5/√512 ≈ 2.2 points even were every sequence
/// all right or all wrong (Delétang et al. evaluate 512 sequences a length).
pub const BIN_SEQUENCES: usize = 512;

/// The most tokens a run's final evaluation scores, about (lengths × sequences): evaluation far
/// past this keeps a visitor waiting longer than the training does at the fast size.
pub const MAX_EVAL_TOKENS: usize = 2_000_000;

/// The shortest evaluation set a run config takes, in tokens.
const MIN_EVAL_LENGTH: usize = 2;

/// One length bin: its label as the study reports it (in the unit the task's bins count) and
/// the lengths it holds in the task's own unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanBin {
    pub label: String,
    pub lengths: RangeInclusive<usize>,
}

impl PlanBin {
    fn count(&self) -> usize {
        self.lengths.clone().count()
    }
}

/// The evaluation of one comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalPlan {
    /// The bin holding the longest training length.
    pub training: PlanBin,
    /// The bins past it that lie wholly inside the test lengths, shortest first; never empty.
    pub tested: Vec<PlanBin>,
    /// Batches of each length at the final evaluation (one during training).
    pub final_batches: usize,
    /// Sequences a batch holds.
    pub batch: usize,
    task: CompareTask,
}

impl EvalPlan {
    /// The plan for training on lengths 1..=`train_len` and testing on `test` (both in the
    /// task's unit), in batches of `batch`; refused with the reason when no bin lies wholly in
    /// the test lengths or evaluating them all would cost past [`MAX_EVAL_TOKENS`].
    pub fn new(
        task: CompareTask,
        train_len: usize,
        test: RangeInclusive<usize>,
        batch: usize,
    ) -> Result<EvalPlan> {
        let bins = bins(task, train_len);
        let at = |n: usize| bins.iter().position(|b| b.lengths.contains(&n));
        let training_at = at(train_len).ok_or_else(|| {
            Error::Input(format!(
                "the training length {train_len} is past the longest length {} for {}",
                task.max_length(),
                task.name()
            ))
        })?;
        let tested: Vec<PlanBin> = bins[training_at + 1..]
            .iter()
            .filter(|b| test.contains(b.lengths.start()) && test.contains(b.lengths.end()))
            .cloned()
            .collect();
        if tested.is_empty() {
            let past: Vec<String> = bins[training_at + 1..]
                .iter()
                .take(4)
                .map(|b| format!("{}-{}", b.lengths.start(), b.lengths.end()))
                .collect();
            if past.is_empty() {
                return Err(Error::Input(format!(
                    "no whole length bin lies past the training length {train_len} within the \
                     longest length {} {} for {}: choose a shorter training length",
                    task.max_length(),
                    task.unit(),
                    task.name()
                )));
            }
            return Err(Error::Input(format!(
                "no length bin past the training length lies wholly in the test lengths {}-{} {}: \
                 the bins past {train_len} are {}, …; choose test lengths that hold one",
                test.start(),
                test.end(),
                task.unit(),
                past.join(", ")
            )));
        }
        let smallest = std::iter::once(&bins[training_at])
            .chain(&tested)
            .map(PlanBin::count)
            .min()
            .unwrap_or(1);
        let per_batch = batch.max(1).saturating_mul(smallest);
        let plan = EvalPlan {
            training: bins[training_at].clone(),
            tested,
            final_batches: BIN_SEQUENCES.div_ceil(per_batch),
            batch: batch.max(1),
            task,
        };
        if plan.tokens() > MAX_EVAL_TOKENS {
            return Err(Error::Input(plan.too_costly()));
        }
        Ok(plan)
    }

    /// Every evaluated length in the unit the task's evaluation sets take (`eval_lengths`).
    pub fn eval_lengths(&self) -> Vec<usize> {
        self.bins()
            .flat_map(|b| b.lengths.clone())
            .map(|n| self.task.bin_units(n))
            .collect()
    }

    /// Sequences of each length at the final evaluation.
    pub fn sequences_a_length(&self) -> usize {
        self.final_batches.saturating_mul(self.batch)
    }

    /// What the evaluation is, for the visitor: which bins, how many lengths and sequences.
    pub fn describe(&self) -> String {
        let bins: Vec<String> = self
            .bins()
            .map(|b| {
                format!(
                    "{}-{} ({} lengths, {} sequences)",
                    b.lengths.start(),
                    b.lengths.end(),
                    b.count(),
                    b.count().saturating_mul(self.sequences_a_length())
                )
            })
            .collect();
        format!(
            "Evaluated on every length of the training bin and of each bin wholly inside the test \
             lengths, {} sequences a length at the end (at least {BIN_SEQUENCES} a bin), {} during \
             training: {} {}",
            self.sequences_a_length(),
            self.batch,
            bins.join(", "),
            self.task.unit()
        )
    }

    fn bins(&self) -> impl Iterator<Item = &PlanBin> {
        std::iter::once(&self.training).chain(&self.tested)
    }

    /// About the tokens the final evaluation scores: each length's sequences at its length.
    fn tokens(&self) -> usize {
        self.bins()
            .flat_map(|b| b.lengths.clone())
            .map(|n| self.task.bin_units(n).saturating_mul(self.sequences_a_length()))
            .fold(0, usize::saturating_add)
    }

    /// The refusal of a plan past [`MAX_EVAL_TOKENS`], naming the longest test length whose bins
    /// fit.
    fn too_costly(&self) -> String {
        let mut fitting = self.clone();
        while fitting.tokens() > MAX_EVAL_TOKENS && fitting.tested.len() > 1 {
            fitting.tested.pop();
        }
        let advice = if fitting.tokens() <= MAX_EVAL_TOKENS {
            let end = fitting.tested.last().map_or(0, |b| *b.lengths.end());
            format!("test lengths up to {end} fit")
        } else {
            "choose a shorter training length or fewer test lengths".into()
        };
        format!(
            "evaluating every length of the bins to {} {} would score about {} tokens a run, past the \
             page's {MAX_EVAL_TOKENS}: {advice}",
            self.tested.last().map_or(0, |b| *b.lengths.end()),
            self.task.unit(),
            self.tokens()
        )
    }
}

/// The task's whole length bins within its longest length, each with the lengths (in the task's
/// unit) whose sequences it holds, binned as the task's evaluation sets are ([`EvalBins`]): a
/// Chomsky task's bins double from the training length, the others' (sequence tokens) from 32.
/// An evaluation set is at least 2 tokens long, so a Chomsky task's first bin starts at 2.
fn bins(task: CompareTask, train_len: usize) -> Vec<PlanBin> {
    let binning = match task {
        CompareTask::Chomsky(_) => EvalBins::SetLength {
            train_max_len: train_len,
        },
        _ => EvalBins::RowLength,
    };
    let mut bins: Vec<(RangeInclusive<usize>, PlanBin)> = Vec::new();
    // One length past the longest, so that the bin it falls in, cut short, is then dropped.
    let past = task.max_length() + 1;
    for n in (1..=past).filter(|&n| task.bin_units(n) >= MIN_EVAL_LENGTH) {
        let units = task.bin_units(n);
        let bin = binning.bin_lengths(units, units);
        match bins.last_mut() {
            Some((last, b)) if *last == bin => b.lengths = *b.lengths.start()..=n,
            _ => bins.push((
                bin.clone(),
                PlanBin {
                    label: format!("{}-{}", bin.start(), bin.end()),
                    lengths: n..=n,
                },
            )),
        }
    }
    bins.pop();
    bins.into_iter().map(|(_, b)| b).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::chomsky::ChomskyTask;

    const EVEN_PAIRS: CompareTask = CompareTask::Chomsky(ChomskyTask::EvenPairs);

    #[test]
    fn the_default_evaluates_every_length_of_its_three_bins() {
        let plan = EvalPlan::new(EVEN_PAIRS, 10, 11..=40, 16).unwrap();
        assert_eq!(plan.training.label, "1-10");
        let tested: Vec<&str> = plan.tested.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(tested, ["11-20", "21-40"]);
        assert_eq!(
            plan.training.lengths,
            2..=10,
            "an evaluation set is at least 2 long"
        );
        assert_eq!(plan.eval_lengths(), (2..=40).collect::<Vec<_>>());
        // The smallest bin holds 9 lengths: 4 batches of 16 give it 576 sequences ≥ 512.
        assert_eq!(plan.final_batches, 4);
        assert_eq!(plan.sequences_a_length(), 64);
    }

    #[test]
    fn a_bin_the_test_lengths_cover_only_in_part_is_not_evaluated() {
        let plan = EvalPlan::new(EVEN_PAIRS, 10, 15..=50, 32).unwrap();
        let tested: Vec<&str> = plan.tested.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(tested, ["21-40"]);
        let lengths = plan.eval_lengths();
        assert_eq!(lengths.len(), 9 + 20);
        assert!(!lengths.contains(&15) && !lengths.contains(&41));
        let none = EvalPlan::new(EVEN_PAIRS, 10, 15..=30, 32)
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("no length bin past the training length lies wholly in"),
            "{none}"
        );
        assert!(none.contains("11-20, 21-40, 41-80"), "{none}");
        // Training to Moby Dick's longest window leaves no bin past it.
        let none = EvalPlan::new(CompareTask::MobyDick, 2000, 2001..=2048, 16)
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("no whole length bin lies past the training length 2000"),
            "{none}"
        );
    }

    #[test]
    fn copy_bins_count_tokens_and_hold_every_string_length_in_them() {
        // `abc|abc` with its two markers: n symbols are 2n + 2 tokens; bins 1-32, 33-64, ….
        let plan = EvalPlan::new(CompareTask::Copy, 10, 11..=40, 16).unwrap();
        assert_eq!(plan.training.label, "1-32");
        assert_eq!(plan.training.lengths, 1..=15);
        assert_eq!(plan.tested[0].label, "33-64");
        assert_eq!(plan.tested[0].lengths, 16..=31);
        assert_eq!(plan.tested.len(), 1, "65-128 holds 32-63, past 40");
        assert_eq!(plan.eval_lengths().first(), Some(&4));
        assert_eq!(plan.eval_lengths().last(), Some(&64));
    }

    #[test]
    fn an_evaluation_past_the_pages_budget_is_refused_with_the_lengths_that_fit() {
        assert!(EvalPlan::new(EVEN_PAIRS, 10, 11..=160, 16).is_ok());
        let why = EvalPlan::new(EVEN_PAIRS, 10, 11..=500, 16)
            .unwrap_err()
            .to_string();
        assert!(why.contains("bins to 320 input symbols"), "{why}");
        assert!(why.contains("test lengths up to 160 fit"), "{why}");
    }

    #[test]
    fn a_bin_cut_short_by_the_longest_length_is_not_offered() {
        // Chomsky inputs stop at 500: 321-640 is not whole, 161-320 is the last bin.
        let last = bins(EVEN_PAIRS, 10).pop().unwrap();
        assert_eq!((last.label.as_str(), last.lengths), ("161-320", 161..=320));
        // Moby Dick's windows stop at 2048, the end of its bin 1025-2048.
        let last = bins(CompareTask::MobyDick, 50).pop().unwrap();
        assert_eq!((last.label.as_str(), last.lengths), ("1025-2048", 1025..=2048));
    }
}
