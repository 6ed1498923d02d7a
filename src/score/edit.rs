//! Levenshtein distance between token sequences: the numerator of a word or phoneme error rate.

/// The fewest insertions, deletions and substitutions of single tokens that turn `a` into `b`
/// (symmetric in its arguments).
///
/// The classic dynamic programme, one row at a time over the shorter sequence: O(n·m) time and
/// O(min(n, m)) memory, so that long generated sequences (a decoder that never stops) cost no
/// quadratic buffer.
pub fn edit_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    // row[j]: the distance between the prefix of `long` read so far and short[..j].
    let mut row: Vec<usize> = (0..=short.len()).collect();
    for (i, x) in long.iter().enumerate() {
        // The distance of the previous prefix of `long` to short[..j], before row[j] is overwritten.
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in short.iter().enumerate() {
            let substitute = diagonal + usize::from(x != y);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[short.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn distances_of_known_pairs() {
        let cases = [
            ("", "", 0),
            ("", "abc", 3),
            ("abc", "", 3),
            ("abc", "abc", 0),
            ("kitten", "sitting", 3),
            ("flaw", "lawn", 2),
            ("intention", "execution", 5),
            ("abc", "cba", 2),
            ("ab", "ba", 2),
            ("a", "b", 1),
            ("abcdef", "azced", 3),
        ];
        for (a, b, expected) in cases {
            assert_eq!(edit_distance(&chars(a), &chars(b)), expected, "{a:?} → {b:?}");
            assert_eq!(edit_distance(&chars(b), &chars(a)), expected, "{b:?} → {a:?}");
        }
    }

    #[test]
    fn phoneme_tokens() {
        let reference = ["HH", "AH0", "L", "OW1"];
        // One substitution (AH0 → EH0) and one deletion (OW1).
        assert_eq!(edit_distance(&["HH", "EH0", "L"], &reference), 2);
        assert_eq!(edit_distance(&reference, &reference), 0);
    }

    /// The definition itself, by recursion: the cheapest of dropping a's last token, dropping
    /// b's, or matching the two (free when equal).
    fn brute_force(a: &[u8], b: &[u8]) -> usize {
        match (a.split_last(), b.split_last()) {
            (None, _) => b.len(),
            (_, None) => a.len(),
            (Some((x, a_rest)), Some((y, b_rest))) => (brute_force(a_rest, b) + 1)
                .min(brute_force(a, b_rest) + 1)
                .min(brute_force(a_rest, b_rest) + usize::from(x != y)),
        }
    }

    #[test]
    fn agrees_with_the_recursive_definition_on_every_short_pair() {
        // Every string of length 0..=4 over {a, b, c}: 121 strings, 14 641 pairs.
        let mut strings: Vec<Vec<u8>> = vec![vec![]];
        let mut last = vec![vec![]];
        for _ in 0..4 {
            last = last
                .iter()
                .flat_map(|s: &Vec<u8>| b"abc".iter().map(move |&c| [s.as_slice(), &[c]].concat()))
                .collect();
            strings.extend(last.iter().cloned());
        }
        assert_eq!(strings.len(), 121);
        for a in &strings {
            for b in &strings {
                assert_eq!(edit_distance(a, b), brute_force(a, b), "{a:?} → {b:?}");
            }
        }
    }
}
