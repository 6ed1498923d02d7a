//! Parallel data of one's own: a tab-separated text, `source<TAB>target` per line, cut into
//! characters or whitespace-separated words, split by source length like every pair task.

use serde::{Deserialize, Serialize};

use super::{CharTokenizer, LengthSplit, MaxLengths, Pair, PairData, PairTokenizer, WordTokenizer};
use crate::error::{Error, Result};

/// How both sides of a pairs file are cut into tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tokenization {
    /// Every character one token, spaces included.
    Chars,
    /// Every whitespace-separated word one token.
    Words,
}

/// The most characters of a line quoted in an error.
const QUOTED_CHARS: usize = 60;

/// The pairs of `text`, one per line `source<TAB>target`, in a [`PairData`] split by `split`.
///
/// - Blank lines (nothing or only whitespace) are skipped; a `\r\n` line end and a leading byte
///   order mark are accepted, so files saved on Windows read as they look.
/// - A line without a tab, with more than one, or whose source or target is empty (or only
///   whitespace) is an error naming its line number (from 1). A second tab is refused rather than
///   read as part of the target: it is usually a third column (an attribution, as in the
///   Tatoeba/Anki exports), which would silently become part of every answer.
/// - Fields are taken as they are, surrounding spaces included (they are tokens when cut into
///   characters).
/// - A pair beyond `max` is an error naming its line: see [`MaxLengths`].
///
/// The tokenizer is built from the whole file, both sides and every line, not from the training
/// split alone: a split by length puts the longer lines in evaluation only, and their characters or
/// words would otherwise be unencodable. It is one vocabulary for both sides (see
/// [`PairTokenizer`]).
pub fn text_pairs(
    text: &str,
    tokenization: Tokenization,
    split: &LengthSplit,
    max: MaxLengths,
) -> Result<PairData> {
    let lines = parse(text)?;
    if lines.is_empty() {
        return Err(Error::Input(
            "text pairs: the file holds no pairs (expected `source<TAB>target` lines)".into(),
        ));
    }
    let fields = lines.iter().flat_map(|line| [line.source, line.target]);
    let tokenizer = match tokenization {
        Tokenization::Chars => PairTokenizer::Chars(CharTokenizer::from_texts(fields)),
        Tokenization::Words => PairTokenizer::Words(WordTokenizer::from_texts(fields)),
    };
    let pairs = lines
        .iter()
        .map(|line| {
            let at_line = |e: String| Error::Input(format!("text pairs line {}: {e}", line.number));
            let pair = Pair {
                source: tokenizer
                    .encode_source(line.source)
                    .map_err(|e| at_line(e.to_string()))?,
                target: tokenizer
                    .encode_target(line.target)
                    .map_err(|e| at_line(e.to_string()))?,
            };
            max.check(&pair).map_err(at_line)?;
            Ok(pair)
        })
        .collect::<Result<Vec<_>>>()?;
    PairData::new(tokenizer, pairs, split, max)
}

/// One line's fields and its number (from 1).
struct Line<'a> {
    number: usize,
    source: &'a str,
    target: &'a str,
}

/// The non-blank lines of `text` split at their one tab.
fn parse(text: &str) -> Result<Vec<Line<'_>>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: String| Error::Input(format!("text pairs line {number}: {what} in {}", quote(line)));
        let tabs = line.matches('\t').count();
        let Some((source, target)) = line.split_once('\t') else {
            return Err(bad("expected `source<TAB>target`, found no tab".into()));
        };
        if tabs > 1 {
            return Err(bad(format!(
                "expected one tab between source and target, found {tabs} (remove any further column)"
            )));
        }
        for (side, field) in [("source", source), ("target", target)] {
            if field.trim().is_empty() {
                return Err(bad(format!("the {side} is empty")));
            }
        }
        lines.push(Line {
            number,
            source,
            target,
        });
    }
    Ok(lines)
}

/// The line's first characters, escaped (control characters included) and quoted.
fn quote(line: &str) -> String {
    let mut quoted: String = line.chars().take(QUOTED_CHARS).collect();
    if line.chars().nth(QUOTED_CHARS).is_some() {
        quoted.push('…');
    }
    format!("{quoted:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPLIT: LengthSplit = LengthSplit {
        train_max_len: 2,
        valid_fraction: 0.0,
        seed: 0,
    };
    const ROOMY: MaxLengths = MaxLengths {
        source_len: 100,
        target_len: 100,
    };

    fn error(text: &str) -> String {
        text_pairs(text, Tokenization::Words, &SPLIT, ROOMY)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn words_split_by_source_length_with_one_vocabulary() {
        let text = "\u{feff}the cat\tle chat\r\n\n  \nthe big cat\tle gros chat\r\ncat\tchat\n";
        let data = text_pairs(text, Tokenization::Words, &SPLIT, ROOMY).unwrap();
        let tokenizer = data.tokenizer();
        // the cat le chat big gros
        assert_eq!(tokenizer.vocab_size(), 3 + 6);
        let decoded: Vec<(String, String)> = data
            .train()
            .iter()
            .map(|p| {
                (
                    tokenizer.decode_source(&p.source).unwrap(),
                    tokenizer.decode_target(&p.target).unwrap(),
                )
            })
            .collect();
        assert!(
            decoded.contains(&("the cat".into(), "le chat".into())),
            "{decoded:?}"
        );
        assert!(decoded.contains(&("cat".into(), "chat".into())), "{decoded:?}");
        let long = &data.eval()[0].pairs()[0];
        assert_eq!(tokenizer.decode_target(&long.target).unwrap(), "le gros chat");
    }

    #[test]
    fn chars_keep_spaces_as_tokens() {
        let data = text_pairs("ab\tb a\nabc\tcba\n", Tokenization::Chars, &SPLIT, ROOMY).unwrap();
        let PairTokenizer::Chars(chars) = data.tokenizer() else {
            panic!("{:?}", data.tokenizer())
        };
        assert_eq!(chars.chars(), &[' ', 'a', 'b', 'c']);
        assert_eq!(data.train()[0].target, chars.encode("b a").unwrap());
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(
            error("a\tb\n\nno tab here\n"),
            "text pairs line 3: expected `source<TAB>target`, found no tab in \"no tab here\""
        );
        assert_eq!(
            error("a\tb\tCC-BY Tatoeba\n"),
            "text pairs line 1: expected one tab between source and target, found 2 (remove any \
             further column) in \"a\\tb\\tCC-BY Tatoeba\""
        );
        assert_eq!(
            error("a\tb\n \tb\n"),
            "text pairs line 2: the source is empty in \" \\tb\""
        );
        assert_eq!(
            error("a\t\n"),
            "text pairs line 1: the target is empty in \"a\\t\""
        );
        assert_eq!(
            error("\n\n"),
            "text pairs: the file holds no pairs (expected `source<TAB>target` lines)"
        );
        let long = format!("{}\n", "x".repeat(100));
        let err = error(&long);
        assert!(err.ends_with(&format!("in \"{}…\"", "x".repeat(60))), "{err}");
    }

    #[test]
    fn a_line_beyond_the_model_is_named() {
        let max = MaxLengths {
            source_len: 3,
            target_len: 3,
        };
        let err = text_pairs("a\tb\na b c d\tb\n", Tokenization::Words, &SPLIT, max)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("text pairs line 2: the source has 4 tokens, more than the 3"),
            "{err}"
        );
    }
}
