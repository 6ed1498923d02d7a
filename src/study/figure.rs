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

/// Rewrites the SVG at `path` without what its drawing library spells out needlessly: SVG's
/// defaults (`opacity="1"`, `stroke="none"`) on every element and font sizes to 16 digits. The
/// published pictures are a third of the tree; this takes a seventh off them.
pub(super) fn compact_svg(path: &std::path::Path) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let text = text.replace(" opacity=\"1\"", "").replace(" stroke=\"none\"", "");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    const FONT_SIZE: &str = "font-size=\"";
    while let Some(at) = rest.find(FONT_SIZE) {
        let (before, after) = rest.split_at(at + FONT_SIZE.len());
        out.push_str(before);
        let end = after.find('"').unwrap_or(after.len());
        match after[..end].parse::<f64>() {
            Ok(size) => out.push_str(&format!("{size:.1}")),
            Err(_) => out.push_str(&after[..end]),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    crate::checkpoint::write_atomically(path, out.as_bytes()).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_compacted_svg_keeps_every_element_and_drops_only_defaults() {
        let path = std::env::temp_dir().join(format!("posflow-compact-{}.svg", std::process::id()));
        std::fs::write(
            &path,
            r##"<svg><rect x="0" opacity="1" fill="#FFFFFF" stroke="none"/><text font-size="16.129032258064516" opacity="0.5">a</text><text font-size="12">b</text></svg>"##,
        )
        .unwrap();
        super::compact_svg(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            text,
            r##"<svg><rect x="0" fill="#FFFFFF"/><text font-size="16.1" opacity="0.5">a</text><text font-size="12.0">b</text></svg>"##
        );
    }
}
