//! One error type for the whole engine: every message names the op, tensor or file at fault.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// Shapes or dtypes that an op cannot take. `op` is the op's name, `detail` names the shapes.
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },

    /// A tensor too large for one storage binding on the chosen GPU.
    #[error("tensor `{tensor}` needs {bytes} bytes, over this GPU's storage binding limit of {limit} bytes")]
    BindingTooLarge { tensor: String, bytes: u64, limit: u64 },

    /// No usable device, or the device asked for is missing.
    #[error("{0}")]
    Device(String),

    /// A GPU error reported by wgpu (validation, out of memory, lost device).
    #[error("GPU error: {0}")]
    Gpu(String),

    /// Misuse of the graph API (unknown tensor, gradient of a non-scalar, ...).
    #[error("graph: {0}")]
    Graph(String),

    /// Training diverged (a non-finite loss) or cannot go on.
    #[error("training: {0}")]
    Training(String),

    /// Data that does not fit what the caller declared.
    #[error("{0}")]
    Input(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Builds a shape error; ops use it to name themselves and the shapes they were given.
pub fn shape_err<T>(op: &'static str, detail: impl Into<String>) -> Result<T> {
    Err(Error::Shape {
        op,
        detail: detail.into(),
    })
}

/// `text` with its control characters escaped (`\u{1b}` for ESC), newlines and tabs kept: what
/// reaches a terminal from a file someone else wrote (a tensor name, a tokenizer's characters)
/// is shown, never interpreted.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let escape = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(escape) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if escape(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// `text` on one line: every control character escaped, newlines too. For messages that quote a
/// name from a file, where a line break can only be someone's attempt to fake another line.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{one_line, printable};

    #[test]
    fn control_characters_are_escaped_and_line_breaks_kept() {
        assert_eq!(printable("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(printable("red \u{1b}[31mname\r"), "red \\u{1b}[31mname\\r");
        assert_eq!(printable("bell\u{7}\u{9b}"), "bell\\u{7}\\u{9b}");
        assert_eq!(one_line("a\nb\u{1b}"), "a\\nb\\u{1b}");
    }
}
