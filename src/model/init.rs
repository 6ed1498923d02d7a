//! How the Transformer's own weights start: GPT-2's, BERT's or fairseq's scheme (the config's
//! `init`). Position encodings start their parameters as their papers do, whatever the scheme;
//! layer norms start at gain 1, bias 0 and every bias at 0 in all three.

use serde::{Deserialize, Serialize};

use crate::graph::Init;

/// GPT-2's and BERT's standard deviation for every weight matrix and embedding table.
pub(super) const INIT_STD: f32 = 0.02;

/// A scheme for the projections, the token table and an untied output table. In TOML:
/// `init = "fairseq"`; unset, a pre-LN model takes `gpt2` and a post-LN model `bert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitScheme {
    /// N(0, 0.02) everywhere, the projections into the residual stream (attention output, FFN
    /// down) N(0, 0.02/√(2·layers)) so the stream's variance does not grow with depth.
    Gpt2,
    /// N(0, 0.02) for every weight and table, no depth scaling (`init_bert_params`, the TUPE
    /// authors').
    Bert,
    /// fairseq's Transformer (FLOATER's translation model, the ODE Transformer's): every
    /// projection Xavier-uniform, bound √(6/(fan_in + fan_out)), the q, k and v projections as
    /// the one `[3D, D]` matrix fairseq draws them in (bound √(6/4D)); the token table and an
    /// untied output table N(0, D^-½).
    Fairseq,
}

impl InitScheme {
    /// The q, k and v projections `[D, 3D]`, a decoder's cross-attention q `[D, D]` and k|v
    /// `[D, 2D]`: all drawn as parts of one `[3D, D]` matrix in fairseq.
    pub fn attention_in(self, d: usize) -> Init {
        match self {
            Self::Gpt2 | Self::Bert => Init::Normal(INIT_STD),
            Self::Fairseq => xavier_uniform(d, 3 * d),
        }
    }

    /// A projection into the residual stream of a stack of `layers` blocks, `inputs` wide: the
    /// attention's output `[D, D]` and the FFN's down projection `[F, D]`.
    pub fn into_residual(self, inputs: usize, d: usize, layers: usize) -> Init {
        match self {
            Self::Gpt2 => Init::Normal(INIT_STD / (2.0 * layers as f32).sqrt()),
            Self::Bert => Init::Normal(INIT_STD),
            Self::Fairseq => xavier_uniform(inputs, d),
        }
    }

    /// The FFN's up projection `[D, F]`.
    pub fn ffn_up(self, d: usize, ffn: usize) -> Init {
        match self {
            Self::Gpt2 | Self::Bert => Init::Normal(INIT_STD),
            Self::Fairseq => xavier_uniform(d, ffn),
        }
    }

    /// The token table `[V, D]`: fairseq's N(0, D^-½), or, in the other schemes, that where the
    /// embeddings are scaled by √D (so they start at unit size, as fairseq's) and N(0, 0.02)
    /// where they are not.
    pub fn token_table(self, d: usize, scaled_by_sqrt_d: bool) -> Init {
        match self {
            Self::Fairseq => Init::Normal(1.0 / (d as f32).sqrt()),
            Self::Gpt2 | Self::Bert if scaled_by_sqrt_d => Init::Normal(1.0 / (d as f32).sqrt()),
            Self::Gpt2 | Self::Bert => Init::Normal(INIT_STD),
        }
    }

    /// An untied output table `[D, V]` (`lm_head.weight`; fairseq's `embed_out`).
    pub fn output_table(self, d: usize) -> Init {
        match self {
            Self::Gpt2 | Self::Bert => Init::Normal(INIT_STD),
            Self::Fairseq => Init::Normal(1.0 / (d as f32).sqrt()),
        }
    }
}

/// PyTorch's `xavier_uniform_` of a `fan_in × fan_out` matrix.
fn xavier_uniform(fan_in: usize, fan_out: usize) -> Init {
    Init::Uniform((6.0 / (fan_in + fan_out) as f32).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds fairseq's code draws from: `in_proj_weight [3D, D]` (FLOATER's FlowAttention,
    /// the ODE Transformer's MultiheadAttention), `out_proj [D, D]`, `fc1 [F, D]`, `fc2 [D, F]`.
    #[test]
    fn fairseq_bounds_are_xavier_uniform_of_fairseq_s_matrices() {
        let (d, ffn) = (64, 256);
        let bound = |init| match init {
            Init::Uniform(a) => a,
            other => panic!("expected a uniform init, got {other:?}"),
        };
        let s = InitScheme::Fairseq;
        assert!((bound(s.attention_in(d)) - (6.0f32 / 256.0).sqrt()).abs() < 1e-7);
        assert!((bound(s.into_residual(d, d, 2)) - (6.0f32 / 128.0).sqrt()).abs() < 1e-7);
        assert!((bound(s.ffn_up(d, ffn)) - (6.0f32 / 320.0).sqrt()).abs() < 1e-7);
        assert!((bound(s.into_residual(ffn, d, 2)) - (6.0f32 / 320.0).sqrt()).abs() < 1e-7);
        assert_eq!(s.token_table(d, false), Init::Normal(0.125));
        assert_eq!(s.output_table(d), Init::Normal(0.125));
    }

    #[test]
    fn gpt2_scales_the_residual_projections_by_depth_and_bert_does_not() {
        let scaled = InitScheme::Gpt2.into_residual(32, 32, 8);
        assert_eq!(scaled, Init::Normal(0.02 / 4.0));
        assert_eq!(InitScheme::Bert.into_residual(32, 32, 8), Init::Normal(0.02));
        assert_eq!(InitScheme::Gpt2.token_table(64, true), Init::Normal(0.125));
        assert_eq!(InitScheme::Bert.token_table(64, false), Init::Normal(0.02));
    }
}
