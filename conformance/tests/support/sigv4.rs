//! Helpers the SigV4 tests share: header lookup and the timestamps of vectors and requests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// The time of a `YYYY-MM-DDTHH:MM:SSZ` timestamp (the vectors' format) or of an
/// `X-Amz-Date` (`YYYYMMDDTHHMMSSZ`).
pub fn parse_timestamp(text: &str) -> SystemTime {
    let text: String = if text.contains('-') {
        text.to_owned()
    } else {
        format!(
            "{}-{}-{}T{}:{}:{}Z",
            &text[0..4],
            &text[4..6],
            &text[6..8],
            &text[9..11],
            &text[11..13],
            &text[13..15]
        )
    };
    let number = |range: std::ops::Range<usize>| -> i64 {
        text[range]
            .parse()
            .unwrap_or_else(|_| panic!("timestamp {text:?}"))
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let (hour, minute, second) = (number(11..13), number(14..16), number(17..19));
    // Days from the civil date (the proleptic Gregorian calendar), March-based years.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).expect("a time after 1970"))
}
