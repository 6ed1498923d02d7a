//! The learning-rate schedule: linear warmup to a peak, then constant, linear or cosine decay
//! to a floor at the last step.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::math;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decay {
    Constant,
    Linear,
    Cosine,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    pub peak_lr: f32,
    /// Steps of linear warmup from peak_lr / warmup_steps up to peak_lr.
    pub warmup_steps: usize,
    pub total_steps: usize,
    pub decay: Decay,
    /// The rate at the last step, as a fraction of the peak (ignored by `Constant`).
    #[serde(default)]
    pub final_fraction: f32,
}

impl Schedule {
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(Error::Input(format!("learning-rate schedule: {why}")));
        if !(self.peak_lr.is_finite() && self.peak_lr > 0.0) {
            return bad(format!("peak_lr must be positive, got {}", self.peak_lr));
        }
        if self.total_steps == 0 || self.warmup_steps > self.total_steps {
            return bad(format!(
                "need 0 <= warmup_steps ({}) <= total_steps ({}) and total_steps > 0",
                self.warmup_steps, self.total_steps
            ));
        }
        if !(0.0..=1.0).contains(&self.final_fraction) {
            return bad(format!(
                "final_fraction must be in [0, 1], got {}",
                self.final_fraction
            ));
        }
        Ok(())
    }

    /// The rate for step `step`, counted from 0.
    pub fn lr(&self, step: usize) -> f32 {
        if step < self.warmup_steps {
            return self.peak_lr * (step + 1) as f32 / self.warmup_steps as f32;
        }
        let decay_steps = (self.total_steps - self.warmup_steps).saturating_sub(1).max(1);
        let progress = ((step - self.warmup_steps) as f32 / decay_steps as f32).min(1.0);
        let floor = self.peak_lr * self.final_fraction;
        match self.decay {
            Decay::Constant => self.peak_lr,
            Decay::Linear => self.peak_lr + (floor - self.peak_lr) * progress,
            Decay::Cosine => {
                floor + 0.5 * (self.peak_lr - floor) * (1.0 + math::cos(std::f32::consts::PI * progress))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Decay, Schedule};

    fn schedule(decay: Decay) -> Schedule {
        Schedule {
            peak_lr: 1e-3,
            warmup_steps: 10,
            total_steps: 111,
            decay,
            final_fraction: 0.1,
        }
    }

    #[test]
    fn warmup_rises_linearly_to_the_peak() {
        let s = schedule(Decay::Cosine);
        assert!((s.lr(0) - 1e-4).abs() < 1e-9);
        assert!((s.lr(4) - 5e-4).abs() < 1e-9);
        assert!((s.lr(9) - 1e-3).abs() < 1e-9);
    }

    #[test]
    fn decays_reach_the_floor_at_the_last_step() {
        for decay in [Decay::Linear, Decay::Cosine] {
            let s = schedule(decay);
            assert!((s.lr(10) - 1e-3).abs() < 1e-9, "{decay:?} starts at the peak");
            assert!(
                (s.lr(110) - 1e-4).abs() < 1e-9,
                "{decay:?} ends at the floor: {}",
                s.lr(110)
            );
            assert!((s.lr(500) - 1e-4).abs() < 1e-9, "{decay:?} stays at the floor");
        }
        // Halfway through the 100 decay steps both are at the midpoint (cos(π/2) = 0).
        let mid = 0.5 * (1e-3 + 1e-4);
        assert!((schedule(Decay::Linear).lr(60) - mid).abs() < 1e-9);
        assert!((schedule(Decay::Cosine).lr(60) - mid).abs() < 1e-9);
        assert!(schedule(Decay::Cosine).lr(10 + 25) > schedule(Decay::Linear).lr(10 + 25));
        assert_eq!(schedule(Decay::Constant).lr(100), 1e-3);
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        let mut s = schedule(Decay::Linear);
        s.warmup_steps = 200;
        let err = s.validate().unwrap_err().to_string();
        assert!(
            err.contains("warmup_steps (200)") && err.contains("total_steps (111)"),
            "{err}"
        );
        s = schedule(Decay::Linear);
        s.peak_lr = f32::NAN;
        assert!(s.validate().unwrap_err().to_string().contains("peak_lr"));
        assert!(schedule(Decay::Cosine).validate().is_ok());
    }
}
