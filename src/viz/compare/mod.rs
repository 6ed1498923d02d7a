//! The Compare tab: a visitor compares position encodings on a length split, trained live in
//! this process (the page's, in a browser) by the same study rule as `posflow study`.

pub mod settings;

pub use settings::{Choice, CompareSettings, CompareTask, Encoding, Preset};
