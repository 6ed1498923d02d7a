//! The data layer on the shipped corpora: tokenizer, splits, sampling, task formats, padding, bins.

use posflow::data::{
    BOS, Batch, CMUDICT, CharTokenizer, EOS, Example, IGNORE_INDEX, LanguageModelData, LengthBins, MOBY_DICK,
    PAD, Pronunciations, SyntheticTask, parse_cmudict,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn moby_dick() -> (CharTokenizer, LanguageModelData) {
    let tokenizer = CharTokenizer::from_text(MOBY_DICK);
    let data = LanguageModelData::from_text(&tokenizer, MOBY_DICK, 0.05).unwrap();
    (tokenizer, data)
}

/// The rows of a [B, L] slice.
fn rows<T>(values: &[T], len: usize) -> Vec<&[T]> {
    values.chunks(len).collect()
}

#[test]
fn tokenizer_round_trips_moby_dick() {
    let (tokenizer, _) = moby_dick();
    assert_eq!(tokenizer.chars().len(), 83);
    assert_eq!(tokenizer.vocab_size(), 86);
    let ids = tokenizer.encode(MOBY_DICK).unwrap();
    assert_eq!(ids.len(), 1_190_317);
    assert_eq!(tokenizer.decode(&ids).unwrap(), MOBY_DICK);
    // '\n' is the smallest character, so the first id after the specials.
    assert_eq!(tokenizer.id('\n'), Some(3));
    assert_eq!(tokenizer.id('”'), Some(85));

    let restored = CharTokenizer::from_json(&tokenizer.to_json()).unwrap();
    assert_eq!(restored, tokenizer);
    assert_eq!(
        restored.encode("Call me Ishmael.").unwrap(),
        tokenizer.encode("Call me Ishmael.").unwrap()
    );
}

#[test]
fn unknown_character_is_an_error_naming_it_and_its_position() {
    let (tokenizer, _) = moby_dick();
    let err = tokenizer.encode("Call me Ishmael, café").unwrap_err().to_string();
    assert_eq!(
        err,
        "unknown character 'é' (U+00E9) at position 20; the vocabulary has 83 characters"
    );
    // Positions count characters, not bytes: '—' takes three bytes.
    let err = tokenizer.encode("—~").unwrap_err().to_string();
    assert!(
        err.starts_with("unknown character '~' (U+007E) at position 1;"),
        "{err}"
    );
}

#[test]
fn language_model_split_is_contiguous_with_the_last_five_percent_for_validation() {
    let (tokenizer, data) = moby_dick();
    // 5% of 1,190,317 is 59,515.85, rounded to 59,516.
    assert_eq!(data.valid().len(), 59_516);
    assert_eq!(data.train().len(), 1_190_317 - 59_516);
    let all = tokenizer.encode(MOBY_DICK).unwrap();
    assert_eq!(data.train(), &all[..data.train().len()]);
    assert_eq!(data.valid(), &all[data.train().len()..]);
    assert!(
        tokenizer
            .decode(data.valid())
            .unwrap()
            .ends_with("as it rolled five thousand years ago.\n")
    );
}

#[test]
fn training_windows_are_shifted_by_one_and_deterministic_from_the_seed() {
    let (_, data) = moby_dick();
    let sample = |seed| {
        data.sample_batch(&mut ChaCha8Rng::seed_from_u64(seed), 8, 64)
            .unwrap()
    };
    let batch = sample(7);
    assert_eq!(batch.shape(), [8, 64]);
    assert_eq!(batch.mask(), None);
    assert_eq!(batch, sample(7));
    assert_ne!(batch.tokens(), sample(8).tokens());

    let train = data.train();
    for (inputs, targets) in rows(batch.tokens(), 64)
        .into_iter()
        .zip(rows(batch.targets(), 64))
    {
        // Find the window in the training text and check that the targets are the next characters.
        let start = train
            .windows(64)
            .position(|w| w == inputs)
            .expect("window comes from the training part");
        assert_eq!(targets, &train[start + 1..start + 65]);
    }
}

#[test]
fn eval_windows_cover_the_validation_part_in_order_at_any_length() {
    let (_, data) = moby_dick();
    let valid = data.valid();
    for len in [64, 1000] {
        let batches = data.eval_batches(len, 16).unwrap();
        let windows = (valid.len() - 1) / len;
        assert_eq!(batches.iter().map(|b| b.shape()[0]).sum::<usize>(), windows);
        assert!(batches.iter().all(|b| b.shape()[1] == len && b.mask().is_none()));
        let tokens: Vec<i32> = batches.iter().flat_map(|b| b.tokens().to_vec()).collect();
        let targets: Vec<i32> = batches.iter().flat_map(|b| b.targets().to_vec()).collect();
        assert_eq!(tokens, &valid[..windows * len]);
        assert_eq!(targets, &valid[1..windows * len + 1]);
    }
    // 59,515 / 1000 → 59 windows: three batches of 16 and one of 11.
    let shapes: Vec<[usize; 2]> = data
        .eval_batches(1000, 16)
        .unwrap()
        .iter()
        .map(Batch::shape)
        .collect();
    assert_eq!(shapes, vec![[16, 1000], [16, 1000], [16, 1000], [11, 1000]]);
}

#[test]
fn cmudict_sequences_are_word_equals_phonemes_with_loss_after_the_separator() {
    let entries = parse_cmudict(CMUDICT).unwrap();
    assert_eq!(entries.len(), 30_969);
    let hello = entries.iter().find(|e| e.word == "hello").unwrap();
    assert_eq!(hello.example().text(), "hello=HH AH0 L OW1");

    let dict = Pronunciations::cmudict(0.05).unwrap();
    let tokenizer = dict.tokenizer();
    let (inputs, targets) = hello.example().encode(tokenizer).unwrap();
    // <bos> h e l l o = H H ␣ A H 0 ␣ L ␣ O W 1, then <eos> only as a target.
    assert_eq!(inputs.len(), 19);
    assert_eq!(tokenizer.decode(&inputs).unwrap(), "<bos>hello=HH AH0 L OW1");
    assert_eq!(&targets[..6], &[IGNORE_INDEX; 6]);
    assert_eq!(tokenizer.decode(&targets[6..]).unwrap(), "HH AH0 L OW1<eos>");

    // Lower-case words, upper-case phonemes, digits for stress, the apostrophe, space and '='.
    let chars: String = tokenizer.chars().iter().collect();
    assert_eq!(chars, " '012=ABCDEFGHIJKLMNOPRSTUVWYZabcdefghijklmnopqrstuvwxyz");
}

#[test]
fn cmudict_split_is_by_word_and_deterministic() {
    let dict = Pronunciations::cmudict(0.05).unwrap();
    assert_eq!(dict.train().len() + dict.valid().len(), 30_969);
    assert_eq!(dict.valid().len(), 1_572);
    let again = Pronunciations::cmudict(0.05).unwrap();
    assert_eq!(again.valid(), dict.valid());
    // A word's split depends on the word alone: a sub-dictionary puts its words where the whole did.
    let subset: Vec<_> = dict.train()[..500]
        .iter()
        .chain(&dict.valid()[..50])
        .cloned()
        .collect();
    let sub = Pronunciations::new(subset, 0.05).unwrap();
    assert_eq!(sub.train(), &dict.train()[..500]);
    assert_eq!(sub.valid(), &dict.valid()[..50]);
}

#[test]
fn cmudict_batches_are_padded_with_padding_masked_and_ignored() {
    let dict = Pronunciations::cmudict(0.05).unwrap();
    let batch = dict.sample_batch(&mut ChaCha8Rng::seed_from_u64(3), 32).unwrap();
    let [b, len] = batch.shape();
    assert_eq!(b, 32);
    assert_eq!(len, *batch.lengths().iter().max().unwrap());
    assert!(
        batch.lengths().iter().any(|&l| l < len),
        "random words differ in length"
    );
    let mask = batch.mask().unwrap();
    for row in 0..b {
        let real = batch.lengths()[row];
        let (tokens, targets) = (
            &batch.tokens()[row * len..][..len],
            &batch.targets()[row * len..][..len],
        );
        assert_eq!(tokens[0], BOS);
        assert_eq!(targets[real - 1], EOS);
        assert!(tokens[real..].iter().all(|&t| t == PAD));
        assert!(targets[real..].iter().all(|&t| t == IGNORE_INDEX));
        assert!(mask[row * len..][..real].iter().all(|&m| m == 1.0));
        assert!(mask[row * len + real..][..len - real].iter().all(|&m| m == 0.0));
    }
    let eval = dict.eval_batches(100).unwrap();
    assert_eq!(eval.len(), 16);
    assert_eq!(
        eval.iter().map(|b| b.shape()[0]).sum::<usize>(),
        dict.valid().len()
    );
}

#[test]
fn padding_to_a_fixed_length_keeps_the_rows() {
    let rows = vec![(vec![1, 7, 8], vec![-100, 8, 2]), (vec![1, 9], vec![-100, 2])];
    let batch = Batch::padded(&rows).unwrap();
    assert_eq!(batch.shape(), [2, 3]);
    assert_eq!(batch.tokens(), &[1, 7, 8, 1, 9, PAD]);
    assert_eq!(batch.targets(), &[-100, 8, 2, -100, 2, IGNORE_INDEX]);
    assert_eq!(batch.mask().unwrap(), &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
    assert_eq!(batch.lengths(), &[3, 2]);
    assert_eq!(batch.counted_targets(), 3);

    let wide = batch.clone().pad_to(5).unwrap();
    assert_eq!(wide.shape(), [2, 5]);
    assert_eq!(wide.tokens(), &[1, 7, 8, PAD, PAD, 1, 9, PAD, PAD, PAD]);
    assert_eq!(
        wide.mask().unwrap(),
        &[1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(wide.lengths(), batch.lengths());
    let err = batch.pad_to(2).unwrap_err().to_string();
    assert_eq!(err, "cannot pad a batch of length 3 to the shorter length 2");
}

#[test]
fn copy_and_reverse_answers_follow_the_separator() {
    let tokenizer = SyntheticTask::tokenizer();
    assert_eq!(tokenizer.vocab_size(), 3 + 26 + 1);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    for task in [SyntheticTask::Copy, SyntheticTask::Reverse] {
        for _ in 0..50 {
            let example = task.example(&mut rng, 3..=9).unwrap();
            let n = example.prompt.chars().count();
            assert!((3..=9).contains(&n));
            let expected: String = match task {
                SyntheticTask::Copy => example.prompt.clone(),
                SyntheticTask::Reverse => example.prompt.chars().rev().collect(),
            };
            assert_eq!(example.answer, expected);
            assert_eq!(example.text(), format!("{}|{}", example.prompt, expected));
            // Loss only on the answer and the end token.
            let (_, targets) = example.encode(&tokenizer).unwrap();
            assert_eq!(targets.iter().filter(|&&t| t != IGNORE_INDEX).count(), n + 1);
        }
    }
    let reversed = Example {
        prompt: "abc".into(),
        separator: '|',
        answer: "cba".into(),
    };
    let (inputs, targets) = reversed.encode(&tokenizer).unwrap();
    assert_eq!(tokenizer.decode(&inputs).unwrap(), "<bos>abc|cba");
    assert_eq!(&targets[..4], &[IGNORE_INDEX; 4]);
    assert_eq!(tokenizer.decode(&targets[4..]).unwrap(), "cba<eos>");
}

#[test]
fn synthetic_batches_extrapolate_in_length_and_repeat_from_a_seed() {
    let sample = |seed, lengths| {
        SyntheticTask::Reverse
            .sample_batch(&mut ChaCha8Rng::seed_from_u64(seed), 16, lengths)
            .unwrap()
    };
    let short = sample(5, 2..=8);
    assert_eq!(short, sample(5, 2..=8));
    // A row of a string of n symbols has 2n + 2 positions: <bos>, n, '|', n.
    assert!(short.lengths().iter().all(|&l| (6..=18).contains(&l)));
    let long = sample(5, 100..=120);
    assert!(long.lengths().iter().all(|&l| (202..=242).contains(&l)));
    assert!(long.lengths().iter().all(|&l| LengthBins::bin_of(l) == 3));
    let err = SyntheticTask::Copy
        .example(&mut ChaCha8Rng::seed_from_u64(0), 0..=4)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "string lengths 0..=4 must be a non-empty range of positive lengths"
    );
}

#[test]
fn lengths_fall_in_doubling_bins() {
    let cases = [
        (1, 0),
        (32, 0),
        (33, 1),
        (64, 1),
        (65, 2),
        (128, 2),
        (129, 3),
        (256, 3),
        (257, 4),
        (512, 4),
    ];
    for (len, bin) in cases {
        assert_eq!(LengthBins::bin_of(len), bin, "length {len}");
        assert!(LengthBins::bin_lengths(bin).contains(&len));
    }
    assert_eq!(LengthBins::bin_of(513), 5);
    assert_eq!(LengthBins::bin_lengths(5), 513..=1024);
}

#[test]
fn bins_accumulate_loss_and_accuracy_from_logits() {
    // Two rows of a batch padded to 3: row 0 (length 3) counts two targets, row 1 (length 2) one.
    let rows = vec![(vec![1, 3, 4], vec![-100, 4, 2]), (vec![1, 3], vec![-100, 2])];
    let batch = Batch::padded(&rows).unwrap();
    let vocab = 5;
    let mut logits = vec![0.0f32; 2 * 3 * vocab];
    // Row 0, position 1 (target 4): predicts 4 with softmax 3/4 over two live scores.
    logits[5..10].copy_from_slice(&[
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        0.0,
        f32::NEG_INFINITY,
        3f32.ln(),
    ]);
    // Row 0, position 2 (target 2): uniform over 5, argmax 0 (first of ties) is wrong.
    // Row 1, position 1 (target 2): scores 1 for 2 and 0 for 3, so predicts 2.
    logits[20..25].copy_from_slice(&[f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0, 0.0, f32::NEG_INFINITY]);
    let mut bins = LengthBins::new();
    bins.record_logits(&batch, &logits, vocab, None).unwrap();
    bins.record(40, 6.0, 3, 3);

    let (lengths, short) = bins.bins().next().unwrap();
    assert_eq!(lengths, 1..=32);
    assert_eq!((short.sequences, short.tokens, short.correct), (2, 3, 2));
    let expected = (4.0f64 / 3.0).ln() + 5f64.ln() + (1.0 + (-1f64).exp()).ln();
    assert!(
        (short.loss_sum - expected).abs() < 1e-6,
        "{} vs {expected}",
        short.loss_sum
    );
    let total = bins.total();
    assert_eq!((total.sequences, total.tokens, total.correct), (3, 6, 5));
    assert!((total.mean_loss() - (expected + 6.0) / 6.0).abs() < 1e-6);
    assert!((total.accuracy() - 5.0 / 6.0).abs() < 1e-12);

    let table = bins.to_string();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert_eq!(lines[0], "    length sequences    tokens     loss  accuracy");
    assert!(lines[1].starts_with("      <=32         2         3"), "{table}");
    assert!(
        lines[2].starts_with("     33-64         1         3   2.0000   100.00%"),
        "{table}"
    );
    assert!(lines[3].starts_with("       all         3         6"), "{table}");

    // Anchored at a training length of 8, every row recorded at its set's length 12: 9–16.
    let mut anchored = LengthBins::anchored(8);
    anchored.record_logits(&batch, &logits, vocab, Some(12)).unwrap();
    let (lengths, both) = anchored.bins().next().unwrap();
    assert_eq!(
        (lengths, both.sequences, both.tokens, both.correct),
        (9..=16, 2, 3, 2)
    );

    let err = bins
        .record_logits(&batch, &logits[1..], vocab, None)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "logits of 29 values do not fit a batch [2, 3] with a vocabulary of 5"
    );
}
