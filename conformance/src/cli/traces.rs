//! `oncecheck traces` and `oncecheck corpus`: model paths written as ITF trace files, and the
//! regression corpus checked against the model, regenerated, or its walks written out.
//!
//! Invariant: a corpus is only written into a directory that holds its manifest.

use super::args::TracesArgs;
use super::bad_input;
use crate::check::models;
use crate::report::terminal::note;
use std::process::ExitCode;

/// `oncecheck traces`: every job's trace files written into `--out`.
pub fn traces(args: TracesArgs) -> ExitCode {
    let TracesArgs {
        model,
        variant,
        bounds,
        out,
        count,
        seed,
    } = args;
    let jobs = match models::resolve(Some(&model), variant.as_deref(), &bounds) {
        Ok(jobs) => jobs,
        Err(error) => return bad_input(error),
    };
    if let Err(error) = models::prepare_directory(&out) {
        return bad_input(format!("cannot write traces to {}: {error}", out.display()));
    }
    let options = crate::check::traces::ExportOptions {
        paths_count: count,
        seed,
        ..Default::default()
    };
    let mut total = 0;
    for job in &jobs {
        match models::export_traces(job, &out, &options) {
            Ok(Ok(files)) => {
                crate::report::terminal::note_raw(format!(
                    "{}/{}: {} traces",
                    job.model,
                    job.variant,
                    files.len()
                ));
                total += files.len();
            }
            Ok(Err(error)) => {
                return bad_input(format!("cannot write traces to {}: {error}", out.display()))
            }
            Err(error) => return bad_input(error),
        }
    }
    println!("wrote {total} traces to {}", out.display());
    ExitCode::SUCCESS
}

pub fn corpus(
    directory: &std::path::Path,
    write: bool,
    walks_out: Option<&std::path::Path>,
) -> ExitCode {
    use crate::check::traces;
    // A corpus is a directory with its manifest: without one there is nothing to check against
    // and nowhere it is safe to write (a relative --dir run from elsewhere names a stranger's
    // directory).
    if !directory.is_dir() {
        let here = std::env::current_dir()
            .map(|path| path.display().to_string())
            .unwrap_or_else(|_| "the working directory".to_string());
        return bad_input(format!(
            "no corpus directory {} (from {here}): run from the repository root or pass --dir",
            directory.display()
        ));
    }
    if let Err(error) = traces::read_manifest(directory) {
        return bad_input(format!(
            "{error}; every corpus directory holds one (`{{\"model\": MODEL, \"walks\": []}}` at least)"
        ));
    }
    if write {
        return match traces::write_corpus(directory) {
            Ok(summary) => {
                println!(
                    "wrote the corpus in {}: {}",
                    directory.display(),
                    summary.join("; ")
                );
                ExitCode::SUCCESS
            }
            Err(error) => bad_input(error),
        };
    }
    if let Some(out) = walks_out {
        return match traces::write_walks(directory, out) {
            Ok(files) => {
                println!("wrote {} walks to {}", files.len(), out.display());
                ExitCode::SUCCESS
            }
            Err(error) => bad_input(error),
        };
    }
    match traces::check_corpus(directory) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for problem in &problems {
                println!("FAIL {problem}");
            }
            note(format!("{} disagreements between the corpus in {} and the model; `oncecheck corpus --dir {} --write` regenerates it", problems.len(), directory.display(), directory.display()));
            ExitCode::from(1)
        }
    }
}
