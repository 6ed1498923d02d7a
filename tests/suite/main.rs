//! The integration tests, one binary: each test file was a binary of its own and linked all of
//! wgpu, naga and egui again (34 links of ~400 MB). A file here is a module; `cargo test NAME`
//! still picks tests by name, e.g. `cargo test --test suite study::`. Two files stay binaries
//! of their own: `device_selection` (it changes the environment wgpu reads, which no other
//! test may see) and `fuzz` (it opens no GPU: the GPU machine's checks run every binary but it).

// Expected values here may come from the standard library's exp and ln: the engine's own code
// takes them from its one implementation (clippy.toml), a test's reference need not.
#![allow(clippy::disallowed_methods)]

mod common;

mod checkpoint;
mod chomsky;
mod cli;
mod configs;
mod data;
mod encoding_lists;
mod errors;
mod finetune;
mod floater;
mod floater_cache;
mod hostile;
mod import_cycles;
mod init_schemes;
mod live_study;
mod masked_lm;
mod mlp;
mod model;
mod model_reference;
mod model_training;
mod ode_code;
mod own_task;
mod portable_arithmetic;
mod profile;
mod random_positions;
mod resume;
mod seq2seq;
mod study;
mod study_files;
mod train;
mod tupe_code;
mod viz;
mod viz_compare;
mod viz_seq2seq;
