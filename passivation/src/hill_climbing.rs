//! The hill-climbing optimizer of the admission window's size (Akka's
//! `hill-climbing` window optimizer).

use super::settings::HillClimbingSettings;

/// Every `adjust_multiplier x limit` accesses, compares the active rate
/// (the share of accesses that found their entity active) with the previous
/// sample and steps the window proportion: on in the same direction while
/// the rate does not drop, the other way when it drops. Steps decay by
/// `step_decay` per sample; a change in rate of at least
/// `restart_threshold` restarts with `initial_step`, because the workload
/// itself has likely changed.
#[derive(Debug, Clone)]
pub struct HillClimbing {
    settings: HillClimbingSettings,
    adjust_size: f64,
    accesses: u64,
    active_accesses: u64,
    previous_active_rate: f64,
    next_step: f64,
}

impl HillClimbing {
    /// An optimizer for a policy holding `limit` entities. The first step
    /// shrinks the window (Akka starts in the decreasing direction).
    pub fn new(settings: HillClimbingSettings, limit: usize) -> Self {
        Self {
            adjust_size: settings.adjust_multiplier * limit as f64,
            accesses: 0,
            active_accesses: 0,
            previous_active_rate: 0.0,
            next_step: -settings.initial_step,
            settings,
        }
    }

    /// An access that found its entity active.
    pub fn record_active(&mut self) {
        self.accesses += 1;
        self.active_accesses += 1;
    }

    /// An access that had to activate its entity.
    pub fn record_passive(&mut self) {
        self.accesses += 1;
    }

    /// The limit changed: sample every `adjust_multiplier x limit`
    /// accesses from now on (the current sample continues).
    pub fn set_limit(&mut self, limit: usize) {
        self.adjust_size = self.settings.adjust_multiplier * limit as f64;
    }

    /// The last step was blocked by a bound of the proportion: the next one
    /// goes the other way from the initial step. Without it, a flat active
    /// rate (a loop over more entities than fit: zero either way) keeps the
    /// climber pushing against the bound for ever. Akka's window optimizer
    /// does not turn; LIRS's probation share does.
    pub fn turn(&mut self) {
        self.next_step = if self.next_step > 0.0 {
            -self.settings.initial_step
        } else {
            self.settings.initial_step
        };
    }

    /// The change to apply to the window proportion now: 0.0 until a
    /// sample is complete.
    pub fn adjustment(&mut self) -> f64 {
        if (self.accesses as f64) < self.adjust_size {
            return 0.0;
        }
        let active_rate = self.active_accesses as f64 / self.accesses as f64;
        let delta = active_rate - self.previous_active_rate;
        let adjustment = if delta >= 0.0 {
            self.next_step
        } else {
            -self.next_step
        };
        let direction = if adjustment >= 0.0 { 1.0 } else { -1.0 };
        self.next_step = if delta.abs() >= self.settings.restart_threshold {
            self.settings.initial_step * direction
        } else {
            adjustment * self.settings.step_decay
        };
        self.previous_active_rate = active_rate;
        self.accesses = 0;
        self.active_accesses = 0;
        adjustment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(climber: &mut HillClimbing, active: u64, passive: u64) -> f64 {
        for _ in 0..active {
            climber.record_active();
        }
        for _ in 0..passive {
            climber.record_passive();
        }
        climber.adjustment()
    }

    #[test]
    fn climbs_while_the_rate_improves_and_turns_when_it_drops() {
        // limit 10: a sample every 100 accesses
        let mut climber = HillClimbing::new(HillClimbingSettings::default(), 10);
        assert_eq!(sample(&mut climber, 50, 49), 0.0, "sample not complete");
        climber = HillClimbing::new(HillClimbingSettings::default(), 10);
        // first sample: rate 0.5 from 0 is a jump: the initial step
        // (decreasing) and the climb restarts from it
        assert_eq!(sample(&mut climber, 50, 50), -0.0625);
        // small improvements: keep going down, the step decays
        assert_eq!(sample(&mut climber, 52, 48), -0.0625);
        assert_eq!(sample(&mut climber, 53, 47), -0.0625 * 0.98);
        // small drop: turn around, with the decayed step
        let step = 0.0625 * 0.98 * 0.98;
        assert!((sample(&mut climber, 52, 48) - step).abs() < 1e-12);
        // big drop: turn around again and restart from the initial step,
        // in the new direction
        assert!((sample(&mut climber, 30, 70) + step * 0.98).abs() < 1e-12);
        assert_eq!(sample(&mut climber, 30, 70), -0.0625);
        // the limit sets the sample size
        climber.set_limit(1);
        assert_ne!(sample(&mut climber, 5, 5), 0.0);
    }
}
