use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::message::ToolCall;

fn call(id: &str, name: &str, args: serde_json::Value) -> Message {
    let mut m = Message::with_content(Role::Assistant, None);
    m.set_tool_calls(Some(vec![ToolCall::function(id, name, args.to_string())]));
    m
}

fn raw_call(id: &str, name: &str, args: &str) -> Message {
    let mut m = Message::with_content(Role::Assistant, None);
    m.set_tool_calls(Some(vec![ToolCall::function(id, name, args)]));
    m
}

fn result(id: &str, text: &str) -> Message {
    let mut m = Message::new(Role::Tool, text);
    m.set_tool_call_id(Some(id.to_owned()));
    m
}

fn error_result(id: &str, text: &str) -> Message {
    let mut m = result(id, text);
    m.extra_mut().insert("is_error".into(), json!(true));
    m
}

fn file<'l>(ledger: &'l Ledger, path: &str) -> &'l FileEntry {
    ledger
        .files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("{path} not in {:?}", ledger.files))
}

#[test]
fn a_shell_agent_s_files_commands_and_failures() {
    // mini-SWE-agent: a `bash` tool, results with `<returncode>`.
    let messages = [
        Message::user("Fix the parser."),
        call("c1", "bash", json!({"command": "cat src/parser.py"})),
        result(
            "c1",
            "<returncode>0</returncode>\n<output>\ndef parse(): ...\n</output>",
        ),
        call(
            "c2",
            "bash",
            json!({"command": "cd /repo && python -m pytest tests/test_parser.py"}),
        ),
        result(
            "c2",
            "<returncode>1</returncode>\n<output>\nFAILED tests/test_parser.py::test_x\n</output>",
        ),
        call(
            "c3",
            "bash",
            json!({"command": "sed -i 's/a/b/' src/parser.py"}),
        ),
        result("c3", "<returncode>0</returncode>\n<output>\n</output>"),
        call("c4", "bash", json!({"command": "python reproduce.py"})),
        result(
            "c4",
            "<returncode>2</returncode>\n<output>\nTraceback\n</output>",
        ),
        call(
            "c5",
            "bash",
            json!({"command": "python -m pytest tests/test_parser.py -q"}),
        ),
        result(
            "c5",
            "<returncode>0</returncode>\n<output>\n1 passed\n</output>",
        ),
        call(
            "c6",
            "bash",
            json!({"command": "grep -n parse src/other.py"}),
        ),
        result("c6", "<returncode>1</returncode>\n<output>\n</output>"),
    ];
    let ledger = Ledger::of(&messages, 0);
    let parser = file(&ledger, "src/parser.py");
    assert_eq!(
        (parser.action, parser.step, parser.changed),
        (FileAction::Edited, 5, Some(5))
    );
    assert_eq!(
        file(&ledger, "tests/test_parser.py").action,
        FileAction::Ran
    );
    assert_eq!(file(&ledger, "src/other.py").action, FileAction::Read);
    assert_eq!(ledger.commands.len(), 6);
    assert_eq!(ledger.commands[1].outcome, Outcome::Failed(Some(1)));
    // The tests that failed passed later; the script's failure is still open; a search that
    // found nothing is no failure.
    let resolved: Vec<_> = ledger
        .failures
        .iter()
        .filter(|f| f.resolved_at.is_some())
        .collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].resolved_at, Some(10));
    let open: Vec<_> = ledger.open_failures().collect();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].command, "python reproduce.py");
    assert_eq!(open[0].code, Some(2));
    let text = ledger.render(4_000);
    assert!(text.contains("src/parser.py (edited at 5)"), "{text}");
    assert!(
        text.contains("Failures not yet resolved:\n- `python reproduce.py` (exit 2, failed at 8)"),
        "{text}"
    );
    assert!(text.contains("passed at 10"), "{text}");
}

#[test]
fn claude_code_s_tools_and_todos() {
    let messages = [
        call("t1", "Read", json!({"file_path": "/repo/src/lib.rs"})),
        result("t1", "1\tfn main() {}"),
        call(
            "t2",
            "Edit",
            json!({"file_path": "/repo/src/lib.rs", "old_string": "a", "new_string": "b"}),
        ),
        error_result("t2", "String to replace not found in file."),
        call(
            "t3",
            "Edit",
            json!({"file_path": "/repo/src/lib.rs", "old_string": "fn", "new_string": "pub fn"}),
        ),
        result("t3", "The file /repo/src/lib.rs has been updated."),
        call(
            "t4",
            "Write",
            json!({"file_path": "/repo/NOTES.md", "content": "x"}),
        ),
        result("t4", "File created successfully"),
        call(
            "t5",
            "Bash",
            json!({"command": "cargo test", "description": "Run tests"}),
        ),
        error_result("t5", "Exit code 101\nerror[E0425]: cannot find value"),
        call(
            "t6",
            "TodoWrite",
            json!({"todos": [
                {"content": "Fix the lib", "status": "completed", "activeForm": "Fixing"},
                {"content": "Make the tests pass", "status": "in_progress", "activeForm": "Testing"}
            ]}),
        ),
        result("t6", "Todos have been modified successfully."),
    ];
    let ledger = Ledger::of(&messages, 100);
    assert_eq!(file(&ledger, "/repo/src/lib.rs").action, FileAction::Edited);
    assert_eq!(file(&ledger, "/repo/src/lib.rs").step, 104);
    assert_eq!(file(&ledger, "/repo/NOTES.md").action, FileAction::Written);
    // The failed edit was resolved by the edit of the same file that worked.
    let edit = ledger
        .failures
        .iter()
        .find(|f| f.command.starts_with("Edit"))
        .expect("edit");
    assert_eq!(edit.resolved_at, Some(105));
    let open: Vec<_> = ledger.open_failures().collect();
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].command.as_str(), open[0].code),
        ("cargo test", Some(101))
    );
    assert_eq!(
        ledger.plan,
        [
            PlanItem {
                text: "Fix the lib".into(),
                status: "completed".into()
            },
            PlanItem {
                text: "Make the tests pass".into(),
                status: "in_progress".into()
            },
        ]
    );
    assert!(
        ledger
            .render(4_000)
            .contains("- [in_progress] Make the tests pass")
    );
}

#[test]
fn codex_s_shell_patches_and_plan() {
    let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: src/b.rs\n+fn b() {}\n*** Delete File: src/c.rs\n*** End Patch\n";
    let messages = [
        call(
            "s1",
            "shell",
            json!({"command": ["bash", "-lc", "nl -ba src/a.rs | sed -n '1,40p'"], "workdir": "/repo"}),
        ),
        result("s1", "Exit code: 0\nWall time: 0.1 seconds\nOutput:\n1 x"),
        // A custom tool's raw input, and the function form.
        raw_call("p1", "apply_patch", patch),
        result("p1", "Success. Updated the following files:\nM src/a.rs"),
        call(
            "p2",
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: src/d.rs\n*** End Patch"}),
        ),
        result("p2", "Exit code: 0"),
        call(
            "u1",
            "update_plan",
            json!({"plan": [{"step": "Read a.rs", "status": "completed"}, {"step": "Patch", "status": "pending"}]}),
        ),
        result("u1", "Plan updated"),
        call("e1", "exec_command", json!({"cmd": "cargo build"})),
        result("e1", "Process exited with code 1\nerror: could not compile"),
    ];
    let ledger = Ledger::of(&messages, 0);
    assert_eq!(file(&ledger, "src/a.rs").action, FileAction::Edited);
    assert_eq!(file(&ledger, "src/b.rs").action, FileAction::Created);
    assert_eq!(file(&ledger, "src/c.rs").action, FileAction::Deleted);
    assert_eq!(file(&ledger, "src/d.rs").action, FileAction::Edited);
    assert_eq!(ledger.plan.len(), 2);
    assert_eq!(ledger.commands[0].outcome, Outcome::Ok);
    assert_eq!(
        ledger.open_failures().next().map(|f| f.command.as_str()),
        Some("cargo build")
    );
}

#[test]
fn swe_agent_s_editor_and_open_file() {
    let messages = [
        call(
            "o1",
            "open",
            json!({"path": "/repo/tests/missing_colon.py"}),
        ),
        result(
            "o1",
            "[File: /repo/tests/missing_colon.py (10 lines total)]",
        ),
        call(
            "e1",
            "edit",
            json!({"search": "def division(a, b)", "replace": "def division(a, b):"}),
        ),
        result("e1", "File updated."),
        call(
            "v1",
            "str_replace_editor",
            json!({"command": "view", "path": "/repo/setup.py"}),
        ),
        result("v1", "1 from setuptools import setup"),
        call(
            "v2",
            "str_replace_editor",
            json!({"command": "create", "path": "/repo/repro.py", "file_text": "x"}),
        ),
        result("v2", "File created"),
        call("f1", "find_file", json!({"file_name": "missing_colon.py"})),
        result("f1", "Found 1 matches"),
        call("w1", "get_weather", json!({"city": "Paris"})),
        result("w1", "sunny"),
    ];
    let ledger = Ledger::of(&messages, 0);
    assert_eq!(
        file(&ledger, "/repo/tests/missing_colon.py").action,
        FileAction::Edited
    );
    assert_eq!(file(&ledger, "/repo/setup.py").action, FileAction::Read);
    assert_eq!(file(&ledger, "/repo/repro.py").action, FileAction::Created);
    assert_eq!(
        ledger.files.len(),
        3,
        "a search and an unknown tool name no file: {:?}",
        ledger.files
    );
    assert!(ledger.commands.is_empty());
}

#[test]
fn what_it_does_not_recognise_records_nothing() {
    let messages = [
        call("x1", "bash", json!({"command": "frobnicate --all"})),
        result("x1", "done"),
        raw_call("x2", "mystery", "not json"),
        result("x2", "ok"),
        Message::assistant("I will now run `cat src/a.py`."),
    ];
    let ledger = Ledger::of(&messages, 0);
    assert!(ledger.files.is_empty(), "{:?}", ledger.files);
    assert_eq!(ledger.commands.len(), 1);
    assert_eq!(
        ledger.commands[0].outcome,
        Outcome::Unknown,
        "no exit status stated"
    );
    assert!(ledger.failures.is_empty());
}

#[test]
fn a_long_ledger_keeps_what_changed_and_what_failed_within_its_size() {
    let mut messages = Vec::new();
    for i in 0..200 {
        messages.push(call(
            &format!("r{i}"),
            "bash",
            json!({"command": format!("cat src/module_{i}.py")}),
        ));
        messages.push(result(&format!("r{i}"), "<returncode>0</returncode>"));
    }
    messages.push(call(
        "e",
        "bash",
        json!({"command": "sed -i 's/a/b/' src/module_3.py"}),
    ));
    messages.push(result("e", "<returncode>0</returncode>"));
    messages.push(call(
        "t",
        "bash",
        json!({"command": "pytest tests/test_m.py"}),
    ));
    messages.push(result("t", "<returncode>1</returncode>"));
    let text = Ledger::of(&messages, 0).render(1_500);
    assert!(text.len() <= 1_500, "{}", text.len());
    assert!(text.contains("src/module_3.py (edited at 400)"), "{text}");
    assert!(
        text.contains("src/module_199.py"),
        "the newest read stays: {text}"
    );
    assert!(
        text.contains("`pytest tests/test_m.py` (exit 1, failed at 403)"),
        "{text}"
    );
    assert!(text.contains("more left out"), "{text}");
}

/// The dev trajectories: a failure a later step fixes shows resolved, one left failing open.
#[test]
fn dev_trajectories_show_failures_resolved_and_open() {
    let mut resolved = 0;
    let mut open = 0;
    for line in engram_testkit::dev_lines("minisweagent_swebv_gemini3pro.jsonl") {
        let conversation = crate::parse_conversation(line.as_bytes()).expect("parses");
        let ledger = Ledger::of(&conversation.messages, 0);
        assert!(!ledger.files.is_empty());
        for f in &ledger.failures {
            match f.resolved_at {
                Some(at) => {
                    resolved += 1;
                    assert!(at > f.step);
                    // The run that resolved it passed the same command.
                    let run = ledger
                        .commands
                        .iter()
                        .find(|c| c.step + 1 == at)
                        .expect("the passing run");
                    assert_eq!(run.outcome, Outcome::Ok, "{run:?}");
                }
                None => open += 1,
            }
        }
    }
    assert!(resolved > 0 && open > 0, "resolved {resolved}, open {open}");
}

fn arb_event() -> impl Strategy<Value = (u8, u8, u8)> {
    (0u8..6, 0u8..5, 0u8..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(engram_testkit::proptest_cases(64)))]

    /// Built over more of the same history, a ledger only grows: every file stays, at a step
    /// no earlier; every command stays; a resolved failure stays resolved; and building it in
    /// two parts gives the same ledger as building it at once.
    #[test]
    fn a_ledger_only_grows(events in prop::collection::vec(arb_event(), 1..40), cut in 0usize..80) {
        let mut messages = Vec::new();
        for (i, (kind, file, code)) in events.iter().enumerate() {
            let id = format!("c{i}");
            let path = format!("src/f{file}.py");
            let command = match kind {
                0 => format!("cat {path}"),
                1 => format!("sed -i 's/a/b/' {path}"),
                2 => format!("pytest tests/test_{file}.py"),
                3 => format!("rm {path}"),
                4 => format!("python {path}"),
                _ => "make".to_owned(),
            };
            messages.push(call(&id, "bash", json!({"command": command})));
            messages.push(result(&id, &format!("<returncode>{code}</returncode>")));
        }
        let cut = cut.min(messages.len());
        let before = Ledger::of(&messages[..cut], 0);
        let mut after = before.clone();
        after.add(&messages[cut..], cut);
        prop_assert_eq!(&after, &Ledger::of(&messages, 0));
        for f in &before.files {
            let later = after.files.iter().find(|g| g.path == f.path);
            prop_assert!(later.is_some_and(|g| g.step >= f.step));
        }
        prop_assert!(after.commands.len() >= before.commands.len());
        // A command stays; only a command waiting for its result gains its outcome.
        for (b, a) in before.commands.iter().zip(&after.commands) {
            prop_assert_eq!((&b.command, b.step), (&a.command, a.step));
            prop_assert!(b.outcome == a.outcome || b.outcome == Outcome::Unknown);
        }
        for f in before.failures.iter().filter(|f| f.resolved_at.is_some()) {
            prop_assert!(after.failures.contains(f));
        }
    }
}
