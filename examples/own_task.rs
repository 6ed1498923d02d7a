//! A `Task` of one's own, the digits 0-9 over and over, named in its checkpoint (`--example own_task`).
use posflow::prelude::*;

struct Counting(CharTokenizer);
impl Counting {
    fn digits(&self, rows: usize, len: usize, at: usize) -> Result<Batch> {
        let text = "0123456789".repeat((at % 10 + rows + len) / 10 + 1);
        Batch::next_tokens(&self.0.encode(&text)?, at % 10..at % 10 + rows, len) // next digit: target
    }
}

impl Task for Counting {
    fn tokenizer(&self) -> TaskTokenizer {
        TaskTokenizer::Chars(self.0.clone())
    }
    fn train_len(&self) -> usize {
        16
    }
    fn train_batch(&self, seed: u64, step: usize, rows: usize) -> Result<TrainBatch> {
        Ok(TrainBatch::Tokens(self.digits(rows, 16, seed as usize + step)?))
    }
    fn eval_sets(&self, lengths: &[usize], rows: usize, batches: usize) -> Vec<EvalSet> {
        let set = |&n| EvalSet::new(n, (0..batches).map(|b| self.digits(rows, n, b)).collect());
        lengths.iter().map(set).collect()
    }
}

fn main() -> Result<()> {
    let data = DataConfig::custom("counting", "the digits 0-9 over and over");
    let mut model = ModelConfig::default();
    (model.vocab, model.posenc) = (VOCAB_FROM_DATA, PosEnc::from_preset("rope", false)?);
    let mut train = TrainConfig::new(60, 8, 1e-2);
    (train.eval_lengths, train.checkpoint) = (vec![16, 64], Some("runs/own_task.safetensors".into()));
    let task = Box::new(Counting(CharTokenizer::from_text("0123456789")));
    let backend = pollster::block_on(select_backend(DeviceChoice::Cpu))?;
    let mut trainer = Trainer::with_task(backend, RunConfig::new(data, model, train)?, task)?;
    let loss = fit(&mut trainer, &mut ())?.last_loss;
    println!("loss {loss:.3}; the checkpoint's data: {:?}", trainer.run().data);
    Ok(())
}
