//! The choice at the end of a search: the cheapest setting whose throughput cannot be told
//! from the best's.

use crate::format;
use crate::results::TrialSetting;

use super::knob::Knob;

/// The setting with the highest median img/s, if any was measured.
pub(super) fn best(settings: &[TrialSetting]) -> Option<&TrialSetting> {
    settings
        .iter()
        .max_by(|a, b| a.img_per_s.total_cmp(&b.img_per_s))
}

/// The cheapest setting within noise of the best (its ratio's CI reaches 1 − `min_effect`,
/// `[report] min_effect`: a difference no worker is worth; two worker counts holding a
/// stand-in step at its ceiling once measured 12,794.2 and 12,794.7 img/s, and the ratio's
/// interval, 0.99996, excluded 1), and why.
pub fn choose(settings: &[TrialSetting], knob: Knob, min_effect: f64) -> (Option<u64>, String) {
    let Some(best) = best(settings) else {
        return (None, "no setting was measured".into());
    };
    // Within noise: the CI of the paired ratio reaches within min_effect of 1 — and the setting is not input-bound
    // where the best is not (its waiting share, measured on every step, is direct evidence
    // that the loader holds it back even when a few rounds' throughput cannot tell).
    let within: Vec<&TrialSetting> = settings
        .iter()
        .filter(|s| {
            s.value == best.value
                || (s.ratio_low <= 1.0
                    && 1.0 - min_effect <= s.ratio_high
                    && s.input_bound.severity() <= best.input_bound.severity())
        })
        .collect();
    let cheapest = within
        .iter()
        .min_by_key(|s| s.value)
        .copied()
        .unwrap_or(best);
    let reason = if cheapest.value == best.value {
        format!(
            "{} = {} had the highest throughput ({} img/s), and every cheaper setting was \
             slower beyond noise and by more than {} (`[report] min_effect`).",
            knob.key(),
            best.value,
            format::rate(best.img_per_s),
            format::pct(min_effect)
        )
    } else {
        format!(
            "{} = {} is the cheapest setting within noise of the best ({} = {}): ratio {} \
             (95 % CI {}–{}).",
            knob.key(),
            cheapest.value,
            knob.key(),
            best.value,
            format::ratio(cheapest.ratio_to_best),
            format::ratio(cheapest.ratio_low),
            format::ratio(cheapest.ratio_high)
        )
    };
    (Some(cheapest.value), reason)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::results::InputBound;

    /// A measured setting with planted figures (the search's tests use it too).
    pub(in crate::commands::tune) fn setting(
        value: u64,
        img: f64,
        low: f64,
        high: f64,
    ) -> TrialSetting {
        TrialSetting {
            value,
            condition: format!("workers={value}"),
            img_per_s: img,
            wait_share: 0.0,
            input_bound: InputBound::Not,
            ratio_to_best: img / 100.0,
            ratio_low: low,
            ratio_high: high,
        }
    }

    #[test]
    fn the_cheapest_within_noise_of_the_best_is_chosen() {
        let s = [
            setting(1, 60.0, 0.5, 0.7),
            setting(2, 98.0, 0.93, 1.03),
            setting(3, 100.0, 1.0, 1.0),
        ];
        assert_eq!(choose(&s, Knob::Workers, 0.02).0, Some(2));
        let s = [setting(1, 60.0, 0.5, 0.7), setting(2, 100.0, 1.0, 1.0)];
        assert_eq!(choose(&s, Knob::Workers, 0.02).0, Some(2));
        // A wide CI does not make an input-bound setting equivalent to one that is not.
        let mut waiting = setting(0, 60.0, 0.55, 1.08);
        waiting.input_bound = InputBound::Highly;
        let s = [waiting, setting(1, 100.0, 1.0, 1.0)];
        assert_eq!(choose(&s, Knob::Workers, 0.02).0, Some(1));
        // A hair slower with a CI that excludes 1 (a device-bound step): the same, so cheaper
        // wins; 2.5 % slower beyond noise does not, unless min_effect allows 3 %.
        let s = [
            setting(2, 99.996, 0.99995, 0.99997),
            setting(3, 100.0, 1.0, 1.0),
        ];
        assert_eq!(choose(&s, Knob::Workers, 0.02).0, Some(2));
        let s = [setting(2, 97.5, 0.97, 0.978), setting(3, 100.0, 1.0, 1.0)];
        assert_eq!(choose(&s, Knob::Workers, 0.02).0, Some(3));
        assert_eq!(choose(&s, Knob::Workers, 0.03).0, Some(2));
    }
}
