//! Latency samples and the throughput of a run. Samples are kept whole (one `u32` of
//! microseconds each, a few hundred KB for the longest documented run), so percentiles are exact.

use std::time::Duration;

#[derive(Debug, Default, Clone)]
pub struct Latencies {
    micros: Vec<u32>,
}

impl Latencies {
    pub fn record(&mut self, took: Duration) {
        self.micros
            .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
    }

    pub fn extend(&mut self, other: Latencies) {
        self.micros.extend(other.micros);
    }

    pub fn count(&self) -> usize {
        self.micros.len()
    }

    /// The `fraction` quantile (nearest rank), None without samples.
    pub fn quantile(&self, fraction: f64) -> Option<Duration> {
        if self.micros.is_empty() {
            return None;
        }
        let mut sorted = self.micros.clone();
        sorted.sort_unstable();
        let rank = ((fraction * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        Some(Duration::from_micros(u64::from(sorted[rank - 1])))
    }

    /// `p50 X ms, p99 Y ms (N samples)`.
    pub fn summary(&self) -> String {
        match (self.quantile(0.50), self.quantile(0.99)) {
            (Some(p50), Some(p99)) => format!(
                "p50 {:.1} ms, p99 {:.1} ms ({} samples)",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3,
                self.count()
            ),
            _ => "no samples".to_string(),
        }
    }
}

/// `count` things over `took`, per second.
pub fn per_second(count: u64, took: Duration) -> f64 {
    count as f64 / took.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut latencies = Latencies::default();
        for millis in 1..=100 {
            latencies.record(Duration::from_millis(millis));
        }
        assert_eq!(latencies.quantile(0.50), Some(Duration::from_millis(50)));
        assert_eq!(latencies.quantile(0.99), Some(Duration::from_millis(99)));
        assert_eq!(latencies.quantile(1.0), Some(Duration::from_millis(100)));
        assert_eq!(Latencies::default().quantile(0.5), None);
    }
}
