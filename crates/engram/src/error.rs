//! The library's error type.
//!
//! One public error enum for the crate, with messages written for the person who has to act on
//! them: an input error names the line, the message index and the field; a registry error names
//! the file and the model.

use std::fmt;

/// Everything that can go wrong in the engram core, by what the caller can do about it: fix the
/// input (the variants up to [`Error::Required`]), fix the setup (a tokenizer, the registry, a
/// file, the configuration), retry or look at the store, or give a larger budget. A front
/// answers by the kind (a 400, a 404, a tool error, an exit code) and shows the message, which
/// names the place; a value's message never names the field, which each front names its own way
/// (`--target`, `"target"`, a tool's argument), except [`Error::Invalid`], which carries it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input conversation is malformed. The payload says where.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A field of a request that does not make sense, and the field (shown first, unless it is
    /// empty: the request as a whole).
    #[error("{}", invalid_text(.field, .why))]
    Invalid {
        /// The field as JSON names it (`target`, `messages[1]`); a CLI shows it as a flag
        /// ([`Error::flag`]).
        field: String,
        /// What is wrong with it and what is expected.
        why: String,
    },
    /// A name outside the names taken.
    #[error("unknown {what} {given:?}; expected {expected}")]
    UnknownName {
        /// What the name names (`strategy`, `format`).
        what: &'static str,
        /// The name given.
        given: String,
        /// The names taken, in words.
        expected: String,
    },
    /// Text that does not read as what it should be (a time, a tool call's arguments); the
    /// message says what was expected.
    #[error("{0}")]
    Malformed(String),
    /// A value outside its range or breaking its rule; the message states the rule.
    #[error("{0}")]
    OutOfRange(String),
    /// A value that must be given and is not.
    #[error("{0}")]
    Required(String),
    /// A tokenizer name could not be resolved or a tokenizer file could not be loaded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The model registry (built in or a user file) is malformed.
    #[error("model registry: {0}")]
    Registry(String),
    /// Reading or writing a file failed.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        reason: String,
    },
    /// A configuration problem; the message names the file or variable.
    #[error("{0}")]
    Config(String),
    /// The store's backend failed (I/O, SQL); nothing was changed.
    #[error("memory store: {0}")]
    Backend(String),
    /// A consolidation referred to entries that are not (or no longer) in working memory;
    /// nothing was changed.
    #[error("memory store: entries {0:?} are not in working memory (consolidated already?)")]
    NotWorking(Vec<String>),
    /// The file is not an engram database.
    #[error("{0}")]
    Foreign(String),
    /// A store or a session refused the input (the message names the place); nothing was
    /// changed.
    #[error("{0}")]
    Rejected(String),
    /// What was asked for does not exist: `missing` says what, `message` says it for a person.
    #[error("{message}")]
    NotFound {
        /// What does not exist.
        missing: Missing,
        /// The message.
        message: String,
    },
    /// The change contradicts what is stored (a duplicate id or name, a compaction computed
    /// before a restore); nothing was changed.
    #[error("{0}")]
    Conflict(String),
    /// What a compaction must keep is larger than its budget.
    #[error(
        "cannot fit the budget of {budget} tokens: {what} need {required} tokens on their own, {over} more than the budget"
    )]
    CannotFit {
        /// The budget.
        budget: usize,
        /// Tokens of what must be kept.
        required: usize,
        /// `required - budget`.
        over: usize,
        /// What must be kept, in words.
        what: String,
    },
    /// A compaction was asked of a conversation with no messages.
    #[error("there are no messages to compact")]
    NoMessages,
    /// An assembled context cannot hold what must be sent.
    #[error(
        "the system prompt and the new message need {required} tokens; the budget (less the reply reserve) is {budget}"
    )]
    NoRoom {
        /// Tokens of what must be sent.
        required: usize,
        /// The budget less the reply reserve.
        budget: usize,
    },
    /// A summarizer gave no summary.
    #[error("summarizer {summarizer}: {reason}")]
    Summarizer {
        /// Which summarizer.
        summarizer: String,
        /// What went wrong, for the user.
        reason: String,
    },
    /// An embedder gave no vectors.
    #[error("embedder {embedder}: {reason}")]
    Embedder {
        /// The embedder's name.
        embedder: String,
        /// What went wrong, for the user.
        reason: String,
    },
}

impl Error {
    /// A request's `field` that does not make sense, and why.
    pub fn invalid(field: impl Into<String>, why: impl fmt::Display) -> Self {
        Error::Invalid {
            field: field.into(),
            why: why.to_string(),
        }
    }

    /// `embedder` gave no vectors, for `reason`.
    pub fn embedder(embedder: impl Into<String>, reason: impl fmt::Display) -> Self {
        Error::Embedder {
            embedder: embedder.into(),
            reason: reason.to_string(),
        }
    }

    /// `summarizer` gave no summary, for `reason`.
    pub fn summarizer(summarizer: impl Into<String>, reason: impl fmt::Display) -> Self {
        Error::Summarizer {
            summarizer: summarizer.into(),
            reason: reason.to_string(),
        }
    }

    /// The file at `path` could not be read or written.
    pub fn io(path: impl fmt::Display, source: &std::io::Error) -> Self {
        Error::Io {
            path: path.to_string(),
            reason: source.to_string(),
        }
    }

    /// The field of an [`Error::Invalid`] as a command-line flag (`digest_share` →
    /// `--digest-share`).
    pub fn flag(&self) -> Option<String> {
        match self {
            Error::Invalid { field, .. } if !field.is_empty() => {
                Some(format!("--{}", field.replace('_', "-")))
            }
            _ => None,
        }
    }

    /// The field an [`Error::Invalid`] names.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    /// What is wrong with the field an [`Error::Invalid`] names, without the field.
    pub fn why(&self) -> Option<&str> {
        match self {
            Error::Invalid { why, .. } => Some(why),
            _ => None,
        }
    }
}

/// ``"`field`: why"``, or `why` alone for a request as a whole.
fn invalid_text(field: &str, why: &str) -> String {
    if field.is_empty() {
        why.to_owned()
    } else {
        format!("`{field}`: {why}")
    }
}

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A problem in the input, with the place it was found.
///
/// Every location part is optional: a JSON syntax error has a line and column but no message
/// index; a wrong role has a message index and a field, and (when the input has lines) a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// 1-based line in the input, when known.
    pub line: Option<usize>,
    /// 1-based column in the input, when known.
    pub column: Option<usize>,
    /// 0-based index of the message, when the problem is inside one.
    pub index: Option<usize>,
    /// The field, as a path inside the message (`tool_calls[0].function.name`), when known.
    pub field: Option<String>,
    /// What is wrong, and what to do about it.
    pub message: String,
}

impl InputError {
    /// An error with only a message; add the place with the `at_*` builders.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            line: None,
            column: None,
            index: None,
            field: None,
            message: message.into(),
        }
    }

    /// The same error, naming a message index.
    #[must_use]
    pub fn at_index(mut self, index: usize) -> Self {
        self.index = Some(index);
        self
    }

    /// The same error, naming a field (a path inside the message).
    #[must_use]
    pub fn at_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The same error, prefixing the field path with `parent` (`content` + `[2].text`).
    #[must_use]
    pub fn under_field(mut self, parent: &str) -> Self {
        self.field = Some(match self.field.take() {
            None => parent.to_owned(),
            Some(child) if child.starts_with('[') => format!("{parent}{child}"),
            Some(child) => format!("{parent}.{child}"),
        });
        self
    }

    /// The same error, naming a line (and column) when none is set yet.
    #[must_use]
    pub fn at_line(mut self, line: usize, column: Option<usize>) -> Self {
        if self.line.is_none() {
            self.line = Some(line);
            self.column = column;
        }
        self
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut place = Vec::new();
        if let Some(line) = self.line {
            match self.column {
                Some(column) => place.push(format!("line {line}, column {column}")),
                None => place.push(format!("line {line}")),
            }
        }
        if let Some(index) = self.index {
            place.push(format!("message {index}"));
        }
        if let Some(field) = &self.field {
            place.push(format!("field `{field}`"));
        }
        if place.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", place.join(", "), self.message)
        }
    }
}

impl std::error::Error for InputError {}

/// What a store does not hold, for a caller that answers by the kind (a 404, a hint of the
/// command that lists what there is).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A session, by its id.
    Session {
        /// The id asked for.
        id: String,
    },
    /// A checkpoint of a session, by its name.
    Checkpoint {
        /// The session's id.
        session: String,
        /// The name asked for.
        name: String,
    },
    /// Memory entries that a filter (an id, a session, a source) matched none of.
    MemoryEntries,
}
