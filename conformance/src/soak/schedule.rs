//! The fault schedule of a run: at which point of its progress (ops or keys answered) each
//! fault strikes. Drawn from the run's seed, so a seed reproduces the schedule; the interleaving
//! around it is the machine's.

use oncecheck_model::trace::SplitMix64;

/// A fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the relay process, then a restart.
    Kill,
    /// The backend stops answering for the stall's length.
    Stall,
    /// The database shuts down and starts again.
    Restart,
}

/// `(progress, fault)` pairs in progress order: each fault at a point drawn uniformly from the
/// middle 90% of `total`, so none falls before the first answer or after the last.
pub fn draw(seed: u64, total: u64, faults: &[(Fault, u32)]) -> Vec<(u64, Fault)> {
    let mut random = SplitMix64::new(seed ^ 0x5eed_fa17);
    let low = total / 20;
    let span = (total - low - total / 20).max(1);
    let mut points: Vec<(u64, Fault)> = faults
        .iter()
        .flat_map(|&(fault, count)| (0..count).map(move |_| fault))
        .map(|fault| (low + random.next_u64() % span, fault))
        .collect();
    points.sort_by_key(|&(point, _)| point);
    points
}

/// The seed printed and used: the one given, else the clock's nanoseconds.
pub fn seed_or_clock(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_nanos() as u64)
            .unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_inside_the_middle_of_the_run() {
        let faults = [(Fault::Kill, 20), (Fault::Stall, 4)];
        let schedule = draw(7, 100_000, &faults);
        assert_eq!(schedule, draw(7, 100_000, &faults));
        assert_ne!(schedule, draw(8, 100_000, &faults));
        assert_eq!(schedule.len(), 24);
        assert_eq!(
            schedule
                .iter()
                .filter(|(_, fault)| *fault == Fault::Kill)
                .count(),
            20
        );
        assert!(schedule
            .iter()
            .all(|&(point, _)| (5_000..95_000).contains(&point)));
        assert!(schedule.windows(2).all(|pair| pair[0].0 <= pair[1].0));
    }
}
