//! A trained model as a checkpoint holds it: the config, the parameters and the tokenizer.

use std::rc::Rc;

use super::Generator;
use crate::backend::Backend;
use crate::checkpoint::{Checkpoint, Metadata};
use crate::data::TaskTokenizer;
use crate::error::{Error, Result};
use crate::model::{Model, ModelConfig};
use crate::params::ParamStore;

pub struct SavedModel {
    pub model: Model,
    pub params: ParamStore,
    pub tokenizer: TaskTokenizer,
    pub metadata: Metadata,
}

impl SavedModel {
    /// Builds the checkpoint's model on `backend` and loads its parameters. Tensors that do not
    /// fit the config, a config that does not parse and a missing tokenizer are errors.
    pub fn from_checkpoint(backend: Rc<dyn Backend>, checkpoint: &Checkpoint) -> Result<Self> {
        let metadata = checkpoint.metadata().clone();
        let config: ModelConfig = serde_json::from_str(&metadata.config)
            .map_err(|e| Error::Input(format!("the checkpoint's model config does not parse: {e}")))?;
        let tokenizer = TaskTokenizer::from_json(metadata.tokenizer.as_deref().ok_or_else(|| {
            Error::Input("the checkpoint has no tokenizer, so text cannot be turned into tokens".into())
        })?)?;
        if tokenizer.vocab_size() != config.vocab {
            return Err(Error::Input(format!(
                "the checkpoint's tokenizer has {} ids but its model config says vocab {}",
                tokenizer.vocab_size(),
                config.vocab
            )));
        }
        let model = Model::new(config)?;
        // The parameters do not depend on the shape: a one-token graph declares them all.
        let g = model.declare_params()?;
        // Before allocating what the config claims (see `Checkpoint::check_parameters`).
        checkpoint.check_parameters(g.params())?;
        let params = ParamStore::init(backend, &g, 0)?;
        checkpoint.restore(&params, None)?;
        Ok(Self {
            model,
            params,
            tokenizer,
            metadata,
        })
    }

    /// A text generator over this model, conditioning on up to `max_len` tokens.
    pub fn generator(&self) -> Result<Generator> {
        let window = self.model.config().max_len;
        Generator::new(&self.model, &self.params, self.tokenizer.chars()?.clone(), window)
    }

    /// [`SavedModel::from_checkpoint`] for the file at `path`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(backend: Rc<dyn Backend>, path: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::from_checkpoint(backend, &Checkpoint::load(path)?)
    }
}
