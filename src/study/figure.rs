//! What every study picture shares: its font, its drawing result, and the seed count its captions
//! give.

use super::results::RunResult;

pub(super) type Drawn = std::result::Result<(), Box<dyn std::error::Error>>;

pub(super) const FONT: &str = "sans-serif";

/// "5 seeds": how many seeds the runs drawn have (a replication's with the file's).
pub(super) fn seeds(results: &[RunResult]) -> String {
    let mut seeds: Vec<u64> = results.iter().map(|r| r.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    match seeds.len() {
        1 => "1 seed".into(),
        n => format!("{n} seeds"),
    }
}
