//! sacrebleu's `13a` tokenizer (mteval-v13a.pl's, the WMT standard), written out rule by rule so
//! that BLEU here splits text exactly where sacrebleu 2.x does, without a regex engine.
//!
//! sacrebleu (`tokenizer_13a.py`, then `tokenizer_re.py`) applies, in order:
//! 1. removes `<skipped>` and `-\n`, turns `\n` into a space, and unescapes `&quot;`, `&amp;`,
//!    `&lt;`, `&gt;` (one pass each, in that order);
//! 2. pads the line with a space at each end;
//! 3. `([\{-\~\[-\` -\&\(-\+\:-\@\/])` → ` \1 `: spaces around ASCII symbols other than
//!    `'`, `,`, `-` and `.`;
//! 4. `([^0-9])([\.,])` → `\1 \2 `: splits a period or comma not preceded by a digit;
//! 5. `([\.,])([^0-9])` → ` \1 \2`: splits a period or comma not followed by a digit;
//! 6. `([0-9])(-)` → `\1 \2 `: splits a dash preceded by a digit;
//! 7. splits on whitespace and joins with single spaces.
//!
//! Rules 4–6 match two characters at a time, left to right and without overlap (`re.sub`): in
//! `a..` only the first period is split by rule 4, because the second one's left neighbour was
//! consumed by the first match. `split_pairs` keeps that behaviour.

/// One segment as sacrebleu's BLEU preprocesses it (`rstrip`, then the 13a tokenizer): the
/// tokens joined by single spaces.
pub fn tokenize_13a(line: &str) -> String {
    let line = line
        .trim_end_matches(is_python_space)
        .replace("<skipped>", "")
        .replace("-\n", "")
        .replace('\n', " ")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">");

    let mut chars = Vec::with_capacity(line.len() + 2);
    chars.push(' ');
    for c in line.chars() {
        if is_split_symbol(c) {
            chars.extend([' ', c, ' ']);
        } else {
            chars.push(c);
        }
    }
    chars.push(' ');

    let period_or_comma = |c: char| c == '.' || c == ',';
    let digit = |c: char| c.is_ascii_digit();
    let chars = split_pairs(
        &chars,
        |a, b| !digit(a) && period_or_comma(b),
        |a, b| [a, ' ', b, ' '],
    );
    let chars = split_pairs(
        &chars,
        |a, b| period_or_comma(a) && !digit(b),
        |a, b| [' ', a, ' ', b],
    );
    let chars = split_pairs(&chars, |a, b| digit(a) && b == '-', |a, b| [a, ' ', b, ' ']);

    let line: String = chars.into_iter().collect();
    line.split(is_python_space)
        .filter(|token| !token.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The characters of rule 3's class: `{|}~`, ``[\]^_` ``, space to `&`, `()*+`, `:;<=>?@`, `/`.
fn is_split_symbol(c: char) -> bool {
    matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/')
}

/// Whitespace as Python's `str.split()` and `str.rstrip()` see it: Unicode White_Space (Rust's
/// `char::is_whitespace`) and the four ASCII separators U+001C–U+001F.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `re.sub` with a two-character pattern: scanning left to right, each pair for which `matches`
/// holds becomes `rewrite`'s four characters and the scan resumes after the pair.
fn split_pairs(
    chars: &[char],
    matches: impl Fn(char, char) -> bool,
    rewrite: impl Fn(char, char) -> [char; 4],
) -> Vec<char> {
    let mut out = Vec::with_capacity(chars.len() * 2);
    let mut i = 0;
    while i < chars.len() {
        match chars.get(i + 1) {
            Some(&next) if matches(chars[i], next) => {
                out.extend(rewrite(chars[i], next));
                i += 2;
            }
            _ => {
                out.push(chars[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_symbols_and_keeps_apostrophes() {
        assert_eq!(
            tokenize_13a("Hello, world! It's (fine)."),
            "Hello , world ! It's ( fine ) ."
        );
        assert_eq!(tokenize_13a("a/b x+y=z 50% $5"), "a / b x + y = z 50 % $ 5");
    }

    #[test]
    fn numbers_keep_their_inner_separators() {
        assert_eq!(tokenize_13a("1,000.50 and 3.14, 10."), "1,000.50 and 3.14 , 10 .");
        // A dash after a digit is split; inside words it stays.
        assert_eq!(tokenize_13a("1990-2000 e-mail -5"), "1990 - 2000 e-mail -5");
    }

    #[test]
    fn pairs_do_not_overlap() {
        // Rule 4 splits the first period of `a..` only (the pair `a.` consumes the `.` the
        // second pair would need); rule 5 then splits the second one from its right neighbour.
        assert_eq!(tokenize_13a("a..b"), "a . . b");
        // `.,4`: rule 4 splits the period from the space before it, rule 5 the period from the
        // comma, but the comma stays on the 4 (a digit follows it and a period precedes it).
        assert_eq!(tokenize_13a("x .,4"), "x . ,4");
    }

    #[test]
    fn entities_newlines_and_trailing_space() {
        assert_eq!(
            tokenize_13a("&quot;a&quot; &amp;quot; &lt;b&gt;"),
            "\" a \" & quot ; < b >"
        );
        assert_eq!(tokenize_13a("one-\ntwo\nthree <skipped>  "), "onetwo three");
        // `rstrip` runs before `-\n` is removed: a trailing dash stays.
        assert_eq!(tokenize_13a("end-\n"), "end-");
        assert_eq!(tokenize_13a("a\u{1c}b\u{a0}c\u{200b}d"), "a b c\u{200b}d");
        assert_eq!(tokenize_13a(""), "");
        assert_eq!(tokenize_13a(" \t\n"), "");
    }
}
