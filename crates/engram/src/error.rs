//! The library's error type.
//!
//! One public error enum for the crate, with messages written for the person who has to act on
//! them: an input error names the line, the message index and the field; a registry error names
//! the file and the model.

use std::fmt;

/// Everything that can go wrong in the engram core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input conversation is malformed. The inner error says where.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A tokenizer name could not be resolved or a tokenizer file could not be loaded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The model registry (built in or a user file) is malformed.
    #[error("model registry: {0}")]
    Registry(String),
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file that could not be read.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// A value the core does not take, and the rule it breaks: a name outside the names taken, text
/// that is not what it should be (a time, a tool call's arguments), a value out of its range. The
/// message never names the field: each front names it its own way (`--target`, `"target"`, a
/// tool's argument), and may answer by the kind (a 400, a tool error, exit code 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
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
    /// Text that does not read as what it should be; the message says what was expected.
    #[error("{0}")]
    Malformed(String),
    /// A value outside its range or breaking its rule; the message states the rule.
    #[error("{0}")]
    OutOfRange(String),
    /// A field that must be there and is not.
    #[error("{0}")]
    Missing(String),
}

/// The message a front that reports errors as text shows for a [`ValueError`].
impl From<ValueError> for String {
    fn from(e: ValueError) -> String {
        e.to_string()
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

/// What can go wrong in a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed (I/O, SQL); nothing was changed.
    #[error("memory store: {0}")]
    Backend(String),
    /// A consolidation referred to entries that are not (or no longer) in working memory;
    /// nothing was changed.
    #[error("memory store: entries {0:?} are not in working memory (consolidated already?)")]
    NotWorking(Vec<String>),
    /// The file is not an engram database.
    #[error("{0}")]
    Foreign(String),
    /// The input is wrong (the message names the place); nothing was changed.
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
}
