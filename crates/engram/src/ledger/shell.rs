//! What a shell command does to files: split into simple commands, each read by its program's
//! known arguments. A program this file does not know names no file; a word that does not look
//! like a path is not one.

use super::FileAction;

/// The files a shell command line reads, writes, deletes or runs, in the order it names them,
/// and whether it runs a test or a script (what a later run must pass to resolve its failure).
pub(super) fn file_events(line: &str) -> Vec<(String, FileAction)> {
    let mut out = Vec::new();
    for words in simple_commands(line) {
        command_events(&words, &mut out);
    }
    out
}

/// The simple commands of a line: its words, split at `;`, `&&`, `||`, `|` and newlines outside
/// quotes, with here-document bodies left out (their text is data, not commands) and the
/// redirection targets kept as `>` `path` pairs. None for a line the shell itself would refuse
/// (an unquoted `(` among a command's arguments): an agent's quoting gone wrong, whose words
/// are not the arguments it meant, and which ran nothing.
fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut heredocs: Vec<String> = Vec::new();
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(c) => {
                    word.push(c);
                    in_word = true;
                }
            },
            '\n' | ';' | '&' | '|' => {
                end_word(&mut word, &mut in_word, &mut words);
                if c == '&' && chars.peek() == Some(&'>') {
                    // `&>` file: a redirection, not a separator.
                    chars.next();
                    words.push(">".into());
                    continue;
                }
                if matches!(c, '&' | '|') && chars.peek() == Some(&c) {
                    chars.next();
                }
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
                if c == '\n' {
                    // The bodies of the here-documents opened on the line just ended.
                    for delimiter in std::mem::take(&mut heredocs) {
                        let mut line = String::new();
                        for c in chars.by_ref() {
                            if c == '\n' {
                                if line.trim() == delimiter {
                                    break;
                                }
                                line.clear();
                            } else {
                                line.push(c);
                            }
                        }
                    }
                }
            }
            '<' if chars.peek() == Some(&'<') => {
                end_word(&mut word, &mut in_word, &mut words);
                chars.next();
                if chars.peek() == Some(&'<') {
                    // `<<<` a here-string: the word that follows is data.
                    chars.next();
                    words.push("<<<".into());
                    continue;
                }
                if chars.peek() == Some(&'-') {
                    chars.next();
                }
                while chars.peek().is_some_and(|c| *c == ' ') {
                    chars.next();
                }
                let mut delimiter = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '>' | '<' | ')') {
                        break;
                    }
                    chars.next();
                    if !matches!(c, '\'' | '"' | '\\') {
                        delimiter.push(c);
                    }
                }
                if !delimiter.is_empty() {
                    heredocs.push(delimiter);
                }
            }
            '>' | '<' => {
                end_word(&mut word, &mut in_word, &mut words);
                if c == '>' && chars.peek() == Some(&'>') {
                    chars.next();
                }
                if chars.peek() == Some(&'&') {
                    // `2>&1`: a descriptor, not a file.
                    chars.next();
                    while chars.peek().is_some_and(char::is_ascii_digit) {
                        chars.next();
                    }
                    continue;
                }
                // `2>` names a file as `>` does; the descriptor's digit is not a word.
                if words
                    .last()
                    .is_some_and(|w| w.len() == 1 && w.as_bytes()[0].is_ascii_digit())
                {
                    words.pop();
                }
                words.push(if c == '>' { ">" } else { "<" }.into());
            }
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut words),
            '(' if in_word
                && !words.is_empty()
                && !word.ends_with(['$', '=', '@', '!', '+', '*', '?']) =>
            {
                // `cmd arg f(x)`: a syntax error (`$(`, `a=(`, and extglob's `@(` are not).
                return Vec::new();
            }
            '(' if !in_word
                && words.len() >= 2
                && !matches!(words.last().map(String::as_str), Some("<" | ">")) =>
            {
                // `cmd arg (x)`: a syntax error (`cmd <(x)` is a process substitution).
                return Vec::new();
            }
            // `)` ends a word wherever it is (`(cat a.txt)`); `{` `}` only on their own.
            ')' | '(' | '{' | '}' if c == ')' || !in_word => {
                end_word(&mut word, &mut in_word, &mut words);
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut words);
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

/// True for a word that names a file: a relative or absolute path with a file name, or a name
/// with an extension; not an option, a URL, a glob, a variable or an assignment.
pub(super) fn is_path(word: &str) -> bool {
    if word.is_empty()
        || word.starts_with('-')
        || word.contains("://")
        || word.contains([
            '*', '?', '$', '=', '`', '{', '}', '[', ']', ' ', '\'', '"', ',',
        ])
        || word.len() > 200
    {
        return false;
    }
    let name = word.rsplit('/').next().unwrap_or(word);
    if name.is_empty() || name == "." || name == ".." {
        return false;
    }
    match name.rsplit_once('.') {
        // `file.py`, `.env`; not `1.5` or `v2.0`.
        Some((stem, ext)) => {
            !ext.is_empty()
                && ext.len() <= 8
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
                && (stem.is_empty() || !stem.chars().all(|c| c.is_ascii_digit()))
        }
        // `src/Makefile` (or a directory, `astropy/table`): a path with no extension, when it
        // has a directory.
        None => {
            word.contains('/')
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_-".contains(c))
        }
    }
}

/// The events of one simple command.
fn command_events(words: &[String], out: &mut Vec<(String, FileAction)>) {
    // Redirections first: `> f` writes f, `< f` reads it; the rest are the command's words.
    let mut args: Vec<&str> = Vec::new();
    let mut iter = words.iter();
    while let Some(w) = iter.next() {
        match w.as_str() {
            ">" => {
                if let Some(target) = iter.next().filter(|t| is_path(t)) {
                    out.push((target.clone(), FileAction::Written));
                }
            }
            "<" => {
                if let Some(source) = iter.next().filter(|t| is_path(t)) {
                    out.push((source.clone(), FileAction::Read));
                }
            }
            "<<<" => {
                iter.next();
            }
            w => args.push(w),
        }
    }
    // Leading assignments and wrappers (`FOO=1 timeout 60 python x.py`).
    let mut rest: &[&str] = &args;
    loop {
        match rest.first() {
            Some(w) if w.contains('=') && !w.starts_with('-') => rest = &rest[1..],
            Some(&("sudo" | "time" | "nohup" | "env" | "command" | "exec")) => rest = &rest[1..],
            Some(&"timeout") => {
                rest = &rest[1..];
                while rest.first().is_some_and(|w| w.starts_with('-')) {
                    rest = &rest[1..];
                }
                if rest
                    .first()
                    .is_some_and(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))
                {
                    rest = &rest[1..];
                }
            }
            _ => break,
        }
    }
    let Some((&program, args)) = rest.split_first() else {
        return;
    };
    let program = program.rsplit('/').next().unwrap_or(program);
    let paths = |args: &[&str]| -> Vec<String> {
        args.iter()
            .filter(|a| is_path(a))
            .map(|a| (*a).to_owned())
            .collect()
    };
    let mut push = |paths: Vec<String>, action: FileAction| {
        out.extend(paths.into_iter().map(|p| (p, action)));
    };
    match program {
        "cat" | "head" | "tail" | "less" | "more" | "nl" | "wc" | "bat" | "diff" | "cmp"
        | "stat" | "file" | "md5sum" | "sha256sum" | "xxd" | "hexdump" | "od" | "source" | "." => {
            push(paths(args), FileAction::Read)
        }
        "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "awk" | "jq" => {
            // The first word that is not an option is the pattern (or the program).
            let after: Vec<&str> = args
                .iter()
                .copied()
                .skip_while(|a| a.starts_with('-'))
                .skip(1)
                .collect();
            push(paths(&after), FileAction::Read);
        }
        "sed" | "perl" => {
            // `sed -i`, `sed -i.bak`; perl's flags bundle (`-pi`).
            let in_place = args.iter().any(|a| {
                a.starts_with("-i")
                    || (program == "perl"
                        && a.starts_with('-')
                        && !a.starts_with("--")
                        && a.contains('i'))
            });
            // The script is the first word that is not an option (or follows -e).
            let mut files: Vec<&str> = Vec::new();
            let mut script_seen = args.contains(&"-e");
            let mut skip_next = false;
            for a in args {
                if skip_next {
                    skip_next = false;
                    continue;
                }
                if *a == "-e" || *a == "-f" {
                    skip_next = true;
                    continue;
                }
                if a.starts_with('-') {
                    continue;
                }
                if !script_seen {
                    script_seen = true;
                    continue;
                }
                files.push(a);
            }
            let action = if in_place {
                FileAction::Edited
            } else {
                FileAction::Read
            };
            push(paths(&files), action);
        }
        "tee" => push(paths(args), FileAction::Written),
        "touch" => push(paths(args), FileAction::Created),
        "rm" | "unlink" => push(paths(args), FileAction::Deleted),
        "cp" | "mv" | "ln" => {
            let mut files = paths(args);
            if let Some(target) = files.pop() {
                let source = if program == "mv" {
                    FileAction::Deleted
                } else {
                    FileAction::Read
                };
                push(files, source);
                push(vec![target], FileAction::Created);
            }
        }
        "python" | "python3" | "node" | "ruby" | "bash" | "sh" | "go" | "cargo" | "npx"
        | "deno" | "bun" | "php" | "java" => {
            if matches!(program, "bash" | "sh")
                && matches!(args.first(), Some(&("-c" | "-lc" | "-ic")))
            {
                if let Some(script) = args.get(1) {
                    out.extend(file_events(script));
                }
                return;
            }
            if matches!(args.first(), Some(&"-c")) {
                return;
            }
            let module = args
                .iter()
                .position(|a| *a == "-m")
                .and_then(|i| args.get(i + 1).map(|m| (i, *m)));
            match module {
                Some((i, "pytest" | "unittest")) => {
                    push(test_paths(&args[i + 2..]), FileAction::Ran)
                }
                Some(_) => {}
                None => {
                    // `python script.py args`: the script runs; `go run`/`go test` paths too.
                    let runs: Vec<String> = args
                        .iter()
                        .copied()
                        .skip_while(|a| a.starts_with('-') || matches!(*a, "run" | "test"))
                        .take(1)
                        .filter(|a| is_path(a))
                        .map(str::to_owned)
                        .collect();
                    push(runs, FileAction::Ran);
                }
            }
        }
        "pytest" | "py.test" | "tox" | "jest" | "vitest" | "mocha" => {
            push(test_paths(args), FileAction::Ran);
        }
        "git" => match args.first() {
            Some(&("diff" | "show" | "log" | "blame")) => push(paths(&args[1..]), FileAction::Read),
            Some(&("checkout" | "restore")) => push(paths(&args[1..]), FileAction::Edited),
            Some(&"rm") => push(paths(&args[1..]), FileAction::Deleted),
            Some(&"mv") => {
                let mut files = paths(&args[1..]);
                if let Some(target) = files.pop() {
                    push(files, FileAction::Deleted);
                    push(vec![target], FileAction::Created);
                }
            }
            _ => {}
        },
        _ => {}
    }
}

/// The files a test runner's arguments name (`tests/a.py::test_x` names `tests/a.py`).
fn test_paths(args: &[&str]) -> Vec<String> {
    args.iter()
        .map(|a| a.split("::").next().unwrap_or(a))
        .filter(|a| is_path(a))
        .map(str::to_owned)
        .collect()
}

/// True when the command line's exit status is an answer rather than an error: its last
/// command is a search or a comparison (`grep` finding nothing exits 1).
pub(super) fn answers_by_status(line: &str) -> bool {
    simple_commands(line)
        .last()
        .and_then(|w| w.first())
        .is_some_and(|p| {
            let p = p.rsplit('/').next().unwrap_or(p);
            matches!(
                p,
                "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "diff" | "cmp" | "test" | "["
            )
        })
}

/// True when a command line runs tests (a failure it shows is resolved by a later run of the
/// same tests passing).
pub(super) fn runs_tests(line: &str) -> bool {
    simple_commands(line).iter().any(|words| {
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        w.iter().any(|a| {
            matches!(
                *a,
                "pytest" | "py.test" | "tox" | "jest" | "vitest" | "mocha"
            )
        }) || w.windows(2).any(|p| {
            matches!(
                p,
                ["-m", "pytest" | "unittest"]
                    | ["cargo" | "go" | "npm" | "yarn" | "pnpm" | "make", "test"]
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use FileAction::*;

    fn events(line: &str) -> Vec<(String, FileAction)> {
        file_events(line)
    }

    fn pair(p: &str, a: FileAction) -> (String, FileAction) {
        (p.to_owned(), a)
    }

    #[test]
    fn reading_commands_name_what_they_read() {
        assert_eq!(events("cat src/a.py"), [pair("src/a.py", Read)]);
        assert_eq!(
            events("sed -n '10,40p' astropy/table/table.py | head -n 20"),
            [pair("astropy/table/table.py", Read)]
        );
        assert_eq!(
            events("grep -rn \"def foo\" src/lib.rs tests/x.py"),
            [pair("src/lib.rs", Read), pair("tests/x.py", Read)]
        );
        assert_eq!(
            events("grep -r \"a.py\" astropy/table"),
            [pair("astropy/table", Read)],
            "the pattern is no file; the folder searched is named"
        );
        assert_eq!(events("nl -ba setup.cfg"), [pair("setup.cfg", Read)]);
        assert_eq!(events("ls -la src/ && find . -name '*.py'"), []);
    }

    #[test]
    fn writing_commands_name_what_they_change() {
        assert_eq!(
            events("sed -i 's/a/b/' src/a.py"),
            [pair("src/a.py", Edited)]
        );
        assert_eq!(
            events(
                "cat > repro.py <<'EOF'\nimport x\nprint(open('data.txt'))\nEOF\npython repro.py"
            ),
            [pair("repro.py", Written), pair("repro.py", Ran)],
            "the here-document's body names nothing"
        );
        assert_eq!(
            events("echo hi >> notes.md 2>&1"),
            [pair("notes.md", Written)]
        );
        assert_eq!(events("rm -f build/out.o"), [pair("build/out.o", Deleted)]);
        assert_eq!(
            events("mv a/old.py a/new.py"),
            [pair("a/old.py", Deleted), pair("a/new.py", Created)]
        );
        assert_eq!(
            events("git checkout -- src/a.py"),
            [pair("src/a.py", Edited)]
        );
        assert_eq!(
            events("perl -pi -e 's/x/y/' lib/m.pm"),
            [pair("lib/m.pm", Edited)]
        );
    }

    #[test]
    fn runs_and_tests_name_their_files() {
        assert_eq!(
            events("cd /repo && python -m pytest tests/test_a.py::test_x -q"),
            [pair("tests/test_a.py", Ran)]
        );
        assert_eq!(
            events("timeout 60 python3 reproduce.py"),
            [pair("reproduce.py", Ran)]
        );
        assert_eq!(
            events("bash -lc 'cat README.md'"),
            [pair("README.md", Read)]
        );
        assert!(runs_tests("cd x && python -m pytest -q"));
        assert!(runs_tests("cargo test -p engram"));
        assert!(!runs_tests("python reproduce.py"));
    }

    #[test]
    fn a_line_the_shell_would_refuse_names_nothing() {
        // Quoting gone wrong: `\'` does not escape a quote inside single quotes, so the rest
        // of the script is read as arguments, and bash refuses the `(` among them.
        let line = "sed -i '3c\\    # Don\\'t show it as an alias.\\n    x = f(y)' src/app.py";
        assert_eq!(events(line), vec![]);
        assert_eq!(events("echo a (b) > out.txt"), vec![]);
        // What the shell takes.
        for line in [
            "x=$(cat a.txt) && diff <(sort b.txt) c.txt",
            "arr=(a b) ; f() { cat a.txt; }",
        ] {
            assert!(!simple_commands(line).is_empty(), "{line}");
        }
        assert_eq!(
            events("(cat main.rs)"),
            vec![pair("main.rs", FileAction::Read)]
        );
    }

    #[test]
    fn words_that_are_not_paths_are_not_files() {
        for word in [
            "-n",
            "1.5",
            "v2",
            "*.py",
            "$HOME/x.py",
            "https://a.b/c.py",
            "a=b.py",
            "..",
            "src/",
        ] {
            assert!(!is_path(word), "{word}");
        }
        for word in [
            "a.py",
            ".env",
            "src/Makefile",
            "/abs/path/x.rs",
            "tests/test_a.py",
        ] {
            assert!(is_path(word), "{word}");
        }
    }
}
