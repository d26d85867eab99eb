//! The `engram` command-line tool.
//!
//! Arguments are parsed by clap into raw structs ([`cli`]), validated into what each command
//! needs, and run. Errors carry an exit code: 2 for bad input or arguments (the message names
//! the place), 1 for internal errors. Output goes through `writeln!` (never `println!`, which
//! panics when a reader such as `head` closes the pipe).
#![deny(clippy::print_stdout)]

mod bench;
mod cli;
mod compact;
mod config;
mod conversation_file;
mod count;
mod embeddings;
mod export;
mod memory;
mod models;
mod registry;
mod serve;
mod session;
mod summarizer;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{BenchCommand, Cli, Command};

// mimalloc, not the system's allocator: a sleep or an import allocates and frees millions of
// small strings, and glibc's malloc spent a fifth of a 10k-entry sleep in allocating,
// consolidating and freeing (docs/benchmarks-history.md, "2026-11-23, a fourth machine").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Serve(args) => serve::run(&cli.global, args),
        Command::Mcp(args) => serve::run_mcp(&cli.global, args),
        Command::Count(args) => count::run(&cli.global, args),
        Command::Compact(args) => compact::run(&cli.global, args),
        Command::Models(args) => models::run(&cli.global, args),
        Command::Memory(command) => memory::run(&cli.global, command),
        Command::Session(command) => session::run(&cli.global, command),
        Command::Export { session, output } => {
            export::export(&cli.global, session.as_deref(), output.as_deref())
        }
        Command::Import { file } => export::import(&cli.global, file),
        Command::Summarize {
            file,
            focus,
            max_tokens,
            json,
            summarizer,
        } => summarizer::run(
            &cli.global,
            file.as_deref(),
            focus.as_deref(),
            *max_tokens,
            *json,
            summarizer,
        ),
        Command::Bench(BenchCommand::Count(args)) => bench::run_count(args),
        Command::Bench(BenchCommand::Compact(args)) => bench::run_compact(args),
        Command::Bench(BenchCommand::History(args)) => bench::run_history(args),
        Command::Bench(BenchCommand::Search(args)) => bench::run_search(&cli.global, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if output_closed(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let code = exit_code(&err);
            eprintln!("engram: {}{}", error_chain(&err), hint(&err));
            ExitCode::from(code)
        }
    }
}

/// A problem with what the user gave us (arguments, input, config): exit code 2.
#[derive(Debug)]
pub(crate) struct UserError(pub(crate) String);

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

/// Bails out with a user error (exit code 2).
macro_rules! user_error {
    ($($arg:tt)*) => {
        anyhow::Error::new($crate::UserError(format!($($arg)*)))
    };
}
pub(crate) use user_error;

/// `println!` that returns the error instead of panicking: output into a closed pipe
/// (`engram … | head`) ends the command quietly (see [`output_closed`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use outln;

/// True when the command failed because whoever read its output stopped reading (`| head`):
/// that ends it quietly, as it ends `cat` and `grep`.
fn output_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A request the core refused, its field shown as the flag that set it.
pub(crate) fn flag_error(e: engram::Error) -> anyhow::Error {
    match (e.flag(), e.why()) {
        (Some(flag), Some(why)) => user_error!("{flag}: {why}"),
        _ => user_error!("{e}"),
    }
}

/// What to run next, for the errors whose core message names no command (the core's messages
/// also reach HTTP clients, who have no CLI).
fn hint(err: &anyhow::Error) -> String {
    let Some(engram::Error::NotFound { missing, .. }) =
        err.chain().find_map(|c| c.downcast_ref::<engram::Error>())
    else {
        return String::new();
    };
    match missing {
        engram::Missing::Session { .. } => " (`engram session list` shows them)".into(),
        engram::Missing::Checkpoint { session, .. } => {
            format!(" (`engram session show {session}` lists them)")
        }
        _ => String::new(),
    }
}

fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<UserError>() || cause.is::<engram::InputError>() {
            return 2;
        }
        if let Some(e) = cause.downcast_ref::<engram::Error>() {
            use engram::Error as E;
            return match e {
                // What must be kept does not fit the budget.
                E::CannotFit { .. } | E::NoRoom { .. } => 3,
                // The store, a summarizer or an embedder failed.
                E::Backend(_) | E::NotWorking(_) | E::Summarizer { .. } | E::Embedder { .. } => 1,
                // Bad input or arguments: the conversation, a value, a file, the setup named,
                // what the store holds or does not.
                _ => 2,
            };
        }
    }
    1
}

fn error_chain(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
