//! Seq2seq decoding speed: sources per second at each beam size.

use std::time::Instant;

use crate::error::{Error, Result};

/// One decoder's speed at one beam size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeRow {
    pub beam: usize,
    /// Sources decoded per second, the median of the rounds.
    pub sentences_per_second: f64,
    /// Output tokens (EOS included) per second, in the same round.
    pub tokens_per_second: f64,
    /// The mean output length, EOS included.
    pub mean_output_len: f64,
}

/// Decodes `sources`, `batch` at a time, with every decoder at every beam size, `rounds` times
/// after one untimed round; within a round the decoders take turns, so that a change in the
/// machine's load falls on all of them alike. Returns `rows[decoder][beam]`.
pub fn decode(
    decoders: &[crate::inference::Seq2SeqDecoder],
    sources: &[Vec<i32>],
    beams: &[usize],
    batch: usize,
    rounds: usize,
) -> Result<Vec<Vec<DecodeRow>>> {
    if sources.is_empty() || batch == 0 || rounds == 0 {
        return Err(Error::Input(
            "bench decode needs sources, a batch and a round of at least one".into(),
        ));
    }
    // times[decoder][beam]: (seconds, output tokens) per timed round.
    let mut times = vec![vec![Vec::with_capacity(rounds); beams.len()]; decoders.len()];
    for round in 0..=rounds {
        for (d, decoder) in decoders.iter().enumerate() {
            for (b, &beam) in beams.iter().enumerate() {
                let options = crate::inference::DecodeOptions {
                    beam,
                    ..Default::default()
                };
                let start = Instant::now();
                let mut tokens = 0;
                for chunk in sources.chunks(batch) {
                    let found = pollster::block_on(decoder.decode(chunk, &options))?;
                    tokens += found.iter().map(|h| h.tokens.len() + 1).sum::<usize>();
                }
                if round > 0 {
                    times[d][b].push((start.elapsed().as_secs_f64(), tokens));
                }
            }
        }
    }
    Ok(times
        .into_iter()
        .map(|per_beam| {
            per_beam
                .into_iter()
                .zip(beams)
                .map(|(mut rounds, &beam)| {
                    rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let (seconds, tokens) = rounds[rounds.len() / 2];
                    DecodeRow {
                        beam,
                        sentences_per_second: sources.len() as f64 / seconds,
                        tokens_per_second: tokens as f64 / seconds,
                        mean_output_len: tokens as f64 / sources.len() as f64,
                    }
                })
                .collect()
        })
        .collect())
}
