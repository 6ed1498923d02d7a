use super::Study;
use crate::study::TestKind;

/// A tiny copy-task study; `rest` adds variants and claims.
fn study(rest: &str) -> String {
    format!(
        r#"
[study]
name = "tiny"
seeds = [0, 1]

[base]
data = {{ task = "copy", min_len = 1, max_len = 4 }}
[base.model]
d_model = 16
heads = 2
layers = 1
ffn = 32
max_len = 64
kind = {{ type = "causal_lm" }}
posenc = {{ type = "relative", buckets = 8, max_distance = 16 }}
[base.train]
steps = 4
batch = 4
lr = 3e-3
eval_lengths = [10, 34]

{rest}
"#
    )
}

const TWO: &str = r#"
[[variant]]
name = "relative"

[[variant]]
name = "learned"
label = "learned table"
set = { "model.posenc" = { type = "learned" }, "train.steps" = 6 }
"#;

fn refused(rest: &str) -> String {
    Study::from_toml(&study(rest), "tiny.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn variants_are_built_from_the_base_and_their_overrides() {
    let s = Study::from_toml(
        &study(&format!(
            r#"{TWO}
[[claim]]
name = "c"
text = "relative beats learned at 33-64"
kind = "order"
metric = "accuracy"
bin = "33-64"
order = ["relative", "learned"]
"#
        )),
        "tiny.toml",
    )
    .unwrap();
    assert_eq!(s.seeds, vec![0, 1]);
    let [relative, learned] = &s.variants[..] else {
        panic!()
    };
    assert_eq!(relative.run, s.base);
    assert_eq!(learned.run.model.posenc, crate::testing::preset("learned"));
    assert_eq!((learned.run.train.steps, learned.run.model.d_model), (6, 16));
    assert_eq!(learned.label(), "learned table");
    assert_eq!(relative.bins, vec!["1-32", "33-64"]);
    let run = learned.run_for(1, std::path::Path::new("out/runs/learned/seed1"));
    assert_eq!(run.train.seed, 1);
    assert_eq!(
        run.train.checkpoint.unwrap(),
        std::path::Path::new("out/runs/learned/seed1/model.safetensors")
    );
}

#[test]
fn warm_starts_run_after_their_source() {
    let s = Study::from_toml(
        &study(
            r#"
[[variant]]
name = "second"
warm_start = "first"
[[variant]]
name = "first"
"#,
        ),
        "tiny.toml",
    )
    .unwrap();
    let names: Vec<&str> = s.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
}

#[test]
fn bad_variants_are_refused_naming_the_variant_and_the_key() {
    for (rest, says) in [
        ("[[variant]]\nname = \"a\"\nsett = {}", "unknown field `sett`"),
        (
            "[[variant]]\nname = \"a\"\nset = { \"train.stepz\" = 3 }",
            "variant `a`: set \"train.stepz\": unknown field `stepz`",
        ),
        (
            "[[variant]]\nname = \"a\"\nset = { \"model.posenc\" = { type = \"wavy\" } }",
            "variant `a`: set \"model.posenc\"",
        ),
        (
            "[[variant]]\nname = \"a\"\nset = { \"data.nope.x\" = 1 }",
            "variant `a`: set \"data.nope.x\": \"data.nope\" is not in [base]",
        ),
        (
            "[[variant]]\nname = \"a\"\n[[variant]]\nname = \"a\"",
            "two variants are named `a`",
        ),
        ("[[variant]]\nname = \"a b\"", "` ` is not allowed"),
        (
            "[[variant]]\nname = \"a\"\nwarm_start = \"b\"",
            "warm_start \"b\" is not a variant",
        ),
        (
            "[[variant]]\nname = \"a\"\nwarm_start = \"b\"\n[[variant]]\nname = \"b\"\nwarm_start = \"a\"",
            "form a cycle",
        ),
        ("", "no [[variant]]"),
    ] {
        let err = refused(rest);
        assert!(err.starts_with("tiny.toml: "), "{err}");
        assert!(err.contains(says), "{rest}: {err}");
    }
}

#[test]
fn outputs_and_seeds_in_the_base_are_refused() {
    let text = study(TWO).replace("steps = 4", "steps = 4\ncheckpoint = \"x.safetensors\"");
    let err = Study::from_toml(&text, "tiny.toml").unwrap_err().to_string();
    assert!(err.contains("[base.train] checkpoint: the study sets"), "{err}");
    let text = study(TWO).replace("seeds = [0, 1]", "seeds = [1, 1]");
    let err = Study::from_toml(&text, "tiny.toml").unwrap_err().to_string();
    assert!(err.contains("seeds: 1 is listed twice"), "{err}");
}

#[test]
fn bad_claims_are_refused_naming_what_is_wrong() {
    let claim = |body: &str| format!("{TWO}\n[[claim]]\nname = \"c\"\ntext = \"t\"\n{body}");
    for (body, says) in [
        (
            "kind = \"order\"\nmetric = \"accuracy\"\nbin = \"33-64\"\norder = [\"relative\", \"floater\"]",
            "claim `c`: names variant `floater`, which the study does not have (it has relative, learned)",
        ),
        (
            "kind = \"order\"\nmetric = \"perplexity\"\nbin = \"33-64\"\norder = [\"relative\", \"learned\"]",
            "unknown variant `perplexity`, expected one of `loss`, `accuracy`, `exact_match`, \
             `token_accuracy`, `error_rate`, `bleu`",
        ),
        (
            "kind = \"order\"\nmetric = \"loss\"\nbin = \"65-128\"\norder = [\"relative\", \"learned\"]",
            "claim `c`: bin \"65-128\" is not among the length bins variant `relative` evaluates (1-32, 33-64)",
        ),
        (
            "kind = \"reaches\"\nmetric = \"loss\"\nbin = \"1-32\"\nvariant = \"relative\"\nbaseline = \"nope\"",
            "claim `c`: names variant `nope`",
        ),
        (
            "kind = \"order\"\nmetric = \"loss\"\nbin = \"1-32\"\norder = [\"relative\"]",
            "order needs at least two variants",
        ),
        ("kind = \"better\"\nmetric = \"loss\"", "unknown variant `better`"),
        (
            "kind = \"order\"\nmetric = \"error_rate\"\nbin = \"1-32\"\norder = [\"relative\", \"learned\"]",
            "claim `c`: metric \"error_rate\" scores decoded sequences, and variant `relative` is not a \
             seq2seq model on a pair task; use loss or accuracy",
        ),
        (
            "kind = \"order\"\nmetric = \"loss\"\nbin = \"1-32\"\norder = [\"relative\", \"learned\"]\nwhy = 1",
            "unknown field `why`",
        ),
    ] {
        let err = refused(&claim(body));
        assert!(err.contains(says), "{body}: {err}");
    }
}

#[test]
fn every_committed_study_loads_with_its_claims_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("studies");
    let mut loaded = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let study = Study::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            loaded.push(study);
        }
    }
    // A pair task's bins are source-length bins anchored at its training length, and it decodes.
    let s2l = loaded.iter().find(|s| s.name == "cmudict_s2l").unwrap();
    for v in &s2l.variants {
        assert_eq!(v.bins, ["1-8", "9-16", "17-32"], "{}", v.name);
        assert!(v.decodes, "{}", v.name);
    }
    let copy = loaded.iter().find(|s| s.name == "copy_s2l").unwrap();
    assert!(copy.variants.iter().all(|v| !v.decodes));
}

/// A variant's `data` replaces the base's whole [data] (a classifier fine-tuned from a pretraining
/// variant); macro-F1 is a classifier's metric, refused for the others.
#[test]
fn a_variant_can_replace_the_data_and_claim_macro_f1() {
    let classifier = r#"
[[variant]]
name = "relative"

[[variant]]
name = "names"
warm_start = "relative"
data = { task = "names", train_max_len = 7, vocabulary = "own" }
set = { "model.kind" = { type = "encoder", n_classes = 2 }, "train.eval_lengths" = [] }
"#;
    let claim = |variant: &str| {
        format!(
            r#"{classifier}
[[claim]]
name = "f1"
text = "the classifier's macro-F1"
kind = "order"
metric = "macro_f1"
bin = "1-7"
order = ["{variant}", "names"]
"#
        )
    };
    let err = refused(&claim("relative"));
    assert!(
        err.contains("metric \"macro_f1\" scores a classifier, and variant `relative` is not an encoder"),
        "{err}"
    );
    let s = Study::from_toml(&study(classifier), "tiny.toml").unwrap();
    let names = s.variant("names").unwrap();
    assert!(names.classifies && !names.decodes);
    assert_eq!(names.bins, ["1-7", "8-14", "15-28"]);
    assert!(names.run.data.classes().is_some());
    assert!(
        names.set.contains_key("data"),
        "the report shows the replaced [data]"
    );
    assert!(!s.variant("relative").unwrap().classifies);
    // The base keeps its own data.
    assert!(s.base.data.classes().is_none());
}

#[test]
fn seeds_and_level_default_to_five_and_95_percent_and_fresh_seeds_follow_the_largest() {
    let s = Study::from_toml(&study(TWO), "tiny.toml").unwrap();
    assert_eq!(s.seeds, [0, 1]);
    assert_eq!(s.level, 0.95);
    assert_eq!(s.fresh_seeds().unwrap(), [2, 3]);
    let unlisted = study(TWO).replace("seeds = [0, 1]", "level = 0.99");
    let s = Study::from_toml(&unlisted, "tiny.toml").unwrap();
    assert_eq!(s.seeds, [0, 1, 2, 3, 4]);
    assert_eq!(s.level, 0.99);
    assert_eq!(s.fresh_seeds().unwrap(), [5, 6, 7, 8, 9]);
    // Never a listed seed, whatever the list's order and gaps.
    let gaps = study(TWO).replace("seeds = [0, 1]", "seeds = [7, 2, 40]");
    let s = Study::from_toml(&gaps, "tiny.toml").unwrap();
    assert_eq!(s.fresh_seeds().unwrap(), [41, 42, 43]);
    // At the top of the range: the last integers that fit, or a refusal naming the seeds, never
    // a wrap round to 0 (a seed the file lists).
    let top = study(TWO).replace("seeds = [0, 1]", "seeds = [0, 18446744073709551613]");
    let s = Study::from_toml(&top, "tiny.toml").unwrap();
    assert_eq!(s.fresh_seeds().unwrap(), [u64::MAX - 1, u64::MAX]);
    for largest in ["18446744073709551614", "18446744073709551615"] {
        let over = study(TWO).replace("seeds = [0, 1]", &format!("seeds = [0, {largest}]"));
        let s = Study::from_toml(&over, "tiny.toml").unwrap();
        let err = s.fresh_seeds().unwrap_err().to_string();
        assert!(
            err.contains(&format!("the largest listed seed, {largest}")) && err.contains("2 fresh seeds"),
            "{err}"
        );
    }
    for bad in ["-0.1", "0.5", "nan"] {
        let text = study(TWO).replace(
            "seeds = [0, 1]",
            &format!("seeds = [0, 1]\nchance_margin = {bad}"),
        );
        let err = Study::from_toml(&text, "tiny.toml").unwrap_err().to_string();
        assert!(
            err.contains("[study] chance_margin must be at least 0 and below 0.5"),
            "{bad}: {err}"
        );
    }
    let permutation = study(TWO).replace("seeds = [0, 1]", "seeds = [0, 1]\ntest = \"permutation\"");
    assert_eq!(
        Study::from_toml(&permutation, "tiny.toml").unwrap().test,
        TestKind::Permutation
    );
    for bad in ["0.5", "1.0", "95", "-0.9"] {
        let text = study(TWO).replace("seeds = [0, 1]", &format!("seeds = [0, 1]\nlevel = {bad}"));
        let err = Study::from_toml(&text, "tiny.toml").unwrap_err().to_string();
        assert!(
            err.contains("[study] level must be above 0.5 and below 1"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn a_study_trains_with_posflow_unless_it_asks_for_torchrun() {
    use super::StudyTrainer;
    let with = |header: &str| study(TWO).replace("seeds = [0, 1]", &format!("seeds = [0, 1]\n{header}"));
    let trainer = |header: &str| Study::from_toml(&with(header), "tiny.toml").map(|s| s.trainer);
    assert_eq!(trainer("").unwrap(), StudyTrainer::Posflow);
    assert_eq!(
        trainer("trainer = \"torchrun\"").unwrap(),
        StudyTrainer::Torchrun { processes: 1 }
    );
    assert_eq!(
        trainer("trainer = \"torchrun\"\nprocesses = 4").unwrap(),
        StudyTrainer::Torchrun { processes: 4 }
    );
    let refused = |header: &str| trainer(header).unwrap_err().to_string();
    assert!(refused("processes = 2").contains("processes is a setting of trainer = \"torchrun\""));
    assert!(refused("trainer = \"torchrun\"\nprocesses = 0").contains("processes must be at least 1"));
    assert!(refused("trainer = \"slurm\"").contains("unknown variant `slurm`"));
    let warm = study(
        r#"
[[variant]]
name = "first"
[[variant]]
name = "second"
warm_start = "first"
"#,
    )
    .replace("seeds = [0, 1]", "seeds = [0, 1]\ntrainer = \"torchrun\"");
    let err = Study::from_toml(&warm, "tiny.toml").unwrap_err().to_string();
    assert!(err.contains("variant `second` warm-starts"), "{err}");
}
