//! A study file read and checked in full: every variant's run config built and validated, the
//! warm-start order found, every claim checked, before a single step runs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::claims::{ClaimSpec, Metric};
use super::overrides::{self, STUDY_OWNED};
use super::rule::{Rule, TestKind};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::train::{DataTask, RunConfig, Task};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StudyFile {
    study: Header,
    base: toml::Table,
    #[serde(default, rename = "variant")]
    variants: Vec<VariantFile>,
    #[serde(default, rename = "claim")]
    claims: Vec<ClaimSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "default_seeds")]
    seeds: Vec<u64>,
    /// The confidence level of the claims' one-sided tests.
    #[serde(default = "default_level")]
    level: f64,
    /// `posflow` (the default) or `torchrun`.
    #[serde(default)]
    trainer: TrainerName,
    /// Processes per run under `trainer = "torchrun"`.
    processes: Option<usize>,
    /// `t` (the default) or `permutation`.
    #[serde(default)]
    test: TestKind,
    /// How near chance (on the metric's 0–1 scale) a mean counts as at chance.
    #[serde(default = "default_chance_margin")]
    chance_margin: f64,
}

fn default_chance_margin() -> f64 {
    super::rule::DEFAULT_CHANCE_MARGIN
}

/// A study file's `trainer`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum TrainerName {
    #[default]
    Posflow,
    Torchrun,
}

/// Who trains a study's runs. The report and the verdicts are posflow's either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StudyTrainer {
    /// posflow, in this process (`--jobs` runs at a time).
    Posflow,
    /// PyTorch through `torchrun` (`python/posflow_torch`): each run a job of `processes`
    /// processes under DistributedDataParallel, on the batches posflow draws, evaluated by
    /// posflow at every evaluation step. The same file runs on a laptop or a cluster.
    Torchrun { processes: usize },
}

impl StudyTrainer {
    /// The file's `trainer` and `processes`, checked together.
    fn from_header(trainer: TrainerName, processes: Option<usize>) -> std::result::Result<Self, String> {
        match (trainer, processes) {
            (TrainerName::Posflow, None) => Ok(StudyTrainer::Posflow),
            (TrainerName::Posflow, Some(_)) => {
                Err("[study] processes is a setting of trainer = \"torchrun\"; remove it".into())
            }
            (TrainerName::Torchrun, Some(0)) => Err("[study] processes must be at least 1".into()),
            (TrainerName::Torchrun, processes) => Ok(StudyTrainer::Torchrun {
                processes: processes.unwrap_or(1),
            }),
        }
    }
}

/// Five seeds unless the file lists its own: fewer leave a t-test little power.
fn default_seeds() -> Vec<u64> {
    (0..5).collect()
}

fn default_level() -> f64 {
    super::significance::DEFAULT_LEVEL
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantFile {
    name: String,
    label: Option<String>,
    /// The variant's whole `[data]`, in place of the base's: another task (e.g. a classification
    /// set, fine-tuned from a pretraining variant), whose keys `set` could not remove.
    data: Option<toml::Table>,
    #[serde(default)]
    set: toml::Table,
    warm_start: Option<String>,
}

/// One variant, ready to run with any seed.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: String,
    pub label: Option<String>,
    /// The overrides as written, for the report (a replaced `[data]` under the key `data`).
    pub set: toml::Table,
    pub warm_start: Option<String>,
    /// The base with the overrides; seed 0 and no outputs until [`Variant::run_for`].
    pub run: RunConfig,
    /// The length bins its evaluations will report, shortest first.
    pub bins: Vec<String>,
    /// Whether its evaluations decode (a pair task's seq2seq model), so that decoding metrics exist.
    pub decodes: bool,
    /// Whether it is a classifier, so that macro-F1 exists.
    pub classifies: bool,
    /// The sequences (texts, pairs) one evaluation holds in each of `bins`, in its order.
    pub bin_items: Vec<usize>,
    /// Its model's trainable parameters, counted from the graph that declares them.
    pub parameters: usize,
}

impl Variant {
    /// The sequences one evaluation holds in `bin`.
    pub fn items_in(&self, bin: &str) -> Option<usize> {
        let i = self.bins.iter().position(|b| b == bin)?;
        self.bin_items.get(i).copied()
    }

    /// Its label, or its name where it has none.
    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.name)
    }

    /// The run for `seed`, writing nothing (a live study's).
    pub fn run_seeded(&self, seed: u64) -> RunConfig {
        let mut run = self.run.clone();
        run.train.seed = seed;
        run
    }

    /// The run for `seed`, writing its checkpoint and metrics into `dir`.
    pub fn run_for(&self, seed: u64, dir: &Path) -> RunConfig {
        let mut run = self.run_seeded(seed);
        run.train.checkpoint = Some(dir.join("model.safetensors"));
        run.train.metrics = Some(dir.join("metrics.jsonl"));
        run
    }
}

/// A whole study, checked.
#[derive(Clone, Debug)]
pub struct Study {
    pub name: String,
    pub description: String,
    pub seeds: Vec<u64>,
    /// The confidence level of every claim's test, in (0.5, 1).
    pub level: f64,
    pub test: TestKind,
    /// How near chance a compared variant's mean may be and count as at chance.
    pub chance_margin: f64,
    pub trainer: StudyTrainer,
    pub base: RunConfig,
    /// In an order that runs every warm start's source before it.
    pub variants: Vec<Variant>,
    pub claims: Vec<ClaimSpec>,
}

impl Study {
    /// Reads a study file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Input(format!("study {}: cannot be read ({e})", path.display())))?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and checks a study; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let file: StudyFile = toml::from_str(text).map_err(|e| Error::Input(format!("{origin}: {e}")))?;
        let err = |msg: String| Error::Input(format!("{origin}: {msg}"));
        let header = file.study;
        check_identifier(&header.name).map_err(|why| err(format!("[study] name: {why}")))?;
        let trainer = StudyTrainer::from_header(header.trainer, header.processes).map_err(err)?;
        if header.seeds.is_empty() {
            return Err(err(
                "[study] seeds is empty; give at least one, e.g. seeds = [0, 1, 2]".into(),
            ));
        }
        if let Some(seed) = duplicate(&header.seeds) {
            return Err(err(format!("[study] seeds: {seed} is listed twice")));
        }
        if !(header.chance_margin >= 0.0 && header.chance_margin < 0.5) {
            return Err(err(format!(
                "[study] chance_margin must be at least 0 and below 0.5 (points of the metric's 0-1 \
                 scale, e.g. 0.1), got {}",
                header.chance_margin
            )));
        }
        if !(header.level > 0.5 && header.level < 1.0) {
            return Err(err(format!(
                "[study] level must be above 0.5 and below 1 (a confidence level, e.g. 0.95), got {}",
                header.level
            )));
        }
        for key in STUDY_OWNED {
            let (section, leaf) = key.split_once('.').expect("a dotted key");
            if file.base.get(section).and_then(|s| s.get(leaf)).is_some() {
                return Err(err(format!(
                    "[base.{section}] {leaf}: the study sets each run's {leaf} itself (outputs under \
                     OUT/runs/<variant>/seed<k>/, seeds from [study] seeds); remove it"
                )));
            }
        }
        let base = RunConfig::from_table(file.base.clone(), &format!("{origin}: [base]"))?;
        if file.variants.is_empty() {
            return Err(err("no [[variant]]; a study needs at least one".into()));
        }
        let mut variants = Vec::with_capacity(file.variants.len());
        for v in file.variants {
            check_identifier(&v.name)
                .map_err(|why| err(format!("[[variant]] name \"{}\": {why}", v.name)))?;
            if variants.iter().any(|o: &Variant| o.name == v.name) {
                return Err(err(format!("two variants are named `{}`", v.name)));
            }
            let mut base = file.base.clone();
            // For the report: what the variant changes, its [data] first.
            let mut set = toml::Table::new();
            if let Some(data) = v.data {
                base.insert("data".into(), toml::Value::Table(data.clone()));
                set.insert("data".into(), toml::Value::Table(data));
            }
            let run = variant_run(&base, &v.set, &v.name).map_err(|e| err(e.to_string()))?;
            set.extend(v.set);
            let task = DataTask::load(&run).map_err(|e| err(format!("variant `{}`: {e}", v.name)))?;
            let EvalBins {
                bins,
                items: bin_items,
                decodes,
            } = eval_bins(&run, &task).map_err(|e| err(format!("variant `{}`: {e}", v.name)))?;
            let parameters =
                parameter_count(&run, &task).map_err(|e| err(format!("variant `{}`: {e}", v.name)))?;
            let classifies = run.data.classes().is_some();
            variants.push(Variant {
                name: v.name,
                label: v.label,
                set,
                warm_start: v.warm_start,
                run,
                bins,
                decodes,
                classifies,
                bin_items,
                parameters,
            });
        }
        let variants = dependency_order(variants).map_err(err)?;
        if let (StudyTrainer::Torchrun { .. }, Some(v)) =
            (trainer, variants.iter().find(|v| v.warm_start.is_some()))
        {
            return Err(err(format!(
                "variant `{}` warm-starts, which trainer = \"torchrun\" cannot (posflow_torch starts from \
                 posflow's initial parameters); train it with posflow",
                v.name
            )));
        }
        for claim in &file.claims {
            check_claim(claim, &variants).map_err(|why| err(format!("claim `{}`: {why}", claim.name())))?;
        }
        Ok(Self {
            name: header.name,
            description: header.description,
            seeds: header.seeds,
            level: header.level,
            test: header.test,
            chance_margin: header.chance_margin,
            trainer,
            base,
            variants,
            claims: file.claims,
        })
    }

    /// The file's seeds, then a replication's `fresh` ones: every seed a study's runs take.
    pub fn seeds_with(&self, fresh: Option<&[u64]>) -> Vec<u64> {
        self.seeds
            .iter()
            .chain(fresh.into_iter().flatten())
            .copied()
            .collect()
    }

    /// The rule its claims are judged by.
    pub fn rule(&self) -> Rule {
        Rule {
            level: self.level,
            test: self.test,
            chance_margin: self.chance_margin,
            pair_shared_streams: true,
        }
    }

    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// The seeds a replication runs: as many as the file lists, none of them listed, by one rule
    /// that a later run repeats: the integers after the largest listed seed. Refused, naming the
    /// seeds, where those integers run out before 2⁶⁴ (a seed near the top of the range), rather
    /// than wrapping round to seeds the file already lists.
    pub fn fresh_seeds(&self) -> Result<Vec<u64>> {
        let largest = self.seeds.iter().copied().max().unwrap_or(0);
        let count = self.seeds.len() as u64;
        match largest
            .checked_add(1)
            .and_then(|after| Some((after, after.checked_add(count - 1)?)))
        {
            Some((first, last)) => Ok((first..=last).collect()),
            None => Err(Error::Input(format!(
                "study {}: [study] seeds: a replication runs {count} fresh seeds after the largest \
                 listed seed, {largest}, and there are not that many integers below 2^64 past it; \
                 list smaller seeds to replicate the study",
                self.name
            ))),
        }
    }
}

/// The base with `set` applied, as a validated run. When the whole fails, the first override that
/// fails on its own is named; otherwise the variant and every key it sets.
fn variant_run(base: &toml::Table, set: &toml::Table, name: &str) -> Result<RunConfig> {
    let table = overrides::apply(base, set, name)?;
    let keys: Vec<&str> = set.keys().map(String::as_str).collect();
    RunConfig::from_table(table, &format!("variant `{name}`")).map_err(|whole| {
        for (key, value) in set {
            let one: toml::Table = [(key.clone(), value.clone())].into_iter().collect();
            let alone = overrides::apply(base, &one, name).and_then(|t| RunConfig::from_table(t, ""));
            if let Err(e) = alone {
                let why = e.to_string();
                let why = why.strip_prefix(": ").unwrap_or(&why);
                return Error::Input(format!("variant `{name}`: set \"{key}\": {why}"));
            }
        }
        Error::Input(format!("{whole} (the variant sets {})", keys.join(", ")))
    })
}

/// The bins a run's evaluation reports, how many sequences each holds, and whether it decodes.
struct EvalBins {
    bins: Vec<String>,
    items: Vec<usize>,
    decodes: bool,
}

/// The length bins of the rows a run's final evaluation sets hold, or a pair task's source-length
/// bins (decoding at most the final evaluation's batches of each), or a classification set's text-length
/// bins; with each bin's sequences, and whether it decodes (pair tasks do).
fn eval_bins(run: &RunConfig, task: &DataTask) -> Result<EvalBins> {
    let t = &run.train;
    let label = |start: usize, end: usize| format!("{start}-{end}");
    if let Some(classes) = task.class_data() {
        let (bins, items) = classes
            .bins()
            .iter()
            .map(|bin| {
                (
                    label(*bin.lengths.start(), *bin.lengths.end()),
                    bin.examples.len(),
                )
            })
            .unzip();
        return Ok(EvalBins {
            bins,
            items,
            decodes: false,
        });
    }
    if let Some(pairs) = task.pair_data() {
        let (bins, items) = pairs
            .eval()
            .iter()
            .map(|bin| {
                let evaluated = bin
                    .pairs()
                    .len()
                    .min(t.eval_batches_at(true).saturating_mul(t.batch));
                (label(*bin.lengths().start(), *bin.lengths().end()), evaluated)
            })
            .unzip();
        return Ok(EvalBins {
            bins,
            items,
            decodes: true,
        });
    }
    let binning = task.eval_bins();
    let mut bins: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for set in task.eval_sets(&t.eval_lengths, t.batch, t.eval_batches_at(true)) {
        for batch in set.batches.iter().flatten() {
            for &len in batch.lengths() {
                let lengths = binning.bin_lengths(len, set.length);
                *bins.entry((*lengths.start(), *lengths.end())).or_default() += 1;
            }
        }
    }
    let (bins, items) = bins
        .into_iter()
        .map(|((start, end), n)| (label(start, end), n))
        .unzip();
    Ok(EvalBins {
        bins,
        items,
        decodes: false,
    })
}

/// The model's parameters, with the vocabulary its data gives.
fn parameter_count(run: &RunConfig, task: &DataTask) -> Result<usize> {
    let mut run = run.clone();
    run.settle_vocab(task.tokenizer().vocab_size())?;
    let graph = Model::new(run.model)?.declare_params()?;
    Ok(graph
        .params()
        .map(|(_, meta)| meta.shape.iter().product::<usize>())
        .sum())
}

/// Orders variants so that each comes after the one it warm-starts from (otherwise keeping the
/// file's order); an unknown name or a cycle is an error.
fn dependency_order(mut pending: Vec<Variant>) -> std::result::Result<Vec<Variant>, String> {
    for v in &pending {
        if let Some(source) = &v.warm_start
            && !pending.iter().any(|o| &o.name == source)
        {
            return Err(format!(
                "variant `{}`: warm_start \"{source}\" is not a variant of this study",
                v.name
            ));
        }
    }
    let mut ordered: Vec<Variant> = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let ready = pending.iter().position(|v| {
            v.warm_start
                .as_ref()
                .is_none_or(|source| ordered.iter().any(|o| &o.name == source))
        });
        match ready {
            Some(i) => ordered.push(pending.remove(i)),
            None => {
                let names: Vec<&str> = pending.iter().map(|v| v.name.as_str()).collect();
                return Err(format!(
                    "the warm starts of variants {} form a cycle",
                    names.join(", ")
                ));
            }
        }
    }
    Ok(ordered)
}

fn check_claim(claim: &ClaimSpec, variants: &[Variant]) -> std::result::Result<(), String> {
    if let ClaimSpec::Order { order, .. } = claim
        && order.len() < 2
    {
        return Err("order needs at least two variants".into());
    }
    if let ClaimSpec::Gain { pairs, .. } = claim
        && pairs.is_empty()
    {
        return Err("gain needs at least one pair of variants".into());
    }
    if let ClaimSpec::Bound { bound, .. } = claim
        && !bound.is_finite()
    {
        return Err(format!("bound must be a finite number, got {bound}"));
    }
    if let Some(dup) = duplicate(&claim.variants()) {
        return Err(format!("names variant `{dup}` twice"));
    }
    for name in claim.variants() {
        let Some(variant) = variants.iter().find(|v| v.name == name) else {
            let known: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
            return Err(format!(
                "names variant `{name}`, which the study does not have (it has {})",
                known.join(", ")
            ));
        };
        if claim.metric() == Metric::MacroF1 && !variant.classifies {
            return Err(format!(
                "metric \"macro_f1\" scores a classifier, and variant `{name}` is not an encoder on a \
                 classification set; use loss or accuracy"
            ));
        }
        if claim.metric().is_decoded() && !variant.decodes {
            return Err(format!(
                "metric \"{}\" scores decoded sequences, and variant `{name}` is not a seq2seq model \
                 on a pair task; use loss or accuracy",
                claim.metric().name()
            ));
        }
        if !variant.bins.iter().any(|b| b == claim.bin()) {
            return Err(format!(
                "bin \"{}\" is not among the length bins variant `{name}` evaluates ({}); bins are \
                 labelled as in the metrics log",
                claim.bin(),
                variant.bins.join(", ")
            ));
        }
    }
    Ok(())
}

/// Names become directory names: letters, digits, `_` and `-` only.
fn check_identifier(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("is empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!("`{c}` is not allowed; use letters, digits, _ and -"));
    }
    Ok(())
}

fn duplicate<T: PartialEq + Copy>(items: &[T]) -> Option<T> {
    items
        .iter()
        .enumerate()
        .find(|(i, a)| items[..*i].contains(a))
        .map(|(_, a)| *a)
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
