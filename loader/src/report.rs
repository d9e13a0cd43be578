//! Errors as a command line prints them: one line, each cause under the error said
//! once, and text taken from the data (member names, a parser's quotes of them) with
//! its control characters escaped.

use std::error::Error;

/// `text` with control characters (and the invisible ones that reorder text) escaped,
/// so that names taken from a file's headers print as what they are, not as commands
/// to the terminal.
pub fn printable(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `e` and its causes on one line. The library's messages end with their cause's
/// words (a sample error with the decoder's, an I/O error with the OS's) and keep
/// that cause as their source: a cause whose text is already on the line has been
/// said, and so have the causes under it. A cause's text is escaped as
/// [`printable`] escapes it, as the messages above it escape the same words (a tar
/// member's name in the tar crate's error).
pub fn one_line(e: &(dyn Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let raw = c.to_string();
        let text = printable(&raw);
        // Said already, in the message's words: escaped, as the library's messages
        // quote data, or as it is.
        if line.contains(&text) || line.contains(&raw) {
            break;
        }
        line = format!("{line}: {text}");
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Outer(String, #[source] std::io::Error);

    #[test]
    fn a_cause_already_said_is_not_repeated_and_data_text_is_escaped() {
        let io = || std::io::Error::other("name\u{1b}[2J");
        // The message says the cause's words, escaped: the escaped cause is on it.
        let said = Outer(format!("member: {}", printable("name\u{1b}[2J")), io());
        assert_eq!(one_line(&said), "member: name\\u{1b}[2J");
        // A message that does not say them: the cause follows, escaped too.
        let unsaid = Outer("member".into(), io());
        assert_eq!(one_line(&unsaid), "member: name\\u{1b}[2J");
        // A message that says the cause's words raw: said, not repeated.
        let raw = Outer("member: name\u{1b}[2J".into(), io());
        assert_eq!(one_line(&raw), "member: name\u{1b}[2J");
        assert_eq!(printable("plain"), "plain");
    }
}
