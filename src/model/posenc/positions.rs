//! Where a graph's tokens sit: at positions 0..T, or at Ruoss et al.'s randomized positions
//! ("Randomized Positional Encodings Boost Length Generalization of Transformers", ACL 2023), a
//! sorted sample of T distinct positions of 0..L drawn once per batch (and again for every
//! evaluation batch), so that a model trained on short sequences has seen every position up to L.
//!
//! This file is the one place the sampling happens ([`sample_positions`]) and the one place an
//! encoding reads sampled positions: the rows of a table at them ([`Positions::rows`]) and a
//! relative encoding's bucket of each pair's offset `pos[j] − pos[i]`
//! ([`Positions::offset_buckets`]). Every encoding builds its terms through these two, so none
//! has a copy of the scheme: with positions 0..T they are a table's first rows and the bucket of
//! each offset j − i, exactly as before randomized positions existed.

use std::collections::BTreeSet;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::graph::{Graph, TensorId};
use crate::tensor::TensorMeta;

/// The graph input that holds the sampled positions, i32 `[T]`.
pub const POSITIONS_INPUT: &str = "positions";

/// The largest range of randomized positions: every encoding's table of L rows, ALiBi's
/// `[2L − 1, H]` table and FLOATER's flow through L positions stay small at it.
pub const MAX_RANDOM_POSITIONS: usize = 1 << 16;

/// The positions of a graph's `len` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Positions {
    pub len: usize,
    /// Randomized positions; `None`: the tokens sit at 0..len.
    pub sampled: Option<Sampled>,
}

/// Randomized positions: the input that holds them and the range they are drawn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampled {
    /// i32 `[len]`: sorted, distinct, in `0..range`, written by [`sample_positions`]'s caller
    /// before each run.
    pub input: TensorId,
    /// L: positions are drawn from 0..L.
    pub range: usize,
}

/// An i32 input of a relative encoding ([`Positions::offset_buckets`]) and how it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetInput {
    pub input: TensorId,
    pub values: OffsetValues,
}

/// What an [`OffsetInput`] holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OffsetValues {
    /// Values fixed for the graph, written before each run.
    Fixed(Vec<i32>),
    /// Values per pair of randomized positions, written each time they are drawn.
    PerDraw(PairOffsets),
}

/// A relative encoding's pair input under randomized positions: i32 `[T, T]` whose entry (i, j)
/// is `by_offset[pos[j] − pos[i] + L − 1]`, written each time positions are drawn
/// ([`PairOffsets::values`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairOffsets {
    pub input: TensorId,
    /// The value of each offset −(L − 1) ..= L − 1, in order.
    pub by_offset: Vec<i32>,
}

impl PairOffsets {
    /// The `[T, T]` values at `positions` (from [`sample_positions`]).
    pub fn values(&self, positions: &[i32]) -> Vec<i32> {
        let reach = (self.by_offset.len() / 2) as i32;
        positions
            .iter()
            .flat_map(|&i| {
                positions
                    .iter()
                    .map(move |&j| self.by_offset[(j - i + reach) as usize])
            })
            .collect()
    }
}

impl Positions {
    /// Tokens at 0..len.
    pub fn contiguous(len: usize) -> Self {
        Self { len, sampled: None }
    }

    /// Tokens at `len` positions sampled from 0..range, read from a new input of `g`
    /// ([`POSITIONS_INPUT`]); an error when they cannot be distinct.
    pub fn sampled(g: &mut Graph, len: usize, range: usize) -> Result<Self> {
        if len > range {
            return Err(Error::Input(format!(
                "a sequence of {len} tokens cannot sit at distinct positions below random_positions = \
                 {range}; raise random_positions to at least {len}"
            )));
        }
        let input = g.input(POSITIONS_INPUT, TensorMeta::i32(&[len]));
        Ok(Self {
            len,
            sampled: Some(Sampled { input, range }),
        })
    }

    /// How many positions a table must cover: the sequence's, or the whole range.
    pub fn extent(&self) -> usize {
        self.sampled.map_or(self.len, |s| s.range)
    }

    /// The rows of `table` (`[rows, C]`, rows ≥ [`Positions::extent`]) at these positions,
    /// `[len, C]`: its first `len` rows, or those at the sampled positions.
    pub fn rows(&self, g: &mut Graph, table: TensorId) -> Result<TensorId> {
        match self.sampled {
            Some(sampled) => g.embedding(table, sampled.input),
            None if g.meta(table).shape[0] == self.len => Ok(table),
            None => g.slice(table, 0, 0, self.len),
        }
    }

    /// A relative encoding's bucket of each key-minus-query offset, `bucket(offset)`, as an i32
    /// input named `name`: one entry per offset `[2·len − 1]` (entry `j − i + len − 1`) at
    /// positions 0..len, or one per pair `[len, len]` at sampled positions (`pair`: always one
    /// per pair, for a term built densely).
    pub fn offset_buckets(
        &self,
        g: &mut Graph,
        name: &str,
        bucket: impl Fn(i64) -> i32,
        pair: bool,
    ) -> OffsetInput {
        let reach = self.extent() as i64 - 1;
        let by_offset: Vec<i32> = (-reach..=reach).map(bucket).collect();
        let shape = if pair || self.sampled.is_some() {
            vec![self.len, self.len]
        } else {
            vec![by_offset.len()]
        };
        let input = g.input(name, TensorMeta::i32(&shape));
        let values = match self.sampled {
            Some(_) => OffsetValues::PerDraw(PairOffsets { input, by_offset }),
            None if pair => {
                OffsetValues::Fixed(PairOffsets { input, by_offset }.values(&contiguous_positions(self.len)))
            }
            None => OffsetValues::Fixed(by_offset),
        };
        OffsetInput { input, values }
    }
}

/// Whether a table of `rows` rows holds every position randomized positions may draw; the error
/// names the table and the settings.
pub fn check_rows(
    rows: usize,
    random_positions: Option<usize>,
    table: &str,
) -> std::result::Result<(), String> {
    match random_positions {
        Some(range) if range > rows => Err(format!(
            "randomized positions are drawn from 0..random_positions = {range}, but the {table} has \
             max_len = {rows} rows; set max_len to at least {range}"
        )),
        _ => Ok(()),
    }
}

/// 0..len as positions.
fn contiguous_positions(len: usize) -> Vec<i32> {
    (0..len).map(|p| p as i32).collect()
}

/// Ruoss et al.'s randomized positions: `len` distinct positions of 0..range drawn uniformly
/// (every subset equally likely: Floyd's algorithm) from `seed`, sorted ascending. The same seed
/// gives the same positions on every machine. `len ≤ range` ([`Positions::sampled`] checks).
pub fn sample_positions(seed: u64, len: usize, range: usize) -> Vec<i32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut chosen = BTreeSet::new();
    for top in range - len..range {
        let pick = rng.random_range(0..=top);
        if !chosen.insert(pick) {
            chosen.insert(top);
        }
    }
    chosen.into_iter().map(|p| p as i32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_sorted_distinct_and_within_the_range() {
        for (len, range) in [(1, 1), (5, 5), (7, 2048), (40, 64), (600, 2048)] {
            for seed in 0..20 {
                let positions = sample_positions(seed, len, range);
                assert_eq!(positions.len(), len, "{len} of {range}");
                assert!(
                    positions.windows(2).all(|w| w[0] < w[1]),
                    "sorted and distinct: {positions:?}"
                );
                assert!(positions.iter().all(|&p| (0..range as i32).contains(&p)));
            }
        }
        // Every position, when the sample is the whole range.
        assert_eq!(sample_positions(3, 5, 5), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_seed_gives_one_sample_and_seeds_differ() {
        assert_eq!(sample_positions(11, 30, 2048), sample_positions(11, 30, 2048));
        assert_ne!(sample_positions(11, 30, 2048), sample_positions(12, 30, 2048));
    }

    /// Every position is equally likely to be drawn (Floyd's algorithm draws every subset with
    /// the same probability): over 20,000 draws of 3 of 8, each position's share is 3/8 within
    /// 2%.
    #[test]
    fn every_position_is_equally_likely() {
        let (len, range, draws) = (3, 8, 20_000);
        let mut counts = [0usize; 8];
        for seed in 0..draws {
            for p in sample_positions(seed, len, range) {
                counts[p as usize] += 1;
            }
        }
        for (p, &count) in counts.iter().enumerate() {
            let share = count as f64 / draws as f64;
            assert!((share - 3.0 / 8.0).abs() < 0.02, "position {p}: {share}");
        }
    }

    #[test]
    fn pair_offsets_read_each_pairs_offset() {
        // Offsets −3..=3 of a range of 4, valued by the offset itself times 10.
        let pairs = PairOffsets {
            input: TensorId(0),
            by_offset: (-3..=3).map(|o| o * 10).collect(),
        };
        assert_eq!(pairs.values(&[0, 2, 3]), vec![0, 20, 30, -20, 0, 10, -30, -10, 0]);
    }

    #[test]
    fn more_tokens_than_positions_is_an_error_naming_the_setting() {
        let mut g = Graph::new();
        let err = Positions::sampled(&mut g, 9, 8).unwrap_err().to_string();
        assert!(
            err.contains("random_positions = 8") && err.contains("at least 9"),
            "{err}"
        );
    }
}
