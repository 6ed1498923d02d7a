//! A checkpoint as the viewer holds it: the saved model, a greedy text generator for a language
//! model or a decoder for a seq2seq model, and what its run config says about its data.

use std::rc::Rc;

use crate::backend::Backend;
use crate::checkpoint::Checkpoint;
use crate::data::{BOS, PairTokenizer, TaskTokenizer};
use crate::error::{Error, Result};
use crate::inference::{Generator, SavedModel, Seq2SeqDecoder};
use crate::model::ModelKind;
use crate::train::saved_run;

pub struct LoadedCheckpoint {
    /// What the user called it (a file name).
    pub name: String,
    pub saved: SavedModel,
    /// For a causal LM; an encoder does not generate text, a seq2seq model translates.
    pub generator: Option<Generator>,
    /// For a seq2seq model: beam search with its key/value cache.
    pub decoder: Option<Seq2SeqDecoder>,
    /// Its training sequences begin with `<bos>` (the prompted tasks, and every encoder).
    pub starts_with_bos: bool,
    /// The length it was trained on, where its run config says.
    pub train_len: Option<usize>,
}

impl LoadedCheckpoint {
    /// Parses and checks `bytes` (a safetensors checkpoint from `posflow train`); anything else
    /// is an error saying what is wrong, never a panic.
    pub fn from_bytes(backend: Rc<dyn Backend>, name: &str, bytes: &[u8]) -> Result<Self> {
        let checkpoint = Checkpoint::from_bytes(bytes, name)?;
        let saved = SavedModel::from_checkpoint(backend, &checkpoint)?;
        let run = saved_run(&saved.metadata).ok();
        let config = saved.model.config();
        let is_encoder = config.kind.reads_cls();
        let is_seq2seq = matches!(config.kind, ModelKind::Seq2Seq { .. });
        let starts_with_bos = is_encoder || run.as_ref().is_some_and(|r| r.data.starts_with_bos());
        let decoder = if is_seq2seq {
            if !matches!(saved.tokenizer, TaskTokenizer::Pairs(_)) {
                return Err(Error::Input(format!(
                    "{name}: a seq2seq model whose tokenizer is not a pair tokenizer"
                )));
            }
            Some(Seq2SeqDecoder::new(&saved.model, &saved.params)?)
        } else {
            None
        };
        // Only a causal LM generates; an encoder, a token classifier (the Chomsky tasks', from the
        // Compare tab) and a seq2seq model are shown without one.
        let generator = if !matches!(config.kind, ModelKind::CausalLm { .. }) {
            None
        } else {
            let generator = saved.generator()?;
            Some(if starts_with_bos {
                generator.starting_with_bos()
            } else {
                generator
            })
        };
        Ok(Self {
            name: name.to_string(),
            train_len: run.and_then(|r| r.data.train_len()),
            saved,
            generator,
            decoder,
            starts_with_bos,
        })
    }

    /// A seq2seq model's source and target vocabulary; `None` for the other kinds.
    pub fn pair_tokenizer(&self) -> Option<&PairTokenizer> {
        match (&self.decoder, &self.saved.tokenizer) {
            (Some(_), TaskTokenizer::Pairs(pairs)) => Some(pairs),
            _ => None,
        }
    }

    /// One line: the model's shape and position encoding.
    pub fn describe(&self) -> String {
        let c = self.saved.model.config();
        let layers = match c.kind {
            ModelKind::Seq2Seq { decoder_layers, .. } => {
                format!("seq2seq, {} + {decoder_layers} layers", c.layers)
            }
            _ => format!("{} layers", c.layers),
        };
        format!(
            "{}, {layers}, d {}, {} heads, step {}",
            c.posenc.name(),
            c.d_model,
            c.heads,
            self.saved.metadata.training.step
        )
    }

    /// The longest sequence its position encoding takes (a table's length), if it has a limit.
    pub fn length_limit(&self) -> Option<usize> {
        let c = self.saved.model.config();
        c.posenc.has_table().then_some(c.max_len)
    }

    /// `text` as token ids, after `<bos>` where the model expects one (a seq2seq model: as a
    /// source). A character the model never saw is an error naming it.
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        if let Some(pairs) = self.pair_tokenizer() {
            return pairs
                .encode_source(text)
                .map_err(|e| Error::Input(format!("the source has a token the model never saw: {e}")));
        }
        let mut ids = if self.starts_with_bos {
            vec![BOS]
        } else {
            Vec::new()
        };
        ids.extend(
            self.saved
                .tokenizer
                .chars()?
                .encode(text)
                .map_err(|e| Error::Input(format!("the text has a character the model never saw: {e}")))?,
        );
        Ok(ids)
    }

    /// A token as an axis label: its character (space and newline made visible) or its special
    /// name.
    pub fn token_label(&self, id: i32) -> String {
        match usize::try_from(id) {
            Ok(i) if i < self.saved.tokenizer.specials().len() => {
                self.saved.tokenizer.specials()[i].to_string()
            }
            _ => match self.saved.tokenizer.decode(&[id]).as_deref() {
                Ok(" ") => "·".into(),
                Ok("\n") => "\\n".into(),
                Ok(s) => s.to_string(),
                Err(_) => format!("#{id}"),
            },
        }
    }
}
