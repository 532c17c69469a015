//! Tests of the checker itself on the relay model (the largest): the search is deterministic
//! across threads, its counts are consistent, limits stop it with `unknown`, and simulation is
//! reproducible and never claims a property holds.

use super::*;
use crate::relay::RelayModel;
use crate::trace::{from_itf, to_itf, TraceMeta};
use std::sync::Arc;

fn relay(variant: &str, overrides: &[(&str, u32)]) -> RelayModel {
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    let bounds = RelayModel::resolve_bounds(variant, &overrides).unwrap();
    RelayModel::build(variant, &bounds).unwrap()
}

fn same_results(left: &CheckReport, right: &CheckReport) {
    assert_eq!(left.unique_states, right.unique_states);
    assert_eq!(left.states, right.states);
    assert_eq!(left.states_per_depth, right.states_per_depth);
    assert_eq!(left.action_coverage, right.action_coverage);
    for (one, other) in left.properties.iter().zip(&right.properties) {
        assert_eq!((one.name, one.verdict), (other.name, other.verdict));
        assert_eq!(one.trace, other.trace, "{}", one.name);
        assert_eq!(one.lasso_start, other.lasso_start, "{}", one.name);
        assert_eq!(one.bound_cut_states, other.bound_cut_states, "{}", one.name);
    }
    assert_eq!(
        left.liveness.map(|run| (run.unique_states, run.edges)),
        right.liveness.map(|run| (run.unique_states, run.edges))
    );
}

#[test]
fn threads_change_nothing_but_the_time() {
    for variant in ["counter-only", "mixed"] {
        let one = run(relay(variant, &[]), &CheckOptions::default(), &mut |_| {});
        let two = run(
            relay(variant, &[]),
            &CheckOptions {
                threads: 2,
                ..CheckOptions::default()
            },
            &mut |_| {},
        );
        assert!(one.complete && two.complete);
        same_results(&one, &two);
    }
}

#[test]
fn a_frontier_spilled_past_a_tiny_budget_changes_nothing() {
    // Blocks of 4 KiB, every one beyond the first two spilled: the order the search reads its
    // states in, and with it every count and shortest trace, is the one it keeps in memory.
    // `fixed` without a lost response (59,658 states, not the CI bounds' 532,650): still
    // thousands of spilled blocks, at a ninth of the test's time. Liveness off: with it, one
    // exploration decides everything (its spilling is the next tests'); the safety search runs
    // alone only when that exploration is stopped (run_with_paths).
    let safety_only = CheckOptions {
        liveness: false,
        ..CheckOptions::default()
    };
    for (variant, overrides) in [
        ("counter-only", &[][..]),
        ("fixed", &[("lost_responses_max", 0)][..]),
    ] {
        let in_memory = run(relay(variant, overrides), &safety_only, &mut |_| {});
        for threads in [1, 2] {
            let store = MemorySpill::new();
            let spilled = run(
                relay(variant, overrides),
                &CheckOptions {
                    threads,
                    frontier_bytes_max: Some(16 << 10),
                    spill: Some(store.clone()),
                    ..safety_only.clone()
                },
                &mut |_| {},
            );
            assert!(
                store.puts() > 100,
                "{variant}: {} blocks spilled",
                store.puts()
            );
            assert_eq!(
                store.held(),
                0,
                "every spilled block was read back or dropped"
            );
            assert!(spilled.stopped.is_none());
            same_results(&in_memory, &spilled);
        }
    }
}

/// A store whose frontier blocks come back (`take`) but whose blocks cannot be read in place
/// (`read`, what a trace's rebuild does with the parent log): a disk lost after the search.
struct ReadsFail(Arc<MemorySpill>);

impl SpillStore for ReadsFail {
    fn put(&self, bytes: &[u8]) -> std::io::Result<u64> {
        self.0.put(bytes)
    }
    fn read(&self, _id: u64) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::other("the spill directory is gone"))
    }
    fn remove(&self, id: u64) -> std::io::Result<()> {
        self.0.remove(id)
    }
    fn take(&self, id: u64) -> std::io::Result<Vec<u8>> {
        self.0.take(id)
    }
}

#[test]
fn traces_rebuilt_from_a_spilled_parent_log_are_the_ones_kept_in_memory() {
    // `counter-only` violates R1, R2 and R4 and reaches every partner: every trace is rebuilt
    // from the parent log, here from blocks of 4 KiB on the store (all but the newest).
    let safety_only = CheckOptions {
        liveness: false,
        ..CheckOptions::default()
    };
    let in_memory = run(relay("counter-only", &[]), &safety_only, &mut |_| {});
    let store = MemorySpill::new();
    let spilled = run(
        relay("counter-only", &[]),
        &CheckOptions {
            frontier_bytes_max: Some(16 << 10),
            spill: Some(store.clone()),
            ..safety_only.clone()
        },
        &mut |_| {},
    );
    assert!(in_memory
        .properties
        .iter()
        .any(|property| property.verdict == Verdict::Violated));
    assert!(in_memory
        .properties
        .iter()
        .filter(|property| matches!(property.verdict, Verdict::Violated | Verdict::Reached))
        .all(|property| property.trace.is_some()));
    same_results(&in_memory, &spilled);

    // The same run whose store cannot give the log back: the search is not lost, but what it
    // found cannot be shown, so it is reported undecided and the run stopped by the disk.
    let lost = run(
        relay("counter-only", &[]),
        &CheckOptions {
            frontier_bytes_max: Some(16 << 10),
            spill: Some(Arc::new(ReadsFail(MemorySpill::new()))),
            ..safety_only
        },
        &mut |_| {},
    );
    assert_eq!(lost.unique_states, in_memory.unique_states);
    assert!(matches!(
        lost.stopped,
        Some(Stop::Disk {
            os_error: Some(-1),
            ..
        })
    ));
    assert!(!lost.complete);
    for property in &lost.properties {
        assert_eq!(property.verdict, Verdict::Unknown, "{}", property.name);
        assert!(property.trace.is_none(), "{}", property.name);
    }
}

#[test]
fn a_liveness_graph_whose_edges_spill_decides_and_shows_what_it_does_in_memory() {
    // The liveness graph's edges go to the store past the same budget (blocks of 4 KiB here)
    // and are read back by row, and its levels' blocks go and come back as the safety
    // search's do: verdicts, lassos and counts are the in-memory run's. R10's
    // lasso in `counter-only` walks the spilled rows (plain edges, 5 bytes); `fixed` under
    // symmetry is the per-actor quotient (7 bytes, with the renaming).
    for (variant, overrides, symmetry, edge_bytes) in [
        ("counter-only", &[][..], false, 5),
        ("fixed", &[("lost_responses_max", 0)][..], true, 7),
    ] {
        let options = CheckOptions {
            symmetry,
            ..CheckOptions::default()
        };
        let in_memory = run(relay(variant, overrides), &options, &mut |_| {});
        assert!(in_memory.liveness.is_some(), "{variant}: liveness ran");
        let store = MemorySpill::new();
        let spilled = run(
            relay(variant, overrides),
            &CheckOptions {
                frontier_bytes_max: Some(16 << 10),
                spill: Some(store.clone()),
                ..options.clone()
            },
            &mut |_| {},
        );
        let edges = spilled.liveness.map_or(0, |run| run.edges);
        let edge_blocks = edges * edge_bytes / (4 << 10);
        assert!(edge_blocks > 20, "{variant}: {edge_blocks} blocks of edges");
        assert!(
            store.puts() > edge_blocks + 10,
            "{variant}: {} blocks spilled, {edge_blocks} of them edges: the levels spill too",
            store.puts()
        );
        assert_eq!(
            store.held(),
            0,
            "{variant}: the edges' blocks are removed after"
        );
        assert!(
            spilled.stopped.is_none(),
            "{variant}: {:?}",
            spilled.stopped
        );
        same_results(&in_memory, &spilled);
    }
    let counter_only = run(
        relay("counter-only", &[]),
        &CheckOptions::default(),
        &mut |_| {},
    );
    assert!(counter_only
        .properties
        .iter()
        .any(|property| property.lasso_start.is_some()));

    // Spilled edges that cannot be read back: no liveness verdict, the run stopped by the disk.
    let lost = run(
        relay("counter-only", &[]),
        &CheckOptions {
            frontier_bytes_max: Some(16 << 10),
            spill: Some(Arc::new(ReadsFail(MemorySpill::new()))),
            ..CheckOptions::default()
        },
        &mut |_| {},
    );
    assert!(
        matches!(lost.stopped, Some(Stop::Disk { .. })),
        "{:?}",
        lost.stopped
    );
    assert!(!lost.complete);
    assert!(lost.liveness.is_none());
    for property in lost
        .properties
        .iter()
        .filter(|property| property.lasso_start.is_none())
    {
        if counter_only
            .properties
            .iter()
            .any(|other| other.name == property.name && other.lasso_start.is_some())
        {
            assert_eq!(property.verdict, Verdict::Unknown, "{}", property.name);
        }
    }
}

#[test]
fn a_disk_limit_stops_the_run_with_unknown_and_names_itself() {
    // Liveness off: the safety search is the one that spills (see the test above).
    let report = run(
        relay("fixed", &[]),
        &CheckOptions {
            frontier_bytes_max: Some(16 << 10),
            spill: Some(MemorySpill::new()),
            disk_bytes_max: Some(256 << 10),
            liveness: false,
            ..CheckOptions::default()
        },
        &mut |_| {},
    );
    assert_eq!(
        report.stopped,
        Some(Stop::Disk {
            disk_bytes_max: Some(256 << 10),
            spilled_bytes: match report.stopped {
                Some(Stop::Disk { spilled_bytes, .. }) => spilled_bytes,
                _ => 0,
            },
            os_error: None,
        })
    );
    assert!(!report.complete);
    assert!(report
        .properties
        .iter()
        .filter(|property| property.kind == Kind::Always)
        .all(|property| property.verdict == Verdict::Unknown));
    assert!(!report.matches_expectations());
    let stop = Stop::Disk {
        disk_bytes_max: Some(512 << 20),
        spilled_bytes: 500 << 20,
        os_error: None,
    };
    assert_eq!(
        stop.to_string(),
        "the disk limit of 512 MiB (500 MiB of the frontier and parent log spilled)"
    );
    let stop = Stop::Disk {
        disk_bytes_max: None,
        spilled_bytes: 3 << 20,
        os_error: Some(28),
    };
    assert_eq!(
        stop.to_string(),
        "the disk: no space left on the device (3 MiB of the frontier and parent log spilled)"
    );
}

#[test]
fn states_per_depth_and_coverage_account_for_every_state() {
    let report = run(relay("mixed", &[]), &CheckOptions::default(), &mut |_| {});
    assert!(report.complete);
    assert_eq!(
        report.states_per_depth.iter().sum::<usize>(),
        report.unique_states
    );
    assert_eq!(report.max_depth, report.states_per_depth.len() - 1);
    assert!(report.states_per_depth.iter().all(|count| *count > 0));
    // Every generated state but the initial ones came from exactly one fired action.
    let fired: usize = report.action_coverage.values().sum();
    assert_eq!(fired + report.states_per_depth[0], report.states);
    for kind in [
        "WriterSendsRound",
        "ItemApplied",
        "PullerQueries",
        "WriterAddsToCounter",
    ] {
        assert!(
            report
                .action_coverage
                .get(kind)
                .is_some_and(|count| *count > 0),
            "{kind} never fired"
        );
    }
}

#[test]
fn a_trace_is_the_shortest_path_a_plain_search_of_full_states_finds() {
    // An independent breadth-first search over whole states (no fingerprints, no chunks).
    let model = relay("counter-only", &[]);
    let definitions = model.property_defs();
    let r1 = definitions
        .iter()
        .find(|def| def.id == "R1" && def.kind == Kind::Always)
        .unwrap();
    let mut parents: HashMap<crate::relay::RelayState, Option<crate::relay::RelayState>> =
        HashMap::new();
    let mut queue = std::collections::VecDeque::new();
    for state in model.init_states() {
        parents.entry(state.clone()).or_insert_with(|| {
            queue.push_back(state.clone());
            None
        });
    }
    let mut depth_of_first = None;
    while let Some(state) = queue.pop_front() {
        if !(r1.condition)(&model, &state) {
            let mut depth = 0;
            let mut cursor = state.clone();
            while let Some(Some(parent)) = parents.get(&cursor) {
                depth += 1;
                cursor = parent.clone();
            }
            depth_of_first = Some(depth);
            break;
        }
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        for action in actions {
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if !parents.contains_key(&next) {
                parents.insert(next.clone(), Some(state.clone()));
                queue.push_back(next);
            }
        }
    }
    let report = run(
        relay("counter-only", &[]),
        &CheckOptions::default(),
        &mut |_| {},
    );
    let trace = report.property(r1.name).trace.as_ref().unwrap();
    assert_eq!(Some(trace.len()), depth_of_first);
}

#[test]
fn a_state_limit_stops_the_run_with_unknown_but_keeps_what_it_found() {
    // counter-only violates R1 at depth 7, long before its 21,404 states are exhausted.
    let options = CheckOptions {
        states_max: Some(10_000),
        ..CheckOptions::default()
    };
    let report = run(relay("counter-only", &[]), &options, &mut |_| {});
    assert!(!report.complete);
    assert!(
        matches!(
            report.stopped,
            Some(Stop::States {
                states_max: 10_000,
                ..
            })
        ),
        "{:?}",
        report.stopped
    );
    assert!(report.unique_states >= 10_000);
    assert!(report.unique_states < 21_404);
    assert_eq!(report.property("R1 no-skip").verdict, Verdict::Violated);
    assert_eq!(
        report.property("R1 no-skip").trace.as_ref().unwrap().len(),
        8
    );
    let undecided: Vec<&str> = report
        .properties
        .iter()
        .filter(|property| property.verdict == Verdict::Unknown)
        .map(|property| property.name)
        .collect();
    assert!(!undecided.is_empty());
    assert!(report
        .properties
        .iter()
        .all(|property| !matches!(property.verdict, Verdict::Holds | Verdict::Unreached)));
    assert!(!report.matches_expectations());
}

#[test]
fn a_memory_limit_stops_the_run_at_the_first_check() {
    fn always_full() -> Option<u64> {
        Some(u64::MAX)
    }
    let options = CheckOptions {
        memory_bytes_max: Some(1 << 20),
        memory_probe: Some(always_full),
        ..CheckOptions::default()
    };
    let report = run(relay("fixed", &[]), &options, &mut |_| {});
    assert!(matches!(
        report.stopped,
        Some(Stop::Memory {
            memory_bytes_max: 1048576,
            ..
        })
    ));
    assert!(report.unique_states < 505_296);
    assert!(report
        .properties
        .iter()
        .filter(|property| property.kind == Kind::Always)
        .all(|property| property.verdict == Verdict::Unknown));
    assert!(!report.matches_expectations());
    let stop = Stop::Memory {
        memory_bytes_max: 64 << 20,
        resident_bytes: 70 << 20,
        growth_bytes: 0,
    };
    assert_eq!(
        stop.to_string(),
        "the memory limit of 64 MiB (70 MiB resident)"
    );
    let stop = Stop::Memory {
        memory_bytes_max: 64 << 20,
        resident_bytes: 60 << 20,
        growth_bytes: 8 << 20,
    };
    assert_eq!(
        stop.to_string(),
        "the memory limit of 64 MiB (60 MiB resident, 8 MiB about to be allocated)"
    );
}

fn simulation(seed: u64) -> SimulationOptions {
    SimulationOptions {
        seed,
        samples: 400,
        depth_max: 60,
    }
}

#[test]
fn simulation_is_reproducible_from_its_seed_and_never_says_holds() {
    let model = relay("counter-only", &[]);
    let first = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(7),
        &mut |_| {},
    )
    .report;
    let again = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(7),
        &mut |_| {},
    )
    .report;
    let other = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(8),
        &mut |_| {},
    )
    .report;
    assert_eq!(
        first.search,
        Search::Simulation {
            seed: 7,
            samples: 400,
            depth_max: 60
        }
    );
    same_results(&first, &again);
    // Another seed walks other walks (at these bounds both may visit every reachable state).
    assert_ne!(first.action_coverage, other.action_coverage);
    assert!(!first.complete);
    assert_eq!(first.property("R1 no-skip").verdict, Verdict::Violated);
    for report in [&first, &other] {
        for property in &report.properties {
            assert!(
                !matches!(property.verdict, Verdict::Holds | Verdict::Unreached),
                "{}",
                property.name
            );
        }
    }
    // The exhaustive search knows the shortest R1 (7 steps); a walk can only be as short.
    assert!(first.property("R1 no-skip").trace.as_ref().unwrap().len() >= 7);
}

#[test]
fn simulation_of_the_fixed_design_matches_its_expectations_without_deciding_any_always() {
    let model = relay("fixed", &[]);
    let report = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(1),
        &mut |_| {},
    )
    .report;
    for property in &report.properties {
        match property.kind {
            Kind::Always => assert_eq!(property.verdict, Verdict::Unknown, "{}", property.name),
            // A partner the bounds keep out of reach stays undecided; every other is found.
            Kind::Sometimes if property.expected == Verdict::Reached => {
                assert_eq!(property.verdict, Verdict::Reached, "{}", property.name)
            }
            Kind::Sometimes => assert_eq!(property.verdict, Verdict::Unknown, "{}", property.name),
            // A walk never decides liveness.
            Kind::Eventually | Kind::LeadsTo => {
                assert_eq!(property.verdict, Verdict::Unknown, "{}", property.name)
            }
        }
    }
    assert!(report.matches_expectations());
}

#[test]
fn a_simulated_counterexample_exports_and_loads_back_like_any_trace() {
    let model = relay("add-era", &[]);
    let checked = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(3),
        &mut |_| {},
    );
    let path = checked
        .paths
        .get("R1 no-skip")
        .expect("the walks find the seed's R1");
    let meta = TraceMeta {
        kind: "counterexample".into(),
        property: Some("R1 no-skip".into()),
        description: String::new(),
    };
    let loaded =
        from_itf::<RelayModel>(&to_itf(&model, path, &meta)).expect("the trace re-executes");
    assert_eq!(loaded.path.len(), path.len());
    assert_eq!(
        checked
            .report
            .property("R1 no-skip")
            .trace
            .as_ref()
            .unwrap()
            .len(),
        path.len() - 1
    );
}

fn shards_of(count: usize, run: impl Fn(Shard) -> CheckReport) -> Vec<CheckReport> {
    // In reverse, to show the merge does not depend on the order it is given the shards in.
    (0..count)
        .rev()
        .map(|index| run(Shard { index, count }))
        .collect()
}

#[test]
fn four_shards_of_a_seeded_simulation_merge_into_the_single_run() {
    let model = relay("counter-only", &[]);
    let single = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(7),
        &mut |_| {},
    )
    .report;
    let shards = shards_of(4, |shard| {
        let options = CheckOptions {
            shard: Some(shard),
            ..CheckOptions::default()
        };
        simulate(&model, &options, &simulation(7), &mut |_| {}).report
    });
    assert!(shards
        .iter()
        .all(|shard| shard.states > 0 && shard.states < single.states));
    let merged = merge(&shards).unwrap();
    assert_eq!(merged.search, single.search);
    assert_eq!(merged.states, single.states);
    assert_eq!(merged.max_depth, single.max_depth);
    assert_eq!(merged.action_coverage, single.action_coverage);
    assert!(merged.unique_states >= single.unique_states);
    assert_eq!(merged.shard, None);
    for (one, other) in merged.properties.iter().zip(&single.properties) {
        assert_eq!((one.name, one.verdict), (other.name, other.verdict));
        assert_eq!(one.trace, other.trace, "{}", one.name);
    }
    assert_eq!(merged.matches_expectations(), single.matches_expectations());
}

#[test]
fn four_shards_of_an_exhaustive_run_merge_into_its_verdicts_and_shortest_traces() {
    for variant in ["mixed", "counter-only"] {
        let single = run(relay(variant, &[]), &CheckOptions::default(), &mut |_| {});
        let shards = shards_of(4, |shard| {
            let options = CheckOptions {
                shard: Some(shard),
                ..CheckOptions::default()
            };
            run(relay(variant, &[]), &options, &mut |_| {})
        });
        let level = shards[0]
            .shard
            .unwrap()
            .level
            .expect("a level large enough to split");
        assert!(shards
            .iter()
            .all(|shard| shard.shard.unwrap().level == Some(level)));
        // Each shard explores its part below the split level, not the whole space.
        assert!(shards
            .iter()
            .all(|shard| shard.unique_states < single.unique_states));
        let merged = merge(&shards).unwrap();
        assert_eq!(merged.complete, single.complete, "{variant}");
        assert_eq!(
            merged.states_per_depth[..=level],
            single.states_per_depth[..=level]
        );
        if single
            .properties
            .iter()
            .all(|property| property.verdict != Verdict::Unknown)
        {
            assert!(merged.unique_states >= single.unique_states, "{variant}");
        }
        for (one, other) in merged.properties.iter().zip(&single.properties) {
            assert_eq!(
                (one.name, one.verdict),
                (other.name, other.verdict),
                "{variant}"
            );
            assert_eq!(
                one.trace.as_ref().map(Vec::len),
                other.trace.as_ref().map(Vec::len),
                "{variant}: {} is as short as the single run's",
                one.name
            );
        }
        assert!(merged.matches_expectations(), "{variant}");
    }
}

#[test]
fn shards_of_different_runs_or_an_incomplete_set_do_not_merge() {
    let model = relay("counter-only", &[]);
    let shard = |index, count, seed| {
        let options = CheckOptions {
            shard: Some(Shard { index, count }),
            ..CheckOptions::default()
        };
        simulate(&model, &options, &simulation(seed), &mut |_| {}).report
    };
    let missing = merge(&[shard(0, 3, 7), shard(2, 3, 7)]).unwrap_err();
    assert!(missing.0.ends_with("shard 1/3 missing"), "{missing}");
    let twice = merge(&[shard(0, 2, 7), shard(0, 2, 7), shard(1, 2, 7)]).unwrap_err();
    assert!(twice.0.ends_with("shard 0/2 given twice"), "{twice}");
    let other_seed = merge(&[shard(0, 2, 7), shard(1, 2, 8)]).unwrap_err();
    assert!(
        other_seed.0.contains("a shard of another run"),
        "{other_seed}"
    );
    let unsharded = simulate(
        &model,
        &CheckOptions::default(),
        &simulation(7),
        &mut |_| {},
    );
    let not_a_shard = merge(&[unsharded.report]).unwrap_err();
    assert!(
        not_a_shard.0.ends_with("a report that is not a shard"),
        "{not_a_shard}"
    );
}
