//! Editing a safetensors file as a hostile or damaged one would be: its tensors and metadata
//! changed, then serialised again, for the test files that check how posflow refuses it.

use std::collections::{BTreeMap, HashMap};

use safetensors::{Dtype, SafeTensors};

/// Each tensor's dtype, shape and raw bytes, by name.
pub type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

/// A valid file's tensors and metadata, edited by `edit`, serialised again.
pub fn rewritten(valid: &[u8], edit: impl FnOnce(&mut Tensors, &mut HashMap<String, String>)) -> Vec<u8> {
    let (_, header) = SafeTensors::read_metadata(valid).unwrap();
    let mut metadata = header.metadata().clone().unwrap();
    let file = SafeTensors::deserialize(valid).unwrap();
    let mut tensors: Tensors = file
        .tensors()
        .into_iter()
        .map(|(name, t)| (name, (t.dtype(), t.shape().to_vec(), t.data().to_vec())))
        .collect();
    edit(&mut tensors, &mut metadata);
    let views: Vec<_> = tensors
        .iter()
        .map(|(name, (dtype, shape, data))| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), data).unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize(views, Some(metadata)).unwrap()
}
