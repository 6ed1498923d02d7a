//! Butcher tableaus of the explicit Runge-Kutta methods, as torchdiffeq 0.2.5 defines them.

/// An explicit Runge-Kutta method: stage i is evaluated at t₀ + cᵢ·dt on
/// z₀ + dt·Σⱼ aᵢⱼ kⱼ (j < i), and the step's result is z₀ + dt·Σᵢ bᵢ kᵢ.
pub(crate) struct Tableau {
    pub c: &'static [f64],
    /// Row i holds aᵢⱼ for j < i (row 0 is empty).
    pub a: &'static [&'static [f64]],
    pub b: &'static [f64],
}

impl Tableau {
    pub fn stages(&self) -> usize {
        self.c.len()
    }
}

pub(crate) const EULER: Tableau = Tableau {
    c: &[0.0],
    a: &[&[]],
    b: &[1.0],
};

pub(crate) const MIDPOINT: Tableau = Tableau {
    c: &[0.0, 0.5],
    a: &[&[], &[0.5]],
    b: &[0.0, 1.0],
};

/// Kutta's 3/8 rule: torchdiffeq's `rk4` (`rk4_alt_step_func`), not the classic tableau.
pub(crate) const RK4_THREE_EIGHTHS: Tableau = Tableau {
    c: &[0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0],
    a: &[&[], &[1.0 / 3.0], &[-1.0 / 3.0, 1.0], &[1.0, -1.0, 1.0]],
    b: &[0.125, 0.375, 0.375, 0.125],
};

/// Dormand-Prince 5(4) with its seventh (first-same-as-last) stage written out: stage 7 is evaluated
/// at the step's result, so k₇ = h(t₁, z₁) serves the error estimate, the dense output and the next
/// step's k₁.
pub(crate) const DOPRI5: Tableau = Tableau {
    c: &[0.0, 0.2, 0.3, 0.8, 8.0 / 9.0, 1.0, 1.0],
    a: &[
        &[],
        &[0.2],
        &[3.0 / 40.0, 9.0 / 40.0],
        &[44.0 / 45.0, -56.0 / 15.0, 32.0 / 9.0],
        &[
            19372.0 / 6561.0,
            -25360.0 / 2187.0,
            64448.0 / 6561.0,
            -212.0 / 729.0,
        ],
        &[
            9017.0 / 3168.0,
            -355.0 / 33.0,
            46732.0 / 5247.0,
            49.0 / 176.0,
            -5103.0 / 18656.0,
        ],
        &[
            35.0 / 384.0,
            0.0,
            500.0 / 1113.0,
            125.0 / 192.0,
            -2187.0 / 6784.0,
            11.0 / 84.0,
        ],
    ],
    b: &DOPRI5_B,
};

const DOPRI5_B: [f64; 7] = [
    35.0 / 384.0,
    0.0,
    500.0 / 1113.0,
    125.0 / 192.0,
    -2187.0 / 6784.0,
    11.0 / 84.0,
    0.0,
];

/// Fifth-order minus fourth-order weights: the local error estimate is dt·Σ eᵢ kᵢ.
pub(crate) const DOPRI5_ERROR: [f64; 7] = [
    35.0 / 384.0 - 1951.0 / 21600.0,
    0.0,
    500.0 / 1113.0 - 22642.0 / 50085.0,
    125.0 / 192.0 - 451.0 / 720.0,
    -2187.0 / 6784.0 - -12231.0 / 42400.0,
    11.0 / 84.0 - 649.0 / 6300.0,
    -1.0 / 60.0,
];

/// Weights of the state at the step's midpoint (Shampine), for the dense output.
const DOPRI5_MID: [f64; 7] = [
    6025192743.0 / 30085553152.0 / 2.0,
    0.0,
    51252292925.0 / 65400821598.0 / 2.0,
    -2691868925.0 / 45128329728.0 / 2.0,
    187940372067.0 / 1594534317056.0 / 2.0,
    -1776094331.0 / 19743644256.0 / 2.0,
    11237099.0 / 235043384.0 / 2.0,
];

/// torchdiffeq's dense output inside a dopri5 step: the quartic through z₀, z₁, the midpoint state
/// and the slopes k₁, k₇, at x = (t − t₀)/(t₁ − t₀). It is linear in the stages,
/// z(x) = z₀ + dt·Σᵢ wᵢ(x) kᵢ, so the output is one more stage-like combination (and its gradient
/// is as simple). At x = 1 the weights are b.
pub(crate) fn dopri5_dense_weights(x: f64) -> [f64; 7] {
    let (x2, x3, x4) = (x * x, x * x * x, x * x * x * x);
    std::array::from_fn(|i| {
        let (b, m) = (DOPRI5_B[i], DOPRI5_MID[i]);
        let first = if i == 0 { 1.0 } else { 0.0 };
        let last = if i == 6 { 1.0 } else { 0.0 };
        x * first
            + x2 * (last - 4.0 * first - 5.0 * b + 16.0 * m)
            + x3 * (5.0 * first - 3.0 * last + 14.0 * b - 32.0 * m)
            + x4 * (2.0 * last - 2.0 * first - 8.0 * b + 16.0 * m)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tableaus_are_consistent() {
        for tab in [&EULER, &MIDPOINT, &RK4_THREE_EIGHTHS, &DOPRI5] {
            assert_eq!(tab.a.len(), tab.stages());
            assert_eq!(tab.b.len(), tab.stages());
            assert!((tab.b.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            for (i, row) in tab.a.iter().enumerate() {
                assert_eq!(row.len(), i);
                assert!((row.iter().sum::<f64>() - tab.c[i]).abs() < 1e-12, "row {i}");
            }
        }
        assert!(DOPRI5_ERROR.iter().sum::<f64>().abs() < 1e-12);
    }

    #[test]
    fn dense_output_ends_at_the_step_result() {
        assert_eq!(dopri5_dense_weights(0.0), [0.0; 7]);
        for (w, b) in dopri5_dense_weights(1.0).iter().zip(DOPRI5.b) {
            assert!((w - b).abs() < 1e-12);
        }
        // Weights sum to x: the output is exact for a constant slope.
        assert!((dopri5_dense_weights(0.3).iter().sum::<f64>() - 0.3).abs() < 1e-12);
    }
}
