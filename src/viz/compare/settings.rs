//! What a visitor asks the Compare tab: a task, the encodings (each standard or randomized), how
//! many seeds, the training length, the test lengths and a size preset. Checked here with a reason
//! for every refusal, written as the study file that reproduces the comparison natively
//! (`posflow study FILE`: the page trains exactly the runs that file describes), and kept in the
//! page's URL as a query string.
//!
//! Lengths are in the task's own unit: input symbols for the Chomsky tasks, string symbols for
//! copy and reverse, characters for Moby Dick. The claims are written before anything runs: for
//! every pair of variants and every length bin past the training length, "the first beats the
//! second" and "the second beats the first", each a one-sided test at 95% (so at most one holds).

use std::fmt::Write as _;

use crate::arithmetic::Arithmetic;
use crate::data::chomsky::ChomskyTask;
use crate::error::{Error, Result};
use crate::model::posenc;
use crate::study::Study;

use super::evaluation::EvalPlan;
use super::task::CompareTask;

/// Randomized positions are drawn from 0..L, L as Ruoss et al.
pub const RANDOM_POSITIONS: usize = 2048;

/// The most seeds a comparison trains.
pub const MAX_SEEDS: usize = 5;

/// An encoding the tab offers: one of the registry's presets (`posenc::presets`), so that a new
/// encoding's preset is offered here without a line in this file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoding(&'static posenc::Preset);

impl Encoding {
    /// Every preset, in the registry's order.
    pub fn all() -> impl Iterator<Item = Encoding> {
        posenc::presets().map(Encoding)
    }

    /// The preset named `name` (`sinusoidal`, `floater_horizon`).
    pub fn named(name: &str) -> Option<Encoding> {
        posenc::preset(name).map(Encoding)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }

    pub fn label(self) -> &'static str {
        self.0.label
    }

    /// Whether randomizing its positions means anything.
    pub fn reads_positions(self) -> bool {
        self.0.reads_positions
    }

    /// Its `posenc` (ALiBi's encoder offset only where the model is an encoder: the Chomsky
    /// tasks' token classifier).
    fn posenc(self, encoder: bool) -> &'static str {
        self.0.posenc_for(encoder)
    }
}

/// One variant: an encoding, standard or at randomized positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    pub encoding: Encoding,
    pub randomized: bool,
}

impl Choice {
    /// The variant's name: the encoding's, `_rand` when randomized.
    pub fn name(self) -> String {
        let suffix = if self.randomized { "_rand" } else { "" };
        format!("{}{suffix}", self.encoding.name())
    }

    pub fn label(self) -> String {
        let suffix = if self.randomized { ", randomized" } else { "" };
        format!("{}{suffix}", self.encoding.label())
    }

    fn from_name(name: &str) -> Result<Choice> {
        let (base, randomized) = match name.strip_suffix("_rand") {
            Some(base) => (base, true),
            None => (name, false),
        };
        let encoding = Encoding::named(base).ok_or_else(|| {
            let names: Vec<&str> = Encoding::all().map(|e| e.name()).collect();
            Error::Input(format!(
                "unknown encoding `{name}`; the encodings are {} (each with `_rand` for randomized \
                 positions)",
                names.join(", ")
            ))
        })?;
        Ok(Choice { encoding, randomized })
    }
}

/// How big the models are and how long they train.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// A smoke test (1 layer, d 16, 24 steps): checks the page end to end in seconds; its
    /// verdicts mean little.
    Tiny,
    /// A small model for a laptop's CPU: two encodings × three seeds in about two minutes.
    Fast,
    /// The Chomsky studies' model (5 layers, d 64) and steps: for a GPU.
    Paper,
}

struct Sizes {
    d_model: usize,
    heads: usize,
    layers: usize,
    ffn: usize,
    steps: usize,
    batch: usize,
}

impl Preset {
    pub const ALL: [Preset; 3] = [Preset::Tiny, Preset::Fast, Preset::Paper];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Fast => "fast",
            Preset::Paper => "paper",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny (1 layer, d 16, 24 steps: a smoke test)",
            Preset::Fast => "fast (2 layers, d 32, 4,000 steps: a laptop's CPU)",
            Preset::Paper => "paper (5 layers, d 64, 1,500 steps: a GPU)",
        }
    }

    fn from_name(name: &str) -> Result<Preset> {
        Self::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            Error::Input(format!(
                "unknown preset `{name}`; the presets are tiny, fast and paper"
            ))
        })
    }

    fn sizes(self) -> Sizes {
        match self {
            Preset::Tiny => Sizes {
                d_model: 16,
                heads: 2,
                layers: 1,
                ffn: 32,
                steps: 24,
                batch: 8,
            },
            // 4,000 steps: on the default comparison (even pairs) the sinusoidal table's models
            // reach 93–98% on the training lengths at 3,000 steps and 100% at 4,000 (3 seeds each;
            // docs/guide/page.md).
            Preset::Fast => Sizes {
                d_model: 32,
                heads: 4,
                layers: 2,
                ffn: 64,
                steps: 4000,
                batch: 16,
            },
            Preset::Paper => Sizes {
                d_model: 64,
                heads: 8,
                layers: 5,
                ffn: 256,
                steps: 1500,
                batch: 32,
            },
        }
    }
}

/// The accuracy on the training lengths above which a model learned them (the studies' bound).
const LEARNED: f64 = 0.9;

/// Everything the tab asks, as the visitor set it.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareSettings {
    pub task: CompareTask,
    pub choices: Vec<Choice>,
    pub seeds: usize,
    /// Training lengths are 1..=train_len (Moby Dick: windows of train_len characters).
    pub train_len: usize,
    /// The test lengths run from `test_from` to `test_to`.
    pub test_from: usize,
    pub test_to: usize,
    pub preset: Preset,
}

impl Default for CompareSettings {
    /// Ruoss et al.'s question on even pairs: does randomizing the sinusoidal table's positions
    /// help past the training length?
    fn default() -> Self {
        Self {
            task: CompareTask::Chomsky(ChomskyTask::EvenPairs),
            choices: [false, true]
                .map(|randomized| Choice {
                    encoding: Encoding::named("sinusoidal").expect("the registry's sinusoidal preset"),
                    randomized,
                })
                .to_vec(),
            seeds: 3,
            train_len: 10,
            test_from: 11,
            test_to: 40,
            preset: Preset::Fast,
        }
    }
}

impl CompareSettings {
    /// Why these settings cannot run, if they cannot.
    pub fn check(&self) -> Result<()> {
        self.checked_plan().map(drop)
    }

    /// The evaluation of settings that can run, or why they cannot.
    fn checked_plan(&self) -> Result<EvalPlan> {
        let refuse = |why: String| Err(Error::Input(why));
        if self.choices.is_empty() {
            return refuse("choose at least one encoding to compare".into());
        }
        for (i, c) in self.choices.iter().enumerate() {
            if self.choices[..i].contains(c) {
                return refuse(format!("{} is chosen twice", c.label()));
            }
            if c.randomized && !c.encoding.reads_positions() {
                return refuse(
                    "no position encoding reads no positions: there is nothing to randomize".into(),
                );
            }
        }
        if self.seeds == 0 || self.seeds > MAX_SEEDS {
            return refuse(format!("seeds must be 1 to {MAX_SEEDS}, got {}", self.seeds));
        }
        if self.train_len == 0 {
            return refuse("the training length must be at least 1".into());
        }
        if self.test_from <= self.train_len {
            return refuse(format!(
                "the test lengths must be longer than the training length: they start at {}, the \
                 training length is {}",
                self.test_from, self.train_len
            ));
        }
        if self.test_to < self.test_from {
            return refuse(format!(
                "the test lengths run from {} to {}: the end must not be before the start",
                self.test_from, self.test_to
            ));
        }
        let max = self.task.max_length();
        if self.test_to > max {
            return refuse(format!(
                "test lengths up to {max} {} fit {} positions for {}; {} is longer",
                self.task.unit(),
                RANDOM_POSITIONS,
                self.task.name(),
                self.test_to
            ));
        }
        self.evaluation()
    }

    /// What the comparison evaluates: every length of the training bin and of each bin wholly
    /// inside the test lengths, with enough sequences for a claim on each bin.
    pub fn evaluation(&self) -> Result<EvalPlan> {
        EvalPlan::new(
            self.task,
            self.train_len,
            self.test_from..=self.test_to,
            self.preset.sizes().batch,
        )
    }

    fn data_toml(&self) -> String {
        match self.task {
            CompareTask::Chomsky(_) => format!(
                "{{ task = \"chomsky\", name = \"{}\", train_max_len = {} }}",
                self.task.name(),
                self.train_len
            ),
            CompareTask::Copy | CompareTask::Reverse => format!(
                "{{ task = \"{}\", min_len = 1, max_len = {} }}",
                self.task.name(),
                self.train_len
            ),
            CompareTask::MobyDick => format!("{{ task = \"moby_dick\", seq_len = {} }}", self.train_len),
        }
    }

    fn kind_toml(&self) -> String {
        match self.task {
            CompareTask::Chomsky(task) => {
                format!(
                    "{{ type = \"token_classifier\", n_classes = {} }}",
                    task.classes()
                )
            }
            _ => "{ type = \"causal_lm\" }".into(),
        }
    }

    /// The study's one-line description: the task, the lengths and the encodings compared.
    fn description(&self) -> String {
        let labels: Vec<String> = self.choices.iter().map(|c| c.label()).collect();
        format!(
            "{} trained on lengths up to {}, tested on {} to {} {}: {}",
            self.task.name(),
            self.train_len,
            self.test_from,
            self.test_to,
            self.task.unit(),
            labels.join(" vs ")
        )
    }

    /// The study without claims: the variants as they will run in `arithmetic`.
    fn variants_toml(&self, arithmetic: Arithmetic, plan: &EvalPlan) -> String {
        let s = self.preset.sizes();
        let seeds: Vec<String> = (0..self.seeds).map(|k| k.to_string()).collect();
        let (how, arithmetic_line) = match arithmetic {
            Arithmetic::Portable => (
                "in the portable arithmetic, to the\n# bit",
                "arithmetic = \"portable\"\n",
            ),
            Arithmetic::Native => (
                "on a GPU: natively they agree to\n# rounding, not to the bit (each GPU sums in its own order)",
                "",
            ),
        };
        let mut text = format!(
            "# Written by posflow's Compare tab; `posflow study FILE` trains the same runs with the\n\
             # same seeds natively. The tab trained them {how}.\n\n\
             [study]\n\
             name = \"compare_{task}\"\n\
             description = \"{description}\"\n\
             seeds = [{seeds}]\n\n\
             [base]\n\
             data = {data}\n\n\
             [base.model]\n\
             d_model = {d_model}\n\
             heads = {heads}\n\
             layers = {layers}\n\
             ffn = {ffn}\n\
             max_len = {max_len}\n\
             norm = \"post\"\n\
             embedding_norm = false\n\
             attention_biases = false\n\
             activation = \"relu\"\n\
             dropout = 0.1\n\
             embed_scale = \"sqrt_d\"\n\
             kind = {kind}\n\
             posenc = {{ type = \"sinusoidal\" }}\n\n\
             [base.train]\n\
             steps = {steps}\n\
             batch = {batch}\n\
             lr = 1e-3\n\
             decay = \"constant\"\n\
             weight_decay = 0.0\n\
             clip_grad_norm = 1.0\n\
             eval_every = {eval_every}\n\
             eval_lengths = {eval_lengths:?}\n\
             eval_batches = 1\n\
             final_eval_batches = {final_batches}\n\
             {arithmetic_line}",
            task = self.task.name(),
            description = self.description(),
            seeds = seeds.join(", "),
            data = self.data_toml(),
            d_model = s.d_model,
            heads = s.heads,
            layers = s.layers,
            ffn = s.ffn,
            max_len = RANDOM_POSITIONS,
            kind = self.kind_toml(),
            steps = s.steps,
            batch = s.batch,
            eval_every = s.steps / 4,
            eval_lengths = plan.eval_lengths(),
            final_batches = plan.final_batches,
        );
        for c in &self.choices {
            let random = if c.randomized {
                format!(", \"model.random_positions\" = {RANDOM_POSITIONS}")
            } else {
                String::new()
            };
            let _ = write!(
                text,
                "\n[[variant]]\nname = \"{}\"\nlabel = \"{}\"\nset = {{ \"model.posenc\" = {}{random} }}\n",
                c.name(),
                c.label(),
                c.encoding.posenc(self.task.encoder())
            );
        }
        text
    }

    /// The study file that reproduces the comparison on the page's CPU (in the portable
    /// arithmetic), claims included, once the settings pass [`CompareSettings::check`]
    /// ([`CompareSettings::study`] parses it as `posflow study` does).
    pub fn study_toml(&self) -> Result<String> {
        self.study_toml_in(Arithmetic::Portable)
    }

    /// [`CompareSettings::study_toml`] for runs in `arithmetic` (the native one: a GPU's).
    pub fn study_toml_in(&self, arithmetic: Arithmetic) -> Result<String> {
        let plan = self.checked_plan()?;
        let mut text = self.variants_toml(arithmetic, &plan);
        let metric = self.task.metric();
        for (i, a) in self.choices.iter().enumerate() {
            for b in &self.choices[i + 1..] {
                for bin in plan.tested.iter().map(|b| &b.label) {
                    for (first, second) in [(a, b), (b, a)] {
                        let _ = write!(
                            text,
                            "\n[[claim]]\nname = \"{f}_beats_{s}_{tag}\"\ntext = \"{fl} > {sl} in {metric} at {bin}\"\n\
                             kind = \"order\"\nmetric = \"{metric}\"\nbin = \"{bin}\"\norder = [\"{f}\", \"{s}\"]\n",
                            f = first.name(),
                            s = second.name(),
                            fl = first.label(),
                            sl = second.label(),
                            tag = bin.replace('-', "_"),
                        );
                    }
                }
            }
        }
        // The results rule's sanity check, apart from the comparisons: did each model learn the
        // training lengths at all? (A verdict past them between models that did not says little.)
        if metric == "accuracy" {
            let bin = &plan.training.label;
            for c in &self.choices {
                let _ = write!(
                    text,
                    "\n[[claim]]\nname = \"{f}_learns\"\ntext = \"{fl} learns the training lengths: accuracy above \
                     {percent}% at {bin}\"\nkind = \"bound\"\nmetric = \"accuracy\"\nbin = \"{bin}\"\n\
                     variant = \"{f}\"\nbound = {LEARNED}\nbeats = true\n",
                    f = c.name(),
                    fl = c.label(),
                    percent = LEARNED * 100.0,
                );
            }
        }
        Ok(text)
    }

    /// What the chosen encodings' own cautions say of these settings (FLOATER's flow solved far
    /// past its authors' range of t at randomized positions), each once; none for settings that
    /// are refused. Reads the variants alone (one parse, no claims): the tab asks every frame.
    pub fn cautions(&self) -> Vec<String> {
        let Ok(plan) = self.checked_plan() else {
            return Vec::new();
        };
        let Ok(study) = Study::from_toml(&self.variants_toml(Arithmetic::Portable, &plan), "the comparison")
        else {
            return Vec::new();
        };
        let mut cautions: Vec<String> = Vec::new();
        for v in &study.variants {
            let model = &v.run.model;
            if let Some(caution) = model.posenc.encoding().caution(&model.facts())
                && !cautions.contains(&caution)
            {
                cautions.push(caution);
            }
        }
        cautions
    }

    /// The study the page trains: the file of [`CompareSettings::study_toml`], parsed.
    pub fn study(&self) -> Result<Study> {
        Study::from_toml(&self.study_toml()?, "the comparison")
    }

    /// The settings as a URL query: `task=…&enc=a,b_rand&seeds=3&train=10&test=11-40&preset=fast`.
    pub fn to_query(&self) -> String {
        let encodings: Vec<String> = self.choices.iter().map(|c| c.name()).collect();
        format!(
            "task={}&enc={}&seeds={}&train={}&test={}-{}&preset={}",
            self.task.name(),
            encodings.join(","),
            self.seeds,
            self.train_len,
            self.test_from,
            self.test_to,
            self.preset.name()
        )
    }

    /// Settings from a URL query (a leading `?` allowed); keys it lacks keep the defaults, an
    /// unknown key or a bad value is refused with the reason. The result is not yet checked
    /// ([`CompareSettings::check`]): a link may hold settings the page then refuses.
    pub fn from_query(query: &str) -> Result<CompareSettings> {
        let mut s = CompareSettings::default();
        let number = |key: &str, value: &str| {
            value
                .parse::<usize>()
                .map_err(|_| Error::Input(format!("the link's {key} must be a whole number, got `{value}`")))
        };
        for pair in query.trim_start_matches('?').split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| Error::Input(format!("the link's setting `{pair}` has no value")))?;
            let value = &percent_decoded(value);
            match key {
                "task" => s.task = CompareTask::from_name(value)?,
                "enc" => {
                    s.choices = value
                        .split(',')
                        .filter(|n| !n.is_empty())
                        .map(Choice::from_name)
                        .collect::<Result<_>>()?
                }
                "seeds" => s.seeds = number(key, value)?,
                "train" => s.train_len = number(key, value)?,
                "test" => {
                    let (from, to) = value.split_once('-').ok_or_else(|| {
                        Error::Input(format!("the link's test lengths must be FROM-TO, got `{value}`"))
                    })?;
                    s.test_from = number(key, from)?;
                    s.test_to = number(key, to)?;
                }
                "preset" => s.preset = Preset::from_name(value)?,
                _ => {
                    return Err(Error::Input(format!(
                        "the link has an unknown setting `{key}`; the settings are task, enc, seeds, \
                         train, test and preset"
                    )));
                }
            }
        }
        Ok(s)
    }
}

/// A URL's `%HH` escapes decoded (a browser writes `enc=a,b` as `enc=a%2Cb`); a `%` not followed
/// by two hex digits stays as it is.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
