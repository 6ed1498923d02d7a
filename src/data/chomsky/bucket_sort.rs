//! Bucket sort (context-sensitive): a string over five symbols, sorted ascending
//! (`tasks/cs/bucket_sort.py`, vocab_size 5).

use super::{Generator, Level};

pub struct BucketSort;

impl Generator for BucketSort {
    fn level(&self) -> Level {
        Level::ContextSensitive
    }

    fn input_symbols(&self) -> &'static str {
        "01234"
    }

    fn output_symbols(&self) -> &'static str {
        "01234"
    }

    fn answer(&self, input: &[u8]) -> Vec<u8> {
        let mut sorted = input.to_vec();
        sorted.sort_unstable();
        sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_example() {
        // 10204112 -> 00111224
        assert_eq!(
            BucketSort.answer(&[1, 0, 2, 0, 4, 1, 1, 2]),
            vec![0, 0, 1, 1, 1, 2, 2, 4]
        );
    }
}
