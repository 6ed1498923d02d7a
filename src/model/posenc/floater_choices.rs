//! FLOATER's choices beside its numbers: where the encodings enter the model, the ODE solver,
//! how the gradient is computed, and the dynamics' nonlinearity ([`super::FloaterConfig`]).

use serde::{Deserialize, Serialize};

/// How the encodings enter the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloaterForm {
    /// p⁽ⁿ⁾(t_i) added to block n's input (an ablation: not in the authors' code).
    Additive,
    /// The compatible form as the authors ran it (eqs. 11–13 with one shared flow): the
    /// sinusoidal Transformer (table at the input) whose q/k/v biases are the solution b(t_i) of
    /// one flow over `[3, layers, D]` from the learned b(0), in place of static biases. With zero
    /// dynamics the model is exactly the sinusoidal Transformer with q/k/v biases b(0) (the
    /// paper warm-starts from a trained one: `Trainer::warm_start`, `posflow train --warm-start`).
    #[default]
    Bias,
}

/// The ODE solver. `rk4` is torchdiffeq's (Kutta's 3/8 rule); `dopri5` adapts its steps (one step
/// size for all blocks, as torchdiffeq), on the GPU in one workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SolverMethod {
    Euler,
    Midpoint,
    Rk4,
    Dopri5,
}

/// How d loss / d θ is computed: backprop through the solver's steps (exact for the discrete
/// solution; the paper's RoBERTa setting) or the continuous adjoint (memory independent of the
/// number of steps; its translation setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradientMethod {
    Backprop,
    Adjoint,
}

/// h's nonlinearity: ReLU as the reference code, or tanh (smooth, better for dopri5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Nonlinearity {
    Relu,
    Tanh,
}
