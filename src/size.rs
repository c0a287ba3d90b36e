//! Memory sizes as people write them: `80GiB`, `79.6GB`, `512MiB`, `1234`.
//!
//! Binary units (`KiB`, `MiB`, `GiB`, `TiB`) are powers of 1024, decimal ones
//! (`kB`, `MB`, `GB`, `TB`) powers of 1000, a bare number is bytes. Units are
//! case-insensitive and may follow a space. A lone `G`/`M`/`K` is refused
//! because it is ambiguous (an "80G" GPU has 79.6 GiB).

/// Parses a size into bytes (fractions round to the nearest byte).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number = number.replace('_', "");
    if number.is_empty() {
        return Err(format!(
            "`{text}` is not a size; write e.g. 80GiB, 79.6GB, 512MiB or 1234 (bytes)"
        ));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}`: `{number}` is not a number"))?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u @ ("k" | "m" | "g" | "t") => {
            let u = u.to_ascii_uppercase();
            return Err(format!(
                "`{text}`: unit `{u}` is ambiguous; write {u}iB (powers of 1024) or {u}B (powers of 1000)"
            ));
        }
        other => {
            return Err(format!(
                "`{text}`: unknown unit `{other}`; use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB"
            ))
        }
    };
    let bytes = (value * multiplier).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("`{text}` is too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn binary_decimal_and_plain_bytes() {
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("79.6GB"), Ok(79_600_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("1234B"), Ok(1234));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size(" 2tib "), Ok(2 << 40));
        assert_eq!(parse_size("10kB"), Ok(10_000));
        assert_eq!(parse_size("1_000_000"), Ok(1_000_000));
    }

    #[test]
    fn refuses_what_it_cannot_read_with_a_hint() {
        assert!(parse_size("").unwrap_err().contains("not a size"));
        assert!(parse_size("GiB").unwrap_err().contains("not a size"));
        assert!(parse_size("-5GiB").unwrap_err().contains("not a size"));
        assert!(parse_size("80G").unwrap_err().contains("ambiguous"));
        assert!(parse_size("80 furlongs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("1.2.3MB").unwrap_err().contains("not a number"));
        assert!(parse_size("99999999999TiB")
            .unwrap_err()
            .contains("too large"));
    }
}
