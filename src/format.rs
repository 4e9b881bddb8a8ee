//! How figures are printed (report, warnings, terminal summary): every figure with at least [`DIGITS`] significant digits, so each
//! one recomputes from the raw rows within 0.1 % (four digits round by at most 0.05 %; three
//! could round by 0.5 %). Never in exponent notation; a missing figure is "–".

/// Significant digits of every printed figure.
pub const DIGITS: i32 = 4;

/// `v` with at least [`DIGITS`] significant digits: 0.037912 → "0.03791", 36.04 → "36.04",
/// 1234.7 → "1235" (wider numbers keep all their integer digits).
pub fn sig(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let magnitude = v.abs().log10().floor() as i32;
    let decimals = (DIGITS - 1 - magnitude).clamp(0, 15) as usize;
    format!("{v:.decimals$}")
}

/// Milliseconds.
pub fn ms(v: f64) -> String {
    sig(v)
}

/// A share as a percentage: 0.81234 → "81.23 %".
pub fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{} %", sig(v * 100.0))
    } else {
        "–".into()
    }
}

/// A ratio: 1.83412 → "1.834×".
pub fn ratio(v: f64) -> String {
    format!("{}×", sig(v))
}

/// A rate (img/s): whole numbers with thousands separators from 1,000 up (four digits or
/// more), significant digits below.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_keeps_four_significant_digits() {
        assert_eq!(sig(0.037912), "0.03791");
        assert_eq!(sig(36.04), "36.04");
        assert_eq!(sig(0.115), "0.1150");
        assert_eq!(sig(1234.7), "1235");
        assert_eq!(sig(-2.5), "-2.500");
        assert_eq!(pct(0.95), "95.00 %");
        assert_eq!(pct(0.0), "0 %");
        assert_eq!(ratio(4.38), "4.380×");
        assert_eq!(rate(813.44), "813.4");
        assert_eq!(rate(42921.3), "42,921");
        assert_eq!(thousands(-1234.0), "-1,234");
        assert_eq!(ms(f64::NAN), "–");
    }

    #[test]
    fn printed_figures_recompute_within_a_thousandth() {
        let mut v = 1.0e-4;
        while v < 1.0e6 {
            for s in [sig(v), rate(v)] {
                let back: f64 = s.replace(',', "").parse().unwrap();
                assert!((back - v).abs() <= 1e-3 * v, "{v} printed as {s}");
            }
            v *= 1.0173;
        }
    }
}
