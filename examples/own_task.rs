//! A `Task` of one's own (the digits 0-9 over and over), recorded in its checkpoint as
//! `[data] task = "custom"` under its own name: `cargo run --example own_task`.
use posflow::prelude::*;

struct Counting(CharTokenizer);
struct Quiet;
impl Progress for Quiet {}

fn batch(tokens: &CharTokenizer, rows: usize, len: usize, start: usize) -> Result<Batch> {
    let text: String = (start..start + len + rows)
        .map(|i| char::from(b'0' + (i % 10) as u8))
        .collect();
    let ids = tokens.encode(&text)?;
    Batch::padded(
        &(0..rows)
            .map(|r| (ids[r..r + len].to_vec(), ids[r + 1..r + len + 1].to_vec()))
            .collect::<Vec<_>>(),
    )
}

impl Task for Counting {
    fn tokenizer(&self) -> TaskTokenizer {
        TaskTokenizer::Chars(self.0.clone())
    }
    fn train_len(&self) -> usize {
        16
    }
    fn train_batch(&self, seed: u64, step: usize, rows: usize) -> Result<TrainBatch> {
        let start = seed as usize + step;
        Ok(TrainBatch::Tokens(batch(&self.0, rows, 16, start)?))
    }
    fn eval_sets(&self, lengths: &[usize], rows: usize, batches: usize) -> Vec<EvalSet> {
        let set = |length| EvalSet {
            length,
            batches: (0..batches).map(|b| batch(&self.0, rows, length, b)).collect(),
        };
        lengths.iter().map(|&length| set(length)).collect()
    }
}

fn main() -> Result<()> {
    let mut run = RunConfig::from_toml(CONFIG, "own_task")?;
    run.train.checkpoint = Some("runs/own_task.safetensors".into());
    let task = Box::new(Counting(CharTokenizer::from_text("0123456789")));
    let mut trainer = Trainer::with_task(pollster::block_on(select_backend(DeviceChoice::Cpu))?, run, task)?;
    let summary = fit(&mut trainer, &mut Quiet)?;
    println!(
        "loss {:.3} -> {:.3}, its data: {:?}",
        summary.first_loss,
        summary.last_loss,
        trainer.run().data
    );
    Ok(())
}

const CONFIG: &str = r#"data = { task = "custom", source = "counting", description = "0-9 over and over" }
model = { d_model = 16, heads = 2, layers = 1, ffn = 32, max_len = 64, kind = { type = "causal_lm" }, posenc = { type = "rope" } }
train = { steps = 60, batch = 8, lr = 1e-2, eval_lengths = [16, 64] }"#;
