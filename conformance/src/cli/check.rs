//! `oncecheck check` and `oncecheck merge`: the model checks with their outputs (the text
//! report, `--json`, `--diagrams`, `--html`, `--junit`), and the shards of a check joined.
//!
//! Invariant: every output is prepared (its directory or file writable) before any checking
//! starts, so an unusable path is bad input found in a second, not after the run.

use super::args::CheckArgs;
use super::bad_input;
use crate::check::merge::Itfs;
use crate::check::models::{self, Job};
use crate::report::terminal::note;
use indicatif::{ProgressBar, ProgressStyle};
use oncecheck_model::check::{CheckOptions, CheckReport, SimulationOptions, SpecError};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `oncecheck check`: the options checked and every output prepared before any checking starts,
/// then the runs.
pub fn check(args: CheckArgs) -> ExitCode {
    let CheckArgs {
        model,
        variant,
        bounds,
        threads,
        json,
        timeout_secs,
        diagrams,
        html,
        states_max,
        memory_max_mb,
        spill_dir,
        disk_max_mb,
        simulate,
        seed,
        samples,
        depth,
        junit,
        shard,
        symmetry,
        partial_order,
        safety_only,
        progress_secs,
    } = args;
    if model.is_none() && !bounds.is_empty() {
        return bad_input(crate::check::model_facts::bound_without_a_model(&bounds));
    }
    let (samples, depth) = (samples.unwrap_or(1000), depth.unwrap_or(200));
    let jobs = match models::resolve(model.as_deref(), variant.as_deref(), &bounds) {
        Ok(jobs) => jobs,
        Err(error) => return bad_input(error),
    };
    if let Err(message) = prepare_outputs(diagrams.as_deref(), html.as_deref(), junit.as_deref()) {
        return bad_input(message);
    }
    let spill_parent = spill_dir.unwrap_or_else(std::env::temp_dir);
    let spill = match crate::check::spill::DirectorySpill::create(&spill_parent) {
        Ok(spill) => spill,
        Err(error) => {
            return bad_input(format!(
                "cannot spill the search frontier into {}: {error}",
                spill_parent.display()
            ))
        }
    };
    let memory_bytes_max = memory_max_mb.saturating_mul(1024 * 1024);
    let options = CheckOptions {
        threads,
        timeout_secs_max: timeout_secs,
        states_max,
        memory_bytes_max: Some(memory_bytes_max),
        memory_probe: Some(models::resident_bytes),
        frontier_bytes_max: Some(memory_bytes_max / 4),
        spill: Some(std::sync::Arc::new(spill)),
        disk_bytes_max: disk_max_mb.map(|mib| mib.saturating_mul(1024 * 1024)),
        shard,
        symmetry,
        partial_order,
        liveness: !safety_only,
        ..CheckOptions::default()
    };
    let simulation = simulate.then(|| {
        let seed = seed.unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            now.as_nanos() as u64
        });
        note(format!("simulating with seed {seed}: {samples} walks of at most {depth} steps per variant (--seed {seed} repeats this run)"));
        SimulationOptions {
            seed,
            samples,
            depth_max: depth,
        }
    });
    let outputs = Outputs {
        json,
        diagrams: diagrams.as_deref(),
        html: html.as_deref(),
        junit: junit.as_deref(),
        progress_secs,
    };
    // At the CI bounds, each variant's named bound sets run too (S6: the reaches the CI
    // bounds miss); a simulation reaches nothing it could call unreached.
    let jobs = if simulation.is_none() {
        models::with_bound_sets(jobs)
    } else {
        jobs
    };
    run_checks(&jobs, &options, simulation.as_ref(), &outputs)
}

/// Makes sure every output of `check` can be written before any checking starts: an unusable
/// path is bad input found in a second, not after the run.
fn prepare_outputs(
    diagrams: Option<&std::path::Path>,
    html: Option<&std::path::Path>,
    junit: Option<&std::path::Path>,
) -> Result<(), String> {
    if let Some(directory) = diagrams {
        models::prepare_directory(directory).map_err(|error| {
            format!("cannot write diagrams to {}: {error}", directory.display())
        })?;
    }
    if let Some(directory) = html {
        models::prepare_directory(directory).map_err(|error| {
            format!(
                "cannot write the HTML report to {}: {error}",
                directory.display()
            )
        })?;
    }
    if let Some(file) = junit {
        crate::report::junit::prepare_file(file).map_err(|error| {
            format!(
                "cannot write the JUnit report to {}: {error}",
                file.display()
            )
        })?;
    }
    Ok(())
}

/// Writes the JUnit report, then says in one line each what --junit, --diagrams and --html wrote.
fn finish_outputs(
    reports: &[oncecheck_model::check::CheckReport],
    outputs: &Outputs,
    diagrams_written: usize,
    pages_written: usize,
) -> Result<(), String> {
    if let Some(file) = outputs.junit {
        let document = crate::report::junit::check_document(reports);
        std::fs::write(file, document).map_err(|error| {
            format!(
                "cannot write the JUnit report to {}: {error}",
                file.display()
            )
        })?;
        let cases: usize = reports.iter().map(|report| report.properties.len()).sum();
        note(format!(
            "wrote the JUnit report to {} ({} test suites, {cases} test cases)",
            file.display(),
            reports.len()
        ));
    }
    if let Some(directory) = outputs.diagrams {
        note(format!(
            "wrote {diagrams_written} sequence diagrams to {}",
            directory.display()
        ));
    }
    if let Some(directory) = outputs.html {
        note(format!(
            "wrote the HTML report to {} ({pages_written} pages)",
            directory.join("index.html").display()
        ));
    }
    Ok(())
}

/// Where `check` writes besides the human report.
struct Outputs<'a> {
    /// One JSON document on stdout instead of the human report.
    json: bool,
    diagrams: Option<&'a std::path::Path>,
    html: Option<&'a std::path::Path>,
    junit: Option<&'a std::path::Path>,
    /// Off a terminal, seconds between two progress lines (0: none).
    progress_secs: u64,
}

/// What the checks of a run found and wrote so far.
#[derive(Default)]
struct Checked {
    reports: Vec<CheckReport>,
    /// Per report of a sharded run, the ITF trace behind each of its traces.
    shard_itfs: Vec<Itfs>,
    /// The reports with an HTML page, for the index.
    html_reports: Vec<CheckReport>,
    diagrams_written: usize,
}

/// Checks every job, writing each one's outputs as it ends, then what spans the run (the
/// reach over every run, the JUnit report, the JSON document or the summary line).
fn run_checks(
    jobs: &[Job],
    options: &CheckOptions,
    simulation: Option<&SimulationOptions>,
    outputs: &Outputs,
) -> ExitCode {
    let run = crate::report::run_info::RunInfo::now();
    let mut all_match = true;
    let mut checked = Checked::default();
    for job in jobs {
        let report = match check_job(
            job,
            options,
            simulation,
            outputs.progress_secs,
            &mut checked.shard_itfs,
        ) {
            Ok(report) => report,
            Err(error) => return bad_input(error),
        };
        // A shard's verdicts are of its part: `merge` decides; the shard only says it ran.
        all_match &= options.shard.is_some() || report.matches_expectations();
        all_match &= report.stopped.is_none();
        if let Some(line) = models::stop_line(&report) {
            note(line);
        }
        if let Err(message) = write_job_outputs(job, &report, outputs, &run, &mut checked) {
            return bad_input(message);
        }
        if !outputs.json {
            if let Err(error) = write_text_report(job, &report) {
                return bad_input(format!("cannot write the report: {error}"));
            }
        }
        checked.reports.push(report);
    }
    if let Err(message) = finish_run(jobs, checked, options, simulation, outputs) {
        return bad_input(message);
    }
    if all_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// One job's check (exhaustive, simulated, or a shard), with a spinner naming its progress; a
/// shard's traces as ITF go to `shard_itfs`.
fn check_job(
    job: &Job,
    options: &CheckOptions,
    simulation: Option<&SimulationOptions>,
    progress_secs: u64,
    shard_itfs: &mut Vec<Itfs>,
) -> Result<CheckReport, SpecError> {
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
    bar.enable_steady_tick(Duration::from_millis(120));
    let label = match job.bound_set {
        Some(set) => format!("{}/{} (bound set `{set}`)", job.model, job.variant),
        None => format!("{}/{}", job.model, job.variant),
    };
    // Where stderr is no terminal (a CI log, a file), the spinner draws nothing: the same
    // message goes out as a plain line every `--progress-secs` instead.
    let plain_interval = bar
        .is_hidden()
        .then_some(progress_secs)
        .filter(|secs| *secs > 0)
        .map(Duration::from_secs);
    let mut last_plain = Duration::ZERO;
    let mut last = (0usize, Duration::ZERO);
    let mut on_progress = |progress: oncecheck_model::check::Progress| {
        if let Some(property) = progress.deciding {
            // One line per liveness property of a run that has taken the interval already,
            // however soon after the last line: its analysis may take minutes and prints
            // nothing more. A run shorter than the interval prints none, as before.
            let message = format!(
                "{label}: deciding {property} over {} unique states and {} edges",
                progress.unique_states, progress.states
            );
            match plain_interval {
                Some(interval) if progress.elapsed >= interval => {
                    eprintln!("{message} ({:.0} s)", progress.elapsed.as_secs_f64());
                }
                Some(_) => {}
                None => bar.set_message(message),
            }
            return;
        }
        // The liveness exploration, which follows the safety search, counts from zero again.
        let rate = progress.states.saturating_sub(last.0) as f64
            / progress
                .elapsed
                .saturating_sub(last.1)
                .as_secs_f64()
                .max(1e-3);
        last = (progress.states, progress.elapsed);
        let message = format!(
            "{label}: {} states, {} unique, {:.0} states/s, depth {}",
            progress.states, progress.unique_states, rate, progress.max_depth
        );
        if let Some(interval) = plain_interval {
            if progress.elapsed.saturating_sub(last_plain) >= interval {
                last_plain = progress.elapsed;
                eprintln!("{message} ({:.0} s)", progress.elapsed.as_secs_f64());
            }
        } else {
            bar.set_message(message);
        }
    };
    let report = match (simulation, options.shard) {
        (_, Some(_)) => crate::check::merge::run_shard(job, options, simulation, &mut on_progress)
            .map(|(report, itfs)| {
                shard_itfs.push(itfs);
                report
            }),
        (Some(simulation), None) => {
            models::simulate_job(job, options, simulation, &mut on_progress)
        }
        (None, None) => models::run_job(job, options, &mut on_progress),
    };
    bar.finish_and_clear();
    report
}

/// A job's diagrams and HTML page, with the index over every page so far. Pages and diagrams
/// are one per (model, variant): the CI bounds' run, not a bound set's.
fn write_job_outputs(
    job: &Job,
    report: &CheckReport,
    outputs: &Outputs,
    run: &crate::report::run_info::RunInfo,
    checked: &mut Checked,
) -> Result<(), String> {
    let diagrams = outputs.diagrams.filter(|_| job.bound_set.is_none());
    let html = outputs.html.filter(|_| job.bound_set.is_none());
    if let Some(directory) = diagrams {
        let files = models::write_diagrams(report, directory).map_err(|error| {
            format!("cannot write diagrams to {}: {error}", directory.display())
        })?;
        checked.diagrams_written += files.len();
    }
    if let Some(directory) = html {
        let detail = models::page_detail(job, report).map_err(|error| error.to_string())?;
        checked.html_reports.push(report.clone());
        crate::report::html::write_page(directory, report, &detail)
            .and_then(|_| {
                crate::report::html::write_index(
                    directory,
                    &checked.html_reports.iter().collect::<Vec<_>>(),
                    run,
                )
            })
            .map_err(|error| {
                format!(
                    "cannot write the HTML report to {}: {error}",
                    directory.display()
                )
            })?;
    }
    Ok(())
}

/// A job's human report on stdout: its bound set, its verdicts, the reaches it left unreached.
fn write_text_report(job: &Job, report: &CheckReport) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Some(set) = models::bound_set_of(job) {
        writeln!(
            out,
            "bound set `{}` of {}/{} (for the reach of {}):",
            set.name,
            job.model,
            job.variant,
            set.reaches.join(", ")
        )?;
    }
    models::write_human(report, &mut out)?;
    crate::check::reach::run_lines(report)
        .iter()
        .try_for_each(|line| writeln!(out, "{line}"))
}

/// What spans the run: the reach over every run (text, exhaustive), the JUnit report and the
/// notes of what was written, then the JSON document or the summary line.
fn finish_run(
    jobs: &[Job],
    checked: Checked,
    options: &CheckOptions,
    simulation: Option<&SimulationOptions>,
    outputs: &Outputs,
) -> Result<(), String> {
    let cannot_write = |error: std::io::Error| format!("cannot write the report: {error}");
    let runs: Vec<_> = jobs.iter().zip(&checked.reports).collect();
    let stdout = std::io::stdout();
    if !outputs.json && simulation.is_none() {
        let mut out = stdout.lock();
        writeln!(
            out,
            "\nreach over every run (CI bounds and bound sets): the sometimes partners of each always"
        )
        .and_then(|_| {
            crate::check::reach::summary_lines(&runs)
                .iter()
                .try_for_each(|line| writeln!(out, "  {line}"))
        })
        .map_err(cannot_write)?;
    }
    finish_outputs(
        &checked.reports,
        outputs,
        checked.diagrams_written,
        checked.html_reports.len(),
    )?;
    if outputs.json {
        let mut out = stdout.lock();
        let mut document = if options.shard.is_some() {
            let pairs: Vec<_> = checked
                .reports
                .iter()
                .cloned()
                .zip(checked.shard_itfs)
                .collect();
            crate::check::merge::shard_document(&pairs)
        } else {
            models::json_document(&checked.reports)
        };
        crate::check::reach::annotate(&mut document, &runs);
        serde_json::to_writer(&mut out, &document)
            .map_err(std::io::Error::from)
            .and_then(|_| writeln!(out))
            .map_err(cannot_write)
    } else {
        let outcomes: Vec<_> = checked
            .reports
            .iter()
            .map(|report| (report, crate::check::model_facts::outcome_of(report)))
            .collect();
        let summary = crate::report::verdict_words::summary(&outcomes);
        writeln!(stdout.lock(), "{summary}").map_err(cannot_write)
    }
}

/// `oncecheck merge`: the shards of each run joined, printed as `check` prints a run.
pub fn merge(files: &[PathBuf], json: bool, html: Option<&std::path::Path>) -> ExitCode {
    if let Some(directory) = html {
        if let Err(error) = models::prepare_directory(directory) {
            return bad_input(format!(
                "cannot write the HTML report to {}: {error}",
                directory.display()
            ));
        }
    }
    let merged = match crate::check::merge::merge_files(files) {
        Ok(merged) => merged,
        Err(error) => return bad_input(error),
    };
    if let Some(directory) = html {
        if let Err(error) = crate::check::merge::write_html(directory, &merged) {
            return bad_input(format!(
                "cannot write the HTML report to {}: {error}",
                directory.display()
            ));
        }
    }
    let reports: Vec<_> = merged.into_iter().map(|run| run.report).collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for report in &reports {
        if let Some(line) = models::stop_line(report) {
            note(line);
        }
        if !json {
            if let Err(error) = models::write_human(report, &mut out) {
                return bad_input(format!("cannot write the report: {error}"));
            }
        }
    }
    if json {
        let written = serde_json::to_writer(&mut out, &models::json_document(&reports))
            .map_err(std::io::Error::from)
            .and_then(|_| writeln!(out));
        if let Err(error) = written {
            return bad_input(format!("cannot write the report: {error}"));
        }
    }
    if reports.iter().all(|report| report.matches_expectations()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
