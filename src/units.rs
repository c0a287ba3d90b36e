//! Units for people: sizes, shares and durations written for a reader, and
//! sizes read from the command line. A leaf: it uses no other module.
//!
//! Sizes are bytes (`u64`) everywhere else; binary units are spelled
//! `GiB`/`MiB`/`KiB` (DESIGN.md §3).

use thiserror::Error;

/// A size in binary units: `18.8 MiB`, `3.03 GiB`, `512 B`.
pub fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b >= KIB * KIB * KIB {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    } else if b >= KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Share of `part` in `whole` as a percentage string (`56.1%`; `0%` of nothing).
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0%".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// A duration in microseconds in the largest unit that keeps it ≥ 1.
pub fn human_duration_us(us: f64) -> String {
    let a = us.abs();
    if a >= 60e6 {
        format!("{:.1} min", us / 60e6)
    } else if a >= 1e6 {
        format!("{:.3} s", us / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

/// Why a size (or headroom) given on the command line was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SizeError {
    /// No number before the unit (`GB`).
    #[error("`{0}` is not a size (try 80GiB, 79.6GB, 512MiB or bytes)")]
    NoNumber(String),
    #[error("unknown unit `{unit}` in `{input}` (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)")]
    UnknownUnit { unit: String, input: String },
    #[error("`{0}` is not a size")]
    BadNumber(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
    #[error("`{0}` is not a percentage")]
    BadPercentage(String),
    #[error("headroom `{0}` must be in [0%, 100%)")]
    PercentageOutOfRange(String),
    /// A budget's share of the peak out of `(0%, 1000%]`.
    #[error("budget `{0}` must be more than 0% and at most 1000% of the peak")]
    BudgetPercentageOutOfRange(String),
    /// A leading minus sign.
    #[error("`{0}`: a size cannot be negative")]
    Negative(String),
    /// Zero where only a positive size makes sense (a budget).
    #[error("`{0}`: the size must be greater than 0")]
    Zero(String),
    /// A number without a unit where a bare number would be ambiguous
    /// (`--headroom 10`: ten bytes or ten percent?).
    #[error("`{0}` has no unit: write a percentage of the budget (`{0}%`) or a size (`{0}GiB`, `{0}MiB`)")]
    NoUnit(String),
    /// A budget given as a bare number of bytes below a MiB (`--budget 40`:
    /// forty bytes, where forty GiB was meant).
    #[error("`{0}` has no unit and is under a MiB as bytes: write a size (`{0}GiB`, `{0}GB`) or a share of the peak (`{0}%`)")]
    BareBudget(String),
    /// A device's memory given as a bare number of bytes below a MiB, or
    /// as a percentage (of nothing: it is the whole).
    #[error("`{0}` is not a device's memory: write a size (`80GiB`, `79.6GB`)")]
    NotDeviceMemory(String),
}

/// Parses `80GiB`, `79.6GB`, `512MiB`, `1.5TB`, `4096` (bytes). Decimal units
/// (KB, MB, GB, TB) are powers of 10, binary ones (KiB … TiB) powers of 2.
/// Units are case-insensitive; a bare `G` or `M` is refused as ambiguous.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    if t.starts_with('-') {
        return Err(SizeError::Negative(s.to_owned()));
    }
    if number.is_empty() {
        return Err(SizeError::NoNumber(s.to_owned()));
    }
    let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => {
            return Err(SizeError::UnknownUnit {
                unit: unit.to_owned(),
                input: s.to_owned(),
            })
        }
    };
    let bytes = if number.contains('.') {
        let n: f64 = number
            .parse()
            .map_err(|_| SizeError::BadNumber(s.to_owned()))?;
        let b = (n * multiplier as f64).round();
        if !b.is_finite() || b >= u64::MAX as f64 {
            return Err(SizeError::TooLarge(s.to_owned()));
        }
        b as u64
    } else {
        let n: u64 = number
            .parse()
            .map_err(|_| SizeError::BadNumber(s.to_owned()))?;
        n.checked_mul(multiplier)
            .ok_or_else(|| SizeError::TooLarge(s.to_owned()))?
    };
    Ok(bytes)
}

/// [`parse_size`] for sizes that must be positive (a budget): `0` is refused.
pub fn parse_positive_size(s: &str) -> Result<u64, SizeError> {
    match parse_size(s)? {
        0 => Err(SizeError::Zero(s.to_owned())),
        bytes => Ok(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("79.6GB"), Ok(79_600_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2 gib"), Ok(2 << 30));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert!(parse_size("80G").is_err());
        assert_eq!(parse_size("-1GB"), Err(SizeError::Negative("-1GB".into())));
        assert_eq!(parse_positive_size("0"), Err(SizeError::Zero("0".into())));
        assert_eq!(
            parse_positive_size("0GiB"),
            Err(SizeError::Zero("0GiB".into()))
        );
        assert_eq!(parse_positive_size("1KiB"), Ok(1024));
        assert!(parse_size("GB").is_err());
        assert!(parse_size("99999999999999999999TB").is_err());
    }

    #[test]
    fn size_errors_say_what_to_write() {
        let msg = |s: &str| parse_size(s).unwrap_err().to_string();
        assert_eq!(
            msg("GB"),
            "`GB` is not a size (try 80GiB, 79.6GB, 512MiB or bytes)"
        );
        assert_eq!(
            msg("80G"),
            "unknown unit `G` in `80G` (use B, KB, MB, GB, TB or KiB, MiB, GiB, TiB)"
        );
        assert_eq!(msg("1.2.3GB"), "`1.2.3GB` is not a size");
        assert_eq!(
            msg("99999999999999999999TB"),
            "`99999999999999999999TB` is not a size"
        );
        assert_eq!(msg("99999999TB"), "`99999999TB` is too large");
        assert_eq!(msg("-5GiB"), "`-5GiB`: a size cannot be negative");
        assert_eq!(
            SizeError::NoUnit("10".into()).to_string(),
            "`10` has no unit: write a percentage of the budget (`10%`) or a size (`10GiB`, `10MiB`)"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(19683964), "18.8 MiB");
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
        assert_eq!(percent(1, 3), "33.3%");
        assert_eq!(percent(1, 0), "0%");
        assert_eq!(human_duration_us(1500.0), "1.50 ms");
        assert_eq!(human_duration_us(90e6), "1.5 min");
    }
}
