//! The work ledger: what an agent has read, changed, run and left open, derived from its tool
//! events alone, with no model.
//!
//! A summary, by a model or by key lines, says what the agent did in prose and loses the
//! execution frontier: which files were read and edited, which commands failed and whether a
//! later step fixed them, which plan items are done. The ledger keeps them exactly: for each
//! file the last step that read, wrote, edited, deleted or ran it; each command's exit status;
//! each failure and the later step that passed the same command or tests; the agent's own plan
//! items with their latest status. It reads the tool calls and their results in the formats the
//! common agents use (shell tools, structured edit tools, apply-patch, todo and plan tools); an
//! event it does not recognise records nothing rather than a guess.
//!
//! A step is a message's place in the history the ledger was built from (plus the offset the
//! caller gives), so a compaction can say where to read a file's history back.

mod agent_calls;
mod shell;

use std::collections::HashMap;

use crate::message::{Message, Role};

/// What a step did to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileAction {
    /// Read it (`cat`, a view or read tool, a diff).
    Read,
    /// Wrote it whole (a redirection, a write tool), whether or not it existed.
    Written,
    /// Created it.
    Created,
    /// Changed part of it (an edit tool, `sed -i`, a patch).
    Edited,
    /// Deleted it.
    Deleted,
    /// Ran it, as a script or as tests.
    Ran,
}

impl FileAction {
    /// The word the ledger's text uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FileAction::Read => "read",
            FileAction::Written => "written",
            FileAction::Created => "created",
            FileAction::Edited => "edited",
            FileAction::Deleted => "deleted",
            FileAction::Ran => "ran",
        }
    }

    /// True for an action that changes the file.
    pub fn changes(self) -> bool {
        matches!(
            self,
            FileAction::Written | FileAction::Created | FileAction::Edited | FileAction::Deleted
        )
    }
}

/// A file and what the agent last did to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileEntry {
    /// The path as the agent wrote it.
    pub path: String,
    /// The latest action.
    pub action: FileAction,
    /// The step of the latest action.
    pub step: usize,
    /// The step of the latest change, when the agent changed it.
    pub changed: Option<usize>,
}

/// How a command or tool call ended, as its result says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "status", content = "code")]
pub enum Outcome {
    /// It succeeded (exit status 0).
    Ok,
    /// It failed, with its exit status when the result gives one.
    Failed(Option<i32>),
    /// The result says neither (or there is no result yet).
    Unknown,
}

/// One command the agent ran.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CommandRun {
    /// The command line (or the tool and its file, for a structured tool that failed).
    pub command: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Its step.
    pub step: usize,
}

/// A failure the agent saw, and the step that resolved it when one did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// The command (or tool call) that failed.
    pub command: String,
    /// Its exit status, when known.
    pub code: Option<i32>,
    /// The step it failed at (the latest failure of the same command).
    pub step: usize,
    /// The step where the same command or tests passed afterwards.
    pub resolved_at: Option<usize>,
}

/// One item of the agent's own plan or todo list, as its latest update says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanItem {
    /// What the item says.
    pub text: String,
    /// Its status as the agent wrote it (`pending`, `in_progress`, `completed`).
    pub status: String,
}

/// The ledger of a history. It only grows as messages are added: a file's entry moves to its
/// latest action, a failure gains its resolution, the plan is the latest the agent wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Ledger {
    /// Every file the agent named in a recognised event, in the order first seen.
    pub files: Vec<FileEntry>,
    /// Every command run, in order.
    pub commands: Vec<CommandRun>,
    /// The failures seen, in order, each once per command (its latest failure).
    pub failures: Vec<Failure>,
    /// The latest plan or todo list the agent wrote.
    pub plan: Vec<PlanItem>,
    /// How many messages it was built from.
    pub messages: usize,
    #[serde(skip)]
    file_index: HashMap<String, usize>,
    /// Calls waiting for their result: id -> (command key, index into `commands`, is a test run).
    #[serde(skip)]
    pending: HashMap<String, Pending>,
    /// The file an editor tool that names none works on (SWE-agent's `open` then `edit`).
    #[serde(skip)]
    open_file: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    key: String,
    command: Option<usize>,
    tests: bool,
}

/// What one tool call is, as far as the ledger reads it.
#[derive(Debug, Default)]
pub(crate) struct CallEvents {
    /// The shell command line it runs, when it runs one.
    pub(crate) command: Option<String>,
    /// The files it acts on.
    pub(crate) files: Vec<(String, FileAction)>,
    /// The plan it writes, when it is a plan or todo tool.
    pub(crate) plan: Option<Vec<PlanItem>>,
    /// For an editor tool that names no file: it acts on the file opened last.
    pub(crate) on_open_file: Option<FileAction>,
    /// It opens this file for the calls after it.
    pub(crate) opens: Option<String>,
}

impl Ledger {
    /// The ledger of `messages`, their steps counted from `first_step`.
    pub fn of(messages: &[Message], first_step: usize) -> Ledger {
        let mut ledger = Ledger::default();
        ledger.add(messages, first_step);
        ledger
    }

    /// Adds the events of `messages`, which follow what the ledger was built from, their steps
    /// counted from `first_step`.
    pub fn add(&mut self, messages: &[Message], first_step: usize) {
        for (i, message) in messages.iter().enumerate() {
            self.add_message(message, first_step + i);
        }
    }

    /// Adds the events of one message, which follows what the ledger was built from, at
    /// `step`.
    pub fn add_message(&mut self, message: &Message, step: usize) {
        match message.role {
            Role::Assistant => {
                for call in message.tool_calls().unwrap_or_default() {
                    self.call(&call.id, &call.name, &call.arguments, step);
                }
            }
            Role::Tool => {
                if let Some(id) = message.tool_call_id() {
                    let failed_flag =
                        message.extra().get("is_error") == Some(&serde_json::Value::Bool(true));
                    self.result(id, &message.text(), failed_flag, step);
                }
            }
            _ => {}
        }
        self.messages += 1;
    }

    fn call(&mut self, id: &str, name: &str, arguments: &str, step: usize) {
        let Some(events) = agent_calls::read_call(name, arguments) else {
            return;
        };
        let mut files = events.files;
        if let Some(action) = events.on_open_file
            && let Some(open) = &self.open_file
        {
            files.push((open.clone(), action));
        }
        if let Some(opened) = events.opens {
            self.open_file = Some(opened);
        }
        for (path, action) in files.iter().cloned() {
            self.touch(path, action, step);
        }
        if let Some(plan) = events.plan {
            self.plan = plan;
        }
        let (key, command, tests) = match &events.command {
            Some(line) => {
                self.commands.push(CommandRun {
                    command: line.trim().to_owned(),
                    outcome: Outcome::Unknown,
                    step,
                });
                (
                    command_key(line),
                    Some(self.commands.len() - 1),
                    shell::runs_tests(line),
                )
            }
            None => {
                let file = files.first().map_or("", |(p, _)| p.as_str());
                (format!("{name} {file}").trim().to_owned(), None, false)
            }
        };
        self.pending.insert(
            id.to_owned(),
            Pending {
                key,
                command,
                tests,
            },
        );
    }

    fn result(&mut self, id: &str, text: &str, failed_flag: bool, step: usize) {
        let Some(pending) = self.pending.remove(id) else {
            return;
        };
        let outcome = match (agent_calls::exit_status(text), failed_flag) {
            (Some(0), false) => Outcome::Ok,
            (Some(0), true) | (None, true) => Outcome::Failed(None),
            (Some(code), _) => Outcome::Failed(Some(code)),
            // A structured tool's result without an error flag: it did what it was asked.
            (None, false) if pending.command.is_none() => Outcome::Ok,
            (None, false) => Outcome::Unknown,
        };
        if let Some(i) = pending.command {
            self.commands[i].outcome = outcome;
            if outcome == Outcome::Failed(Some(1))
                && shell::answers_by_status(&self.commands[i].command)
            {
                return;
            }
        }
        match outcome {
            Outcome::Failed(code) => {
                let command = match pending.command {
                    Some(i) => self.commands[i].command.clone(),
                    None => pending.key.clone(),
                };
                // The latest failure of a command stands for its earlier ones.
                self.failures
                    .retain(|f| f.resolved_at.is_some() || command_key(&f.command) != pending.key);
                self.failures.push(Failure {
                    command,
                    code,
                    step,
                    resolved_at: None,
                });
            }
            Outcome::Ok => {
                for f in self.failures.iter_mut().filter(|f| f.resolved_at.is_none()) {
                    // The same command passing, or tests passing after tests failed.
                    let same = command_key(&f.command) == pending.key
                        || (pending.tests
                            && shell::runs_tests(&f.command)
                            && covers(&pending.key, &f.command));
                    if same {
                        f.resolved_at = Some(step);
                    }
                }
            }
            Outcome::Unknown => {}
        }
    }

    fn touch(&mut self, path: String, action: FileAction, step: usize) {
        let changed = action.changes().then_some(step);
        match self.file_index.get(&path) {
            Some(&i) => {
                let entry = &mut self.files[i];
                entry.action = action;
                entry.step = step;
                entry.changed = changed.or(entry.changed);
            }
            None => {
                self.file_index.insert(path.clone(), self.files.len());
                self.files.push(FileEntry {
                    path,
                    action,
                    step,
                    changed,
                });
            }
        }
    }

    /// The ledger as data with its text for a model (`{"files", "commands", "failures",
    /// "plan", "messages", "text"}`): what the CLI's `--json`, the REST route and the bindings
    /// hand out.
    pub fn to_document(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        value["text"] = serde_json::Value::String(self.render(usize::MAX));
        value
    }

    /// The failures no later step resolved.
    pub fn open_failures(&self) -> impl Iterator<Item = &Failure> {
        self.failures.iter().filter(|f| f.resolved_at.is_none())
    }

    /// True when it holds nothing its text shows: no file, no failure, no plan (commands that
    /// ran without failing are not shown).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.failures.is_empty() && self.plan.is_empty()
    }

    /// The ledger as text for a model, at most `max_chars` long: the failures still open, the
    /// plan, the files by their latest action (those the agent changed before those it only
    /// read, the newest first, listed in the order first seen), the failures resolved, and how
    /// to read a step back, each while it fits; what is left out is counted.
    pub fn render(&self, max_chars: usize) -> String {
        const HEADER: &str = "[Work ledger]\n";
        const CLOSING: &str =
            "Search the history for a path or a command to read those steps again.";
        // The headings of the failures, the plan and the resolved failures, when they appear.
        const HEADINGS: usize = 60;
        let mut room = max_chars.saturating_sub(HEADER.len() + HEADINGS);
        // A line with its "- " and its newline.
        let mut take = |line: &str| -> bool {
            let fits = line.len() + 3 <= room;
            if fits {
                room -= line.len() + 3;
            }
            fits
        };
        let open: Vec<String> = self
            .open_failures()
            .map(|f| failure_line(f, None))
            .filter(|l| take(l))
            .collect();
        let plan: Vec<String> = self
            .plan
            .iter()
            .map(|p| format!("[{}] {}", p.status, clip(&p.text, 120)))
            .filter(|l| take(l))
            .collect();
        // Files: changed ones first, newest first; then the ones only read, newest first.
        let entry = |f: &FileEntry| match f.changed {
            Some(c) if c != f.step => {
                format!(
                    "{} ({} at {}, changed at {c})",
                    f.path,
                    f.action.as_str(),
                    f.step
                )
            }
            _ => format!("{} ({} at {})", f.path, f.action.as_str(), f.step),
        };
        let mut order: Vec<usize> = (0..self.files.len()).collect();
        order.sort_by_key(|&i| {
            let f = &self.files[i];
            (f.changed.is_none(), std::cmp::Reverse(f.step))
        });
        // Room for the heading and the count of what is left out.
        let mut kept = vec![false; self.files.len()];
        if take("Files (latest action at message): ; 1000 more left out") {
            for i in order {
                kept[i] = take(&(entry(&self.files[i]) + ";"));
            }
        }
        let resolved: Vec<String> = self
            .failures
            .iter()
            .rev()
            .filter_map(|f| f.resolved_at.map(|r| failure_line(f, Some(r))))
            .filter(|l| take(l))
            .collect();
        let closing = take(CLOSING);

        let mut out = String::from(HEADER);
        if !open.is_empty() {
            out.push_str("Failures not yet resolved:\n");
            for l in &open {
                out.push_str(&format!("- {l}\n"));
            }
        }
        if !plan.is_empty() {
            out.push_str("Plan:\n");
            for l in &plan {
                out.push_str(&format!("- {l}\n"));
            }
        }
        let files: Vec<String> = self
            .files
            .iter()
            .zip(&kept)
            .filter(|(_, k)| **k)
            .map(|(f, _)| entry(f))
            .collect();
        if !files.is_empty() {
            out.push_str("Files (latest action at message): ");
            out.push_str(&files.join("; "));
            let left = self.files.len() - files.len();
            if left > 0 {
                out.push_str(&format!("; {left} more left out"));
            }
            out.push('\n');
        }
        if !resolved.is_empty() {
            out.push_str("Failures resolved later:\n");
            for l in resolved.iter().rev() {
                out.push_str(&format!("- {l}\n"));
            }
        }
        if closing {
            out.push_str(CLOSING);
        }
        out.trim_end().to_owned()
    }
}

fn failure_line(f: &Failure, resolved: Option<usize>) -> String {
    let code = f.code.map(|c| format!("exit {c}, ")).unwrap_or_default();
    match resolved {
        Some(r) => format!(
            "`{}` ({code}failed at {}, passed at {r})",
            clip(&f.command, 160),
            f.step
        ),
        None => format!("`{}` ({code}failed at {})", clip(&f.command, 160), f.step),
    }
}

fn clip(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.len() <= max && !text.contains('\n') {
        return line.to_owned();
    }
    let mut end = max.min(line.len());
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// A command's identity for matching a later run: its words, whitespace collapsed, without a
/// leading `cd dir &&`.
fn command_key(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut start = 0;
    while words.get(start) == Some(&"cd") && words.get(start + 2) == Some(&"&&") {
        start += 3;
    }
    words[start.min(words.len())..].join(" ")
}

/// True when the test run `passing` covers the tests `failed` ran: the same test files, or the
/// whole suite (a run that names no file).
fn covers(passing: &str, failed: &str) -> bool {
    let files = |line: &str| -> Vec<String> {
        shell::file_events(line)
            .into_iter()
            .filter(|(_, a)| *a == FileAction::Ran)
            .map(|(p, _)| p)
            .collect()
    };
    let (p, f) = (files(passing), files(failed));
    p.is_empty() || (!f.is_empty() && f.iter().all(|x| p.contains(x)))
}

#[cfg(test)]
mod tests;
