//! The corpora shipped under `data/` (sources, licences and trimming in `data/README.md`).
//!
//! They are compiled in with `include_str!` rather than read at run time: the web build has no
//! filesystem, and tests and the CLI then work from any directory. The cost stays where it is
//! used: a `static` is linked only into binaries that reference it, and once (a `const` is a copy
//! at each use, which the optimiser merged or not: the page's wasm once carried CMUdict twice).

/// Moby Dick by Herman Melville, full text (1.2 MB, 83 distinct characters, `\n` line ends).
pub static MOBY_DICK: &str = include_str!("../../data/moby_dick.txt");

/// A quarter of the CMU pronouncing dictionary: lines `WORD  PH1 PH2 ...` (30,969 words).
pub static CMUDICT: &str = include_str!("../../data/cmudict.txt");

/// First names listed as female, one per line (4,951; stdlib's list).
pub static FEMALE_FIRST_NAMES: &str = include_str!("../../data/female_first_names.txt");

/// First names listed as male, one per line (3,898; stdlib's list).
pub static MALE_FIRST_NAMES: &str = include_str!("../../data/male_first_names.txt");

/// SpamAssassin e-mail bodies, `ham|spam<TAB>body` per line (1,436; made by `data/make_spam.py`).
pub static SPAM: &str = include_str!("../../data/spam.tsv");
