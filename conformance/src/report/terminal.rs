//! How `oncecheck` writes to a terminal or to a pipe whose reader may leave early
//! (`oncecheck check | head -1`).
//!
//! Invariants: a reader that goes away ends a report command the way it ends `cat` or `grep`
//! (killed by SIGPIPE, which a shell shows as status 141), never with a panic or the bad-input
//! status 2; the Explorer, a server, keeps serving when its stderr goes away.

use std::fmt::Display;
use std::io::Write;

/// Lets SIGPIPE end the process, as it ends C tools: Rust ignores the signal at start-up, so a
/// write to a closed pipe fails instead and `println!` panics on it.
///
/// Only for commands whose pipes are their terminal output: sockets are unaffected (the
/// standard library and tokio send with `MSG_NOSIGNAL` on Linux), and the replays' databases
/// are reached over TCP.
pub fn end_when_the_reader_leaves() {
    #[cfg(unix)]
    {
        extern "C" {
            fn signal(signum: std::os::raw::c_int, handler: usize) -> usize;
        }
        const SIGPIPE: std::os::raw::c_int = 13;
        const SIG_DFL: usize = 0;
        // SAFETY: `signal` with SIG_DFL installs no handler code, only the default action, and
        // runs before any thread is started.
        unsafe {
            signal(SIGPIPE, SIG_DFL);
        }
    }
}

/// One line on stderr, prefixed `oncecheck: `. A closed stderr loses the line instead of
/// panicking (eprintln! would), so a long-running server carries on.
pub fn note(message: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "oncecheck: {message}");
}

/// One line on stderr as given.
pub fn note_raw(message: impl Display) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}
