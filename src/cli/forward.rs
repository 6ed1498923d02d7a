//! `posflow forward`: a checkpoint's logits, loss and gradients on one batch, written to a
//! safetensors file, so that a port of the model (the PyTorch package in `python/`) can be
//! checked against posflow value for value.

use std::path::PathBuf;
use std::rc::Rc;

use clap::Args;
use posflow::backend::Backend;
use posflow::checkpoint::{Checkpoint, write_atomically};
use posflow::train::{ValueBatch, checkpoint_values};

#[derive(Args)]
pub struct ForwardArgs {
    #[arg(long)]
    checkpoint: PathBuf,
    /// The batch: a safetensors file of i32 tensors (`tokens`, `targets`, and `mask`, `positions`
    /// where they apply; a seq2seq model's `source`, `source_mask`, `target_in`, `targets`).
    /// Default: the batch stored in the checkpoint (`reference_batch`).
    #[arg(long)]
    batch: Option<PathBuf>,
    /// Where to write `logits`, `loss`, `grad/<param>` (and a randomized model's `positions`).
    #[arg(long)]
    out: PathBuf,
}

pub fn forward(backend: Rc<dyn Backend>, args: ForwardArgs) -> posflow::Result<()> {
    let checkpoint = Checkpoint::load(&args.checkpoint)?;
    let batch = match &args.batch {
        Some(path) => {
            let bytes = posflow::memory::read_regular_file(path)
                .map_err(|e| posflow::Error::Input(format!("{}: {e}", path.display())))?;
            ValueBatch::from_safetensors(&bytes, &path.display().to_string())?
        }
        None => ValueBatch::from_reference(checkpoint.metadata())?,
    };
    let values = pollster::block_on(checkpoint_values(backend, &checkpoint, &batch))?;
    write_atomically(&args.out, &values.to_safetensors()?)?;
    println!(
        "wrote {}: loss {:.6}, logits {:?}, {} gradients",
        args.out.display(),
        values.loss,
        values.logits.shape,
        values.grads.len()
    );
    Ok(())
}
