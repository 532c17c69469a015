//! What one `oncecheck` run was, for the reports that outlive it (the HTML index): the commit
//! the binary was built from, when the run started (UTC), the command line, and how long it
//! has taken.
//!
//! Invariant: nothing here reads the clock or the environment after [`RunInfo::now`], so every
//! page of one run shows the same facts.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone)]
pub struct RunInfo {
    /// `git describe --always --dirty` at build time (conformance/build.rs), or `unknown`.
    pub commit: &'static str,
    /// The start, as `YYYY-MM-DD HH:MM:SS UTC`.
    pub started_utc: String,
    /// The command line as typed, each argument quoted where a shell would need it.
    pub command: String,
    started: Instant,
}

impl RunInfo {
    pub fn now() -> RunInfo {
        let seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or_default();
        let mut arguments = std::env::args();
        let program = arguments
            .next()
            .map(|path| {
                std::path::Path::new(&path)
                    .file_name()
                    .map(|name| name.to_string_lossy().to_string())
                    .unwrap_or(path)
            })
            .unwrap_or_else(|| "oncecheck".to_string());
        let command = std::iter::once(program)
            .chain(arguments.map(|argument| shell_quoted(&argument)))
            .collect::<Vec<_>>()
            .join(" ");
        RunInfo {
            commit: env!("ONCECHECK_COMMIT"),
            started_utc: utc_text(seconds),
            command,
            started: Instant::now(),
        }
    }

    /// Seconds since the run started.
    pub fn elapsed_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// An argument as a shell would need it to read it back as one word.
fn shell_quoted(argument: &str) -> String {
    let plain = !argument.is_empty()
        && argument
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,@%+".contains(c));
    if plain {
        argument.to_string()
    } else {
        format!("'{}'", argument.replace('\'', "'\\''"))
    }
}

/// Seconds since the Unix epoch as a UTC date and time (the proleptic Gregorian calendar,
/// Howard Hinnant's `civil_from_days`).
pub fn utc_text(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let of_day = seconds % 86_400;
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_quoting() {
        assert_eq!(utc_text(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_text(1_767_225_599), "2025-12-31 23:59:59 UTC");
        assert_eq!(shell_quoted("--bound"), "--bound");
        assert_eq!(shell_quoted("a b"), "'a b'");
        assert_eq!(shell_quoted("it's"), "'it'\\''s'");
    }
}
