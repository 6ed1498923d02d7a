//! `posflow results`: every study published under docs/studies/ read back from its runs and
//! judged again, its report and pictures written again, then docs/results/ and the README's
//! results block generated from them. `--check` writes nothing and fails where a file in the tree
//! differs from what the runs generate (CI runs it): a number edited by hand anywhere is caught.

use std::path::{Path, PathBuf};

use clap::Args;
use posflow::study::{
    ARCHIVE, HEADLINE_BEGIN, HEADLINE_END, Published, README_BEGIN, README_END, adjust_family, index_page,
    pack, published_names, readme_block, readme_headline, replace_block, study_page, unpack,
};

#[derive(Args)]
pub struct ResultsArgs {
    /// Compare instead of writing: list every file that differs from what the runs generate and
    /// fail if any does.
    #[arg(long)]
    check: bool,
    /// The repository to read and write (its studies/, docs/studies/, docs/results/, README.md).
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Only write DIR/runs.jsonl.gz from every finished run under DIR/runs/ (a study's output
    /// folder), as `docs/studies/<name>/` publishes them.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["check", "unpack"])]
    pack: Option<PathBuf>,
    /// Only put DIR/runs.jsonl.gz's runs back under DIR/runs/<variant>/seed<k>/, where `posflow
    /// study --out DIR` finds them done (a result already there is kept).
    #[arg(long, value_name = "DIR", conflicts_with = "check")]
    unpack: Option<PathBuf>,
}

pub fn results(args: ResultsArgs) -> posflow::Result<()> {
    if let Some(dir) = &args.pack {
        let n = pack(dir)?;
        println!("packed {n} run results into {}", dir.join(ARCHIVE).display());
        return Ok(());
    }
    if let Some(dir) = &args.unpack {
        let n = unpack(dir)?;
        println!("unpacked {n} run results under {}", dir.join("runs").display());
        return Ok(());
    }
    let root = &args.root;
    let published_dir = root.join("docs/studies");
    let names = published_names(&published_dir)?;
    // Where regenerated reports go: the tree itself, or a scratch folder to compare with it.
    let scratch = std::env::temp_dir().join(format!("posflow-results-check-{}", std::process::id()));
    let mut studies = Vec::with_capacity(names.len());
    for name in &names {
        let published = Published::read(
            &root.join("studies").join(format!("{name}.toml")),
            &published_dir.join(name),
        )?;
        let out = if args.check {
            scratch.join(name)
        } else {
            published_dir.join(name)
        };
        published.write_report(&out)?;
        println!(
            "{name}: {} runs, {} claims",
            published.results.len(),
            published.summary.claims.len()
        );
        studies.push(published);
    }
    let levels: Vec<f64> = studies.iter().map(|p| p.study.level).collect();
    if levels.windows(2).any(|w| w[0] != w[1]) {
        return Err(posflow::Error::Input(
            "the published studies state different levels; the README's family needs one".into(),
        ));
    }
    let alpha = 1.0 - levels.first().copied().unwrap_or(posflow::study::DEFAULT_LEVEL);
    let claims: Vec<(&str, &[posflow::study::ClaimReport])> = studies
        .iter()
        .map(|p| (p.study.name.as_str(), &p.summary.claims[..]))
        .collect();
    let family = adjust_family(&claims, alpha);

    let mut pages: Vec<(PathBuf, String)> =
        vec![(root.join("docs/results/README.md"), index_page(&studies, &family))];
    for p in &studies {
        pages.push((
            root.join("docs/results").join(format!("{}.md", p.study.name)),
            study_page(p, &family),
        ));
    }
    let readme_path = root.join("README.md");
    let readme = read(&readme_path)?;
    let blocks = [
        (README_BEGIN, README_END, readme_block(&studies, &family)),
        (HEADLINE_BEGIN, HEADLINE_END, readme_headline(&studies, &family)),
    ];
    let mut readme = readme;
    for (begin, end, block) in blocks {
        readme = replace_block(&readme, begin, end, &block)
            .map_err(|why| posflow::Error::Input(format!("{}: {why}", readme_path.display())))?;
    }
    pages.push((readme_path, readme));

    if !args.check {
        std::fs::create_dir_all(root.join("docs/results"))
            .map_err(|e| posflow::Error::Input(e.to_string()))?;
        for (path, text) in &pages {
            posflow::checkpoint::write_atomically(path, text.as_bytes())?;
        }
        println!(
            "wrote {} reports, docs/results/ and README.md's results",
            studies.len()
        );
        return Ok(());
    }
    let mut differing: Vec<String> = Vec::new();
    for name in &names {
        for entry in
            std::fs::read_dir(scratch.join(name)).map_err(|e| posflow::Error::Input(e.to_string()))?
        {
            let generated = entry.map_err(|e| posflow::Error::Input(e.to_string()))?.path();
            let file = generated.file_name().expect("a file in the folder");
            let committed = published_dir.join(name).join(file);
            if std::fs::read(&generated).ok() != std::fs::read(&committed).ok() {
                differing.push(committed.display().to_string());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    for (path, text) in &pages {
        if std::fs::read(path).ok().as_deref() != Some(text.as_bytes()) {
            differing.push(path.display().to_string());
        }
    }
    if differing.is_empty() {
        println!("every report, docs/results/ and README.md's results are what the runs generate");
        Ok(())
    } else {
        Err(posflow::Error::Input(format!(
            "these files differ from what the published runs generate (run `posflow results` to \
             write them): {}",
            differing.join(", ")
        )))
    }
}

fn read(path: &Path) -> posflow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| posflow::Error::Input(format!("{}: {e}", path.display())))
}
