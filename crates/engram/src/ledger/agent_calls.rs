//! The tool calls of the common agents, read for what they do to files and plans: shell tools
//! (a `command` or `cmd` as a line or an argument vector), editor tools (`view`, `create`,
//! `str_replace` on a `path`), Claude Code's `Read`/`Write`/`Edit`/`MultiEdit`/`TodoWrite`,
//! Codex's `apply_patch` and `update_plan`, SWE-agent's `open`/`create`/`edit`, Gemini CLI's
//! `read_file`/`write_file`/`replace`/`write_todos`, and any tool whose name says it reads,
//! writes, edits or deletes the one file its arguments name. Anything else records nothing.

use serde_json::Value;

use super::shell;
use super::{CallEvents, FileAction, PlanItem};

/// What a call of `name` with these arguments (the JSON text the model wrote, or a patch's raw
/// text) does, or `None` when the ledger does not know the tool.
pub(super) fn read_call(name: &str, arguments: &str) -> Option<CallEvents> {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let lower = name.to_ascii_lowercase();
    let lower = lower.rsplit(['.', '/']).next().unwrap_or(&lower);
    let str_arg = |keys: &[&str]| -> Option<String> {
        keys.iter()
            .find_map(|k| args.get(*k).and_then(Value::as_str))
            .map(str::to_owned)
    };
    let file = |action: FileAction| -> Option<CallEvents> {
        let path = str_arg(&[
            "file_path",
            "path",
            "absolute_path",
            "notebook_path",
            "filename",
            "file",
        ])?;
        Some(CallEvents {
            files: vec![(path, action)],
            ..CallEvents::default()
        })
    };
    match lower {
        "apply_patch" | "applypatch" => {
            let text = str_arg(&["input", "patch"]).unwrap_or_else(|| arguments.to_owned());
            let files = patch_files(&text);
            return (!files.is_empty()).then(|| CallEvents {
                files,
                ..CallEvents::default()
            });
        }
        "todowrite" | "write_todos" | "update_plan" | "todo_write" => {
            let list = args
                .get("todos")
                .or_else(|| args.get("plan"))
                .and_then(Value::as_array)?;
            let plan = list
                .iter()
                .filter_map(|item| {
                    let text = ["content", "step", "description", "text", "title"]
                        .iter()
                        .find_map(|k| item.get(*k).and_then(Value::as_str))?;
                    let status = item
                        .get("status")
                        .and_then(Value::as_str)
                        .unwrap_or("pending");
                    Some(PlanItem {
                        text: text.to_owned(),
                        status: status.to_owned(),
                    })
                })
                .collect();
            return Some(CallEvents {
                plan: Some(plan),
                ..CallEvents::default()
            });
        }
        "read" | "read_file" | "view" | "notebookread" | "cat" | "open_file" => {
            return file(FileAction::Read);
        }
        "write" | "write_file" | "create_file" => return file(FileAction::Written),
        "edit" | "multiedit" | "notebookedit" | "replace" | "edit_file" | "str_replace" => {
            // SWE-agent's `edit` names no file: it edits the one it opened.
            return file(FileAction::Edited).or(Some(CallEvents {
                on_open_file: Some(FileAction::Edited),
                ..CallEvents::default()
            }));
        }
        "open" => {
            let mut events = file(FileAction::Read)?;
            events.opens = events.files.first().map(|(p, _)| p.clone());
            return Some(events);
        }
        "create" => {
            let mut events = file(FileAction::Created)?;
            events.opens = events.files.first().map(|(p, _)| p.clone());
            return Some(events);
        }
        "search_file" => return file(FileAction::Read),
        _ => {}
    }
    // An editor tool: a sub-command on a path.
    if let (Some(sub), Some(_)) = (str_arg(&["command"]), str_arg(&["path"]))
        && matches!(
            sub.as_str(),
            "view" | "create" | "str_replace" | "insert" | "undo_edit" | "delete"
        )
    {
        let action = match sub.as_str() {
            "view" => FileAction::Read,
            "create" => FileAction::Created,
            "delete" => FileAction::Deleted,
            _ => FileAction::Edited,
        };
        return file(action);
    }
    // A shell tool.
    let shellish = ["bash", "shell", "exec", "terminal", "run", "command", "cmd"]
        .iter()
        .any(|w| lower.contains(w));
    if shellish && let Some(line) = command_line(&args) {
        return Some(CallEvents {
            files: shell::file_events(&line),
            command: Some(line),
            ..CallEvents::default()
        });
    }
    // A tool whose name says what it does to the one file it names.
    let verb = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if verb(&["delete", "remove"]) {
        file(FileAction::Deleted)
    } else if verb(&["edit", "replace", "patch", "insert", "modify", "update"]) {
        file(FileAction::Edited)
    } else if verb(&["write", "create", "save"]) {
        file(FileAction::Written)
    } else if verb(&["read", "view", "open", "show"]) {
        file(FileAction::Read)
    } else {
        None
    }
}

/// The command line of a shell tool's arguments: `command` or `cmd`, a string or an argument
/// vector (`["bash", "-lc", "line"]` is the line).
fn command_line(args: &Value) -> Option<String> {
    let value = args.get("command").or_else(|| args.get("cmd"))?;
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let words: Vec<&str> = parts.iter().filter_map(Value::as_str).collect();
            match words.as_slice() {
                [sh, flag, line, ..]
                    if matches!(*sh, "bash" | "sh" | "zsh" | "/bin/bash" | "/bin/sh")
                        && matches!(*flag, "-c" | "-lc" | "-ic") =>
                {
                    Some((*line).to_owned())
                }
                [] => None,
                words => Some(words.join(" ")),
            }
        }
        _ => None,
    }
}

/// The files an apply-patch text names (`*** Add File: p`, `*** Update File: p`,
/// `*** Delete File: p`, `*** Move to: p`) or a unified diff's `+++ b/p`.
fn patch_files(text: &str) -> Vec<(String, FileAction)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim_end();
        let found = [
            ("*** Add File: ", FileAction::Created),
            ("*** Update File: ", FileAction::Edited),
            ("*** Delete File: ", FileAction::Deleted),
            ("*** Move to: ", FileAction::Created),
            ("+++ b/", FileAction::Edited),
        ]
        .into_iter()
        .find_map(|(prefix, action)| line.strip_prefix(prefix).map(|p| (p.trim(), action)));
        if let Some((path, action)) = found
            && !path.is_empty()
            && path != "/dev/null"
        {
            out.push((path.to_owned(), action));
        }
    }
    out
}

/// The exit status a tool's result states, in the forms agents write it:
/// `<returncode>1</returncode>` (mini-SWE-agent), `Exit code: 1` or `exit code 1` (Codex,
/// Claude Code), `"exit_code": 1` (a JSON result). Read near the start and the end of the
/// result only, where agents put it, so that a program's own output is not taken for it.
pub(super) fn exit_status(text: &str) -> Option<i32> {
    let ends = [head(text, 300), tail(text, 300)];
    for part in ends {
        let lower = part.to_ascii_lowercase();
        for marker in [
            "<returncode>",
            "exit code:",
            "exit code",
            "\"exit_code\":",
            "exited with code",
        ] {
            if let Some(at) = lower.find(marker) {
                let rest = lower[at + marker.len()..].trim_start();
                let digits: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '-')
                    .collect();
                if let Ok(code) = digits.parse() {
                    return Some(code);
                }
            }
        }
    }
    None
}

fn head(text: &str, n: usize) -> &str {
    let mut end = n.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
