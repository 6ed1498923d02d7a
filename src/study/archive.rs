//! A study's finished runs in one file: `runs.jsonl.gz`, one compact `result.json` a line, sorted
//! by variant and seed, gzipped — what `docs/studies/<name>/` publishes in place of a folder of
//! pretty-printed files (a tenth of their size), each run's training loss as 10-step means
//! (`RunResult::published`). `posflow results --pack` writes it from a
//! study's `runs/` folder, `--unpack` puts the results back there so that `posflow study` finds
//! those runs done; `posflow results` reads it directly.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

use super::results::RunResult;
use crate::error::{Error, Result};

/// The archive's name inside a study's folder.
pub const ARCHIVE: &str = "runs.jsonl.gz";

/// The most an archive may hold once decompressed: a file is read whole, so a bad one must not
/// ask for unbounded memory.
const MAX_DECOMPRESSED: u64 = 1 << 30;

/// Writes `results` (in variant, then seed order, each as `RunResult::published`) to `path`,
/// atomically.
pub fn write_archive(path: &Path, results: &[RunResult]) -> Result<()> {
    let mut sorted: Vec<&RunResult> = results.iter().collect();
    sorted.sort_by(|a, b| (&a.variant, a.seed).cmp(&(&b.variant, b.seed)));
    let mut gz = GzEncoder::new(Vec::new(), Compression::best());
    for result in sorted {
        let line = serde_json::to_string(&result.published()).expect("a result serializes");
        gz.write_all(line.as_bytes())
            .and_then(|()| gz.write_all(b"\n"))
            .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    }
    let bytes = gz
        .finish()
        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    crate::checkpoint::write_atomically(path, &bytes)
}

/// Every result in the archive at `path`; an error names the file and the line that fails.
pub fn read_archive(path: &Path) -> Result<Vec<RunResult>> {
    let file = std::fs::File::open(path).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    let reader = BufReader::new(GzDecoder::new(file).take(MAX_DECOMPRESSED));
    let mut results = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        if line.trim().is_empty() {
            continue;
        }
        let result = RunResult::parse(&line)
            .map_err(|e| Error::Input(format!("{} line {}: {e}", path.display(), i + 1)))?;
        results.push(result);
    }
    Ok(results)
}

/// The `result.json` files under `dir/runs/<variant>/seed<k>/`, as paths.
fn result_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let runs = dir.join("runs");
    let read = |d: &Path| std::fs::read_dir(d).map_err(|e| Error::Input(format!("{}: {e}", d.display())));
    let mut files = Vec::new();
    for variant in read(&runs)? {
        let variant = variant.map_err(|e| Error::Input(e.to_string()))?.path();
        if !variant.is_dir() {
            continue;
        }
        for seed in read(&variant)? {
            let file = seed
                .map_err(|e| Error::Input(e.to_string()))?
                .path()
                .join("result.json");
            if file.is_file() {
                files.push(file);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Writes `dir/runs.jsonl.gz` from every finished run under `dir/runs/`; returns how many.
pub fn pack(dir: &Path) -> Result<usize> {
    let results = result_files(dir)?
        .iter()
        .map(|file| RunResult::load(file))
        .collect::<Result<Vec<_>>>()?;
    write_archive(&dir.join(ARCHIVE), &results)?;
    Ok(results.len())
}

/// Writes each result of `dir/runs.jsonl.gz` to `dir/runs/<variant>/seed<k>/result.json`, keeping
/// any already there; returns how many it wrote. Names become folders, so each is checked.
pub fn unpack(dir: &Path) -> Result<usize> {
    let archive = dir.join(ARCHIVE);
    let mut written = 0;
    for result in read_archive(&archive)? {
        if result.variant.is_empty()
            || !result
                .variant
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(Error::Input(format!(
                "{}: variant {:?} is not a name posflow writes (letters, digits, _ and -)",
                archive.display(),
                result.variant
            )));
        }
        let run_dir = dir
            .join("runs")
            .join(&result.variant)
            .join(format!("seed{}", result.seed));
        let file = run_dir.join("result.json");
        if file.exists() {
            continue;
        }
        std::fs::create_dir_all(&run_dir).map_err(|e| Error::Input(format!("{}: {e}", run_dir.display())))?;
        result.write(&file)?;
        written += 1;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::test_runs::run;

    /// Packed and read back, every result is the same to the bit; unpacked, each lands where
    /// `posflow study` looks for it, and one already there is kept.
    #[test]
    fn an_archive_round_trips_to_the_bit() {
        let dir = std::env::temp_dir().join(format!("posflow-archive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let values: Vec<f64> = (0..50).map(|i| f64::from((i as f32 + 0.37) / 1279.0)).collect();
        let mut results = vec![
            run("b", 1, &values),
            run("a", 2, &values[..3]),
            run("a", 0, &values),
        ];
        results[0].train_loss = values.iter().map(|&v| v as f32 * 3.1).collect();
        for r in &results {
            let seed_dir = dir.join("runs").join(&r.variant).join(format!("seed{}", r.seed));
            std::fs::create_dir_all(&seed_dir).unwrap();
            r.write(&seed_dir.join("result.json")).unwrap();
        }
        assert_eq!(pack(&dir).unwrap(), 3);
        let back = read_archive(&dir.join(ARCHIVE)).unwrap();
        let order: Vec<(&str, u64)> = back.iter().map(|r| (r.variant.as_str(), r.seed)).collect();
        assert_eq!(order, [("a", 0), ("a", 2), ("b", 1)]);
        assert_eq!(back[2], results[0].published());
        assert_eq!(back[0], results[2].published());
        // The training loss is kept as the mean of each ten steps.
        assert_eq!(back[2].train_loss_window, 10);
        assert_eq!(back[2].train_loss.len(), 5);
        let first: f64 = results[0].train_loss[..10].iter().map(|&l| l as f64).sum::<f64>() / 10.0;
        assert_eq!(back[2].train_loss[0], first as f32);

        std::fs::remove_dir_all(dir.join("runs/a")).unwrap();
        assert_eq!(unpack(&dir).unwrap(), 2, "b's result was kept");
        assert_eq!(
            RunResult::load(&dir.join("runs/a/seed2/result.json")).unwrap(),
            results[1].published()
        );

        // A window posflow does not write is refused, naming the line.
        let text = String::from_utf8(std::fs::read(dir.join("runs/a/seed2/result.json")).unwrap()).unwrap();
        let odd = text.replace("\"train_loss_window\": 10", "\"train_loss_window\": 7");
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(odd.replace('\n', "").as_bytes()).unwrap();
        std::fs::write(dir.join(ARCHIVE), gz.finish().unwrap()).unwrap();
        let err = read_archive(&dir.join(ARCHIVE)).unwrap_err().to_string();
        assert!(err.contains("line 1: train_loss_window is 7"), "{err}");

        // A name that would leave the folder is refused.
        let mut hostile = results[1].clone();
        hostile.variant = "../escape".into();
        write_archive(&dir.join(ARCHIVE), &[hostile]).unwrap();
        let err = unpack(&dir).unwrap_err().to_string();
        assert!(err.contains("is not a name posflow writes"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
