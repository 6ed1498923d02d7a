//! A variant's `set`: dotted paths into the base run config, each replacing the value there.

use crate::error::{Error, Result};

/// Keys the study owns: where each run writes and which seed it uses.
pub const STUDY_OWNED: [&str; 3] = ["train.checkpoint", "train.metrics", "train.seed"];

/// Replaces the value at each dotted `path` of `overrides` in `base`, in order. `variant` names
/// the variant in errors. The parent of every path must exist and be a table; the last component
/// may be new (a key the base leaves at its default).
pub fn apply(base: &toml::Table, overrides: &toml::Table, variant: &str) -> Result<toml::Table> {
    let mut run = base.clone();
    for (path, value) in overrides {
        set_path(&mut run, path, value.clone())
            .map_err(|why| Error::Input(format!("variant `{variant}`: set \"{path}\": {why}")))?;
    }
    Ok(run)
}

fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) -> std::result::Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err("an empty component in the path".into());
    }
    if STUDY_OWNED.contains(&path) {
        return Err("the study sets each run's outputs and seed itself (seeds: [study] seeds)".into());
    }
    let Some((last, parents)) = parts.split_last() else {
        return Err("an empty path".into());
    };
    if parents.is_empty() {
        return Err(format!(
            "replaces the whole [{last}] section; name a key inside it, quoted, e.g. \"{last}.<key>\" \
             (an unquoted dotted key is a nested table in TOML)"
        ));
    }
    let mut here = table;
    for (depth, part) in parents.iter().enumerate() {
        let so_far = parts[..=depth].join(".");
        here = match here.get_mut(*part) {
            Some(toml::Value::Table(t)) => t,
            Some(other) => return Err(format!("\"{so_far}\" is a {}, not a table", other.type_str())),
            None => return Err(format!("\"{so_far}\" is not in [base]")),
        };
    }
    here.insert((*last).to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::apply;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    const BASE: &str = r#"
        [model]
        d_model = 16
        posenc = { type = "relative", buckets = 32, max_distance = 64 }
        [train]
        steps = 10
    "#;

    #[test]
    fn a_table_is_replaced_whole_and_a_leaf_is_set() {
        let set = table(
            r#""model.posenc" = { type = "learned" }
"train.steps" = 300
"train.eval_every" = 5"#,
        );
        let run = apply(&table(BASE), &set, "v").unwrap();
        assert_eq!(
            run["model"]["posenc"],
            toml::Value::Table(table(r#"type = "learned""#))
        );
        assert_eq!(run["model"]["d_model"].as_integer(), Some(16));
        assert_eq!(run["train"]["steps"].as_integer(), Some(300));
        assert_eq!(run["train"]["eval_every"].as_integer(), Some(5));
    }

    #[test]
    fn bad_paths_name_the_variant_and_the_key() {
        for (set, says) in [
            (r#""optim.lr" = 1.0"#, "\"optim\" is not in [base]"),
            (
                r#""train.steps.x" = 1"#,
                "\"train.steps\" is a integer, not a table",
            ),
            (
                r#"model.posenc = { type = "none" }"#,
                "replaces the whole [model] section",
            ),
            (
                r#""train.seed" = 3"#,
                "the study sets each run's outputs and seed",
            ),
            (r#""train..x" = 3"#, "an empty component"),
        ] {
            let err = apply(&table(BASE), &table(set), "tiny").unwrap_err().to_string();
            assert!(
                err.starts_with("variant `tiny`: set \"") && err.contains(says),
                "{set}: {err}"
            );
        }
    }
}
