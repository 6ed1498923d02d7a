use super::*;

fn with(f: impl FnOnce(&mut CompareSettings)) -> CompareSettings {
    let mut s = CompareSettings::default();
    f(&mut s);
    s
}

fn refusal(s: &CompareSettings) -> String {
    s.study_toml().expect_err("refused").to_string()
}

/// Randomized FLOATER comes with its caution (its flow solved to t = 20.47 at positions of
/// 0..2048), once however it is reached; standard FLOATER, FLOATER at the horizon's Δ (its
/// flow within t ≤ 2.55 at every randomized position) and the randomized sinusoidal table
/// with none; refused settings with none.
#[test]
fn randomized_floater_comes_with_its_caution() {
    let floater = |randomized| Choice {
        encoding: Encoding::named("floater").unwrap(),
        randomized,
    };
    let sinusoidal_rand = Choice {
        encoding: Encoding::named("sinusoidal").unwrap(),
        randomized: true,
    };
    let cautions = with(|s| s.choices = vec![floater(false), floater(true), sinusoidal_rand]).cautions();
    assert_eq!(cautions.len(), 1, "{cautions:?}");
    assert!(
        cautions[0].contains("solve the flow to t = 20.47"),
        "{}",
        cautions[0]
    );
    assert!(
        with(|s| s.choices = vec![floater(false), sinusoidal_rand])
            .cautions()
            .is_empty()
    );
    assert!(with(|s| s.choices = vec![floater(true)]).cautions().len() == 1);
    let horizon = |randomized| Choice {
        encoding: Encoding::named("floater_horizon").unwrap(),
        randomized,
    };
    assert!(
        with(|s| s.choices = vec![horizon(false), horizon(true)])
            .cautions()
            .is_empty()
    );
    assert!(
        with(|s| {
            s.choices = vec![floater(true)];
            s.seeds = 0;
        })
        .cautions()
        .is_empty()
    );
}

#[test]
fn the_default_comparison_is_a_study_with_claims_both_ways_past_the_training_length() {
    let study = CompareSettings::default().study().unwrap();
    assert_eq!(study.name, "compare_even_pairs");
    assert_eq!(study.seeds, [0, 1, 2]);
    let names: Vec<&str> = study.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["sinusoidal", "sinusoidal_rand"]);
    assert_eq!(
        study.variants[1].run.model.random_positions,
        Some(RANDOM_POSITIONS)
    );
    assert_eq!(study.variants[0].run.model.random_positions, None);
    // Every length of the bins anchored at 10: 1-10, 11-20, 21-40; claims on the two past it,
    // both ways, read at the final evaluation's 64 sequences a length.
    let train = &study.variants[0].run.train;
    assert_eq!(train.eval_lengths, (2..=40).collect::<Vec<_>>());
    assert_eq!(train.eval_batches_at(true) * train.batch, 64);
    assert_eq!(study.variants[0].bins, ["1-10", "11-20", "21-40"]);
    assert_eq!(study.variants[0].items_in("21-40"), Some(20 * 64));
    let claims: Vec<String> = study.claims.iter().map(|c| c.name().to_string()).collect();
    assert_eq!(
        claims,
        [
            "sinusoidal_beats_sinusoidal_rand_11_20",
            "sinusoidal_rand_beats_sinusoidal_11_20",
            "sinusoidal_beats_sinusoidal_rand_21_40",
            "sinusoidal_rand_beats_sinusoidal_21_40",
            "sinusoidal_learns",
            "sinusoidal_rand_learns",
        ]
    );
    // The sanity checks: each variant above 90% accuracy in the training lengths' bin.
    let toml = CompareSettings::default().study_toml().unwrap();
    assert!(
        toml.contains("bin = \"1-10\"\nvariant = \"sinusoidal_rand\"\nbound = 0.9\nbeats = true"),
        "{toml}"
    );
    assert_eq!(study.claims[4].kind(), crate::study::ClaimKind::Sanity);
}

#[test]
fn every_task_and_encoding_makes_a_valid_study() {
    for task in CompareTask::all() {
        let choices: Vec<Choice> = Encoding::all()
            .flat_map(|encoding| {
                [false, true]
                    .into_iter()
                    .filter(move |&r| !r || encoding.reads_positions())
                    .map(move |randomized| Choice { encoding, randomized })
            })
            .collect();
        let s = with(|s| {
            s.task = task;
            s.choices = choices.clone();
            s.train_len = 16;
            s.test_from = 17;
            s.test_to = 100;
        });
        let study = s.study().unwrap_or_else(|e| panic!("{}: {e}", task.name()));
        assert_eq!(study.variants.len(), choices.len(), "{}", task.name());
        // The bins the runs report are the plan's, each holding every length planned.
        let plan = s.evaluation().unwrap();
        let planned: Vec<&str> = std::iter::once(&plan.training)
            .chain(&plan.tested)
            .map(|b| b.label.as_str())
            .collect();
        assert_eq!(study.variants[0].bins, planned, "{}", task.name());
        assert!(!study.claims.is_empty());
    }
}

#[test]
fn bad_settings_are_refused_with_the_reason() {
    assert!(refusal(&with(|s| s.choices.clear())).contains("at least one encoding"));
    assert!(refusal(&with(|s| s.seeds = 0)).contains("seeds must be 1 to 5, got 0"));
    assert!(refusal(&with(|s| s.seeds = 6)).contains("got 6"));
    assert!(refusal(&with(|s| s.test_from = 10)).contains("longer than the training length"));
    assert!(refusal(&with(|s| s.test_to = 5)).contains("must not be before the start"));
    assert!(refusal(&with(|s| s.test_to = 501)).contains("up to 500"));
    assert!(refusal(&with(|s| s.train_len = 0)).contains("at least 1"));
    let twice = with(|s| s.choices.push(s.choices[0]));
    assert!(refusal(&twice).contains("sinusoidal is chosen twice"));
    let none = with(|s| s.choices[1].encoding = Encoding::named("none").unwrap());
    assert!(refusal(&none).contains("nothing to randomize"));
    // Moby Dick's bins double from 32 (1-32, 33-64, ...): 51-60 after 50 holds no bin whole.
    let straddles = with(|s| {
        s.task = CompareTask::MobyDick;
        s.choices.truncate(1);
        s.train_len = 50;
        s.test_from = 51;
        s.test_to = 60;
    });
    assert!(refusal(&straddles).contains("no length bin past the training length lies wholly"));
}

#[test]
fn a_query_holds_the_settings_and_bad_ones_are_refused() {
    let s = with(|s| {
        s.task = CompareTask::Chomsky(ChomskyTask::ReverseString);
        s.choices.push(Choice {
            encoding: Encoding::named("floater").unwrap(),
            randomized: true,
        });
        s.seeds = 5;
        s.test_to = 60;
        s.preset = Preset::Paper;
    });
    let query = s.to_query();
    assert_eq!(
        query,
        "task=reverse_string&enc=sinusoidal,sinusoidal_rand,floater_rand&seeds=5&train=10&test=11-60&preset=paper"
    );
    assert_eq!(CompareSettings::from_query(&format!("?{query}")).unwrap(), s);
    assert_eq!(
        CompareSettings::from_query("").unwrap(),
        CompareSettings::default()
    );
    let err = |q: &str| CompareSettings::from_query(q).unwrap_err().to_string();
    assert!(err("task=sorting").contains("unknown task `sorting`"));
    assert!(err("enc=sinusoidal,wavelets").contains("unknown encoding `wavelets`"));
    assert!(err("seeds=three").contains("seeds must be a whole number"));
    assert!(err("test=20").contains("FROM-TO"));
    assert!(err("colour=red").contains("unknown setting `colour`"));
    assert!(err("preset=huge").contains("unknown preset"));
    // A query may hold settings that the check then refuses.
    let zero = CompareSettings::from_query("seeds=0").unwrap();
    assert!(zero.check().unwrap_err().to_string().contains("seeds must be"));
    // Numbers past the machine's integers are refused as numbers; the largest that parse are
    // refused by the check, before any arithmetic on them (the training length's +1, the
    // test range's end).
    assert!(err("seeds=18446744073709551616").contains("seeds must be a whole number"));
    for (query, says) in [
        ("seeds=18446744073709551615", "seeds must be 1 to"),
        (
            "train=18446744073709551615&test=11-40",
            "must be longer than the training length",
        ),
        ("test=11-18446744073709551615", "is longer"),
    ] {
        let settings = CompareSettings::from_query(query).unwrap();
        let why = settings.check().unwrap_err().to_string();
        assert!(why.contains(says), "{query}: {why}");
    }
}
