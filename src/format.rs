//! How figures are printed (report, warnings, terminal summary), at the precision a person
//! compares them: [`DIGITS`] significant figures (img/s to the unit from 1,000 up, times in µs
//! below 1 ms, shares to 0.1 points below 10 % and whole points above). Each printed figure
//! recomputes from the raw rows within its last digit (at most 0.5 % for three significant
//! figures); result.json and the CSVs keep the full values. Never in exponent notation; a
//! missing figure is "–".

/// Significant figures of a printed figure.
pub const DIGITS: i32 = 3;

/// `v` with [`DIGITS`] significant figures: 0.037912 → "0.0379", 36.04 → "36.0", 1234.7 →
/// "1235" (wider numbers keep all their integer digits).
pub fn sig(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    // Round first, so 9.996 becomes "10.0", not "10.00".
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (DIGITS - 1 - magnitude).clamp(0, 15) as usize;
    let rounded: f64 = format!("{v:.decimals$}").parse().unwrap_or(v);
    let magnitude = rounded.abs().log10().floor() as i32;
    let decimals = (DIGITS - 1 - magnitude).clamp(0, 15) as usize;
    format!("{rounded:.decimals$}")
}

/// A time given in milliseconds, with its unit: 12.345 → "12.3 ms", 0.002702 → "2.70 µs".
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v != 0.0 && v.abs() < 1.0 && sig(v) != "1.00" {
        format!("{} µs", sig(v * 1e3))
    } else {
        format!("{} ms", sig(v))
    }
}

/// A share as a percentage, to 0.1 points below 10 % and whole points from there:
/// 0.0579 → "5.8 %", 0.81234 → "81 %".
pub fn pct(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let p = v * 100.0;
    if p.abs() < 9.95 {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

/// A ratio: 1.83412 → "1.83×".
pub fn ratio(v: f64) -> String {
    format!("{}×", sig(v))
}

/// A rate (img/s): whole numbers with thousands separators from 1,000 up (four digits or
/// more), [`DIGITS`] significant figures below.
pub fn rate(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1000.0 {
        thousands(v)
    } else {
        sig(v)
    }
}

/// 42921.3 → "42,921".
pub fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 && s != "0" {
        format!("-{out}")
    } else {
        out
    }
}

/// `unix_s` as a UTC date and time, e.g. "2026-12-07 22:31 UTC" (the civil calendar from days
/// since 1970, Howard Hinnant's `civil_from_days`).
pub fn utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let (hour, minute) = ((unix_s % 86_400) / 3600, (unix_s % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_reads_as_a_utc_date() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(1_796_683_860), "2026-12-07 22:51 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn figures_print_at_the_precision_a_person_compares() {
        assert_eq!(sig(0.037912), "0.0379");
        assert_eq!(sig(36.04), "36.0");
        assert_eq!(sig(0.115), "0.115");
        assert_eq!(sig(9.996), "10.0");
        assert_eq!(sig(1234.7), "1235");
        assert_eq!(sig(-2.5), "-2.50");
        assert_eq!(ms(12.345), "12.3 ms");
        assert_eq!(ms(0.002702), "2.70 µs");
        assert_eq!(ms(0.9999), "1.00 ms");
        assert_eq!(ms(0.0), "0 ms");
        assert_eq!(pct(0.95), "95 %");
        assert_eq!(pct(0.0579), "5.8 %");
        assert_eq!(pct(0.000579), "0.1 %");
        assert_eq!(pct(0.0), "0.0 %");
        assert_eq!(ratio(4.38), "4.38×");
        assert_eq!(rate(813.44), "813");
        assert_eq!(rate(42921.3), "42,921");
        assert_eq!(thousands(-1234.0), "-1,234");
        assert_eq!(ms(f64::NAN), "–");
    }

    #[test]
    fn printed_figures_recompute_within_their_last_digit() {
        let mut v = 1.0e-4;
        while v < 1.0e6 {
            for s in [sig(v), rate(v)] {
                let back: f64 = s.replace(',', "").parse().unwrap();
                assert!((back - v).abs() <= 5e-3 * v, "{v} printed as {s}");
            }
            v *= 1.0173;
        }
    }
}
