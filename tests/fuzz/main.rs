//! The fuzz tests, a binary apart from the suite: no mutant opens a GPU, so the GPU machine's
//! checks (benches/gpu/) leave this binary out. `POSFLOW_FUZZ_MUTANTS` sets their size.

mod checkpoint;
mod config;
mod mutants;
mod safetensors_edits;
