//! Parsing and printing of sizes and durations given on the command line.

use std::time::Duration;

const UNITS: [(&str, u64); 5] = [("b", 1), ("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("tib", 1 << 40)];

pub use pmtx_engine::spec::parse_size;

/// Parses a chunk size: a size that is a power of two of at least the
/// smallest chunk the pool layout accepts.
pub fn parse_chunk_size(text: &str) -> Result<u64, String> {
    let size = parse_size(text)?;
    let minimum = pmtx_pm::layout::MIN_CHUNK_SIZE;
    if !size.is_power_of_two() || size < minimum {
        return Err(format!("chunk size {text:?} must be a power of two of at least {}", format_bytes(minimum)));
    }
    Ok(size)
}

/// Parses a duration in (possibly fractional) seconds, `0 < s <= 86400`.
pub fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 =
        text.trim().parse().map_err(|_| format!("invalid duration {text:?}: expected seconds, e.g. 2 or 0.5"))?;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > 86_400.0 {
        return Err(format!("invalid duration {text:?}: must be more than 0 and at most 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a duration with a unit, `90s`, `60m`, `1.5h` (plain numbers are
/// seconds), more than 0 and at most a day.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let (number, factor) = match trimmed.char_indices().last() {
        Some((at, 'h')) => (&trimmed[..at], 3600.0),
        Some((at, 'm')) => (&trimmed[..at], 60.0),
        Some((at, 's')) => (&trimmed[..at], 1.0),
        _ => (trimmed, 1.0),
    };
    let value: f64 =
        number.trim().parse().map_err(|_| format!("invalid duration {text:?}: expected e.g. 90s, 60m or 1.5h"))?;
    let seconds = value * factor;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > 86_400.0 {
        return Err(format!("invalid duration {text:?}: must be more than 0 and at most a day"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `1073741824` -> `1 GiB`, `1536` -> `1.5 KiB`, `100` -> `100 B`.
pub fn format_bytes(bytes: u64) -> String {
    let (name, unit) = UNITS.iter().rev().find(|(_, unit)| bytes >= *unit).copied().unwrap_or(("b", 1));
    let label = match name {
        "b" => return format!("{bytes} B"),
        "kib" => "KiB",
        "mib" => "MiB",
        "gib" => "GiB",
        _ => "TiB",
    };
    if bytes.is_multiple_of(unit) {
        format!("{} {label}", bytes / unit)
    } else {
        format!("{:.2} {label}", bytes as f64 / unit as f64)
    }
}

/// Formats Unix seconds as `YYYY-MM-DD hh:mm:ss UTC`.
pub fn format_unix_time(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rest = seconds % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rest / 3600, rest / 60 % 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("60m"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0m").is_err() && parse_duration("2d").is_err() && parse_duration("25h").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2 mib"), Ok(2 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("10B"), Ok(10));
        for bad in ["", "GiB", "1GB", "1.5GiB", "-1", "1 GiB x", "99999999999999999999", "20000000TiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_chunk_size("3MiB").is_err());
        assert!(parse_chunk_size("4KiB").is_err());
        assert_eq!(parse_chunk_size("2MiB"), Ok(2 << 20));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(1 << 30), "1 GiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(100), "100 B");
        assert_eq!(format_unix_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_unix_time(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_unix_time(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("0.2"), Ok(Duration::from_millis(200)));
        for bad in ["0", "-1", "nan", "inf", "x", "1e9"] {
            assert!(parse_seconds(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
