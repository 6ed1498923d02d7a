//! FLOATER's encodings solved once per length and reused by every prediction: at inference the
//! dynamics do not change, so re-solving the ODE for every token would only cost time ("no
//! overhead during the inference stage", as the paper puts it). Any length works, trained or not:
//! the cache solves as far as it is asked to.

use std::cell::RefCell;

use crate::error::{Error, Result};
use crate::exec::Executor;
use crate::graph::{Graph, TensorId};
use crate::model::posenc::Positions;
use crate::model::{EncodingSource, Model};
use crate::params::ParamStore;

pub struct EncodingCache {
    exec: Executor,
    encodings: TensorId,
    values: RefCell<Option<Vec<f32>>>,
}

impl EncodingCache {
    /// A cache of `model`'s encodings for sequences of `len` positions, with the parameters in
    /// `params`; `None` when the model has no FLOATER encodings.
    pub fn new(model: &Model, params: &ParamStore, len: usize) -> Result<Option<Self>> {
        let mut g = Graph::new();
        let c = model.config();
        let terms = c.posenc.terms(
            &mut g,
            c.dims(),
            Positions::contiguous(len),
            EncodingSource::Solve,
        )?;
        let Some(encodings) = terms.inputs.encodings else {
            return Ok(None);
        };
        Ok(Some(Self {
            exec: Executor::new(&g, &[encodings], params)?,
            encodings,
            values: RefCell::new(None),
        }))
    }

    /// The encodings ([`crate::model::encodings_shape`]), solved on first use.
    pub async fn values(&self) -> Result<Vec<f32>> {
        if let Some(values) = self.values.borrow().as_ref() {
            return Ok(values.clone());
        }
        self.exec.run()?;
        self.exec
            .check()
            .await
            .map_err(|e| Error::Input(format!("the position encodings cannot be computed: {e}")))?;
        let values = self.exec.read(self.encodings).await?;
        *self.values.borrow_mut() = Some(values.clone());
        Ok(values)
    }

    /// Forgets the encodings, so the next use solves again: after training the dynamics.
    pub fn invalidate(&self) {
        self.values.replace(None);
    }
}
