//! A spec's part, `name:arg:key=value`, split into its name, plain arguments and
//! options, with the readers of each kind of argument; every error names the part.

use super::number::{parse_number, parse_range, parse_size};
use crate::SpecError;

/// One `name:arg:key=value` part, split up.
pub(super) struct Part<'a> {
    pub(super) text: &'a str,
    pub(super) name: String,
    pub(super) positional: Vec<&'a str>,
    pub(super) options: Vec<(String, &'a str)>,
}

impl<'a> Part<'a> {
    pub(super) fn err(&self, reason: impl Into<String>) -> SpecError {
        SpecError {
            part: self.text.to_string(),
            reason: reason.into(),
        }
    }

    pub(super) fn split(text: &'a str) -> Result<Self, SpecError> {
        let mut fields = text.split(':').map(str::trim);
        let name = fields.next().unwrap_or_default().to_ascii_lowercase();
        let mut part = Part {
            text,
            name,
            positional: Vec::new(),
            options: Vec::new(),
        };
        if part.name.is_empty() {
            return Err(part.err("missing transform name"));
        }
        for f in fields {
            if f.is_empty() {
                return Err(part.err("empty argument (two colons in a row?)"));
            }
            match f.split_once('=') {
                Some((k, v)) => {
                    let k = k.trim().to_ascii_lowercase();
                    if part.options.iter().any(|(seen, _)| *seen == k) {
                        return Err(part.err(format!("option '{k}' given twice")));
                    }
                    part.options.push((k, v.trim()));
                }
                None => part.positional.push(f),
            }
        }
        Ok(part)
    }

    /// Reject options outside `known` and more than `max_positional` plain arguments.
    pub(super) fn expect(&self, max_positional: usize, known: &[&str]) -> Result<(), SpecError> {
        if self.positional.len() > max_positional {
            let extra = self.positional[max_positional];
            return Err(self.err(match max_positional {
                0 => format!("'{}' takes no argument, got '{extra}'", self.name),
                _ => format!("unexpected extra argument '{extra}'"),
            }));
        }
        for (k, _) in &self.options {
            if !known.contains(&k.as_str()) {
                let known = if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                };
                return Err(self.err(format!(
                    "unknown option '{k}' for '{}' (known: {known})",
                    self.name
                )));
            }
        }
        Ok(())
    }

    pub(super) fn option(&self, key: &str) -> Option<&'a str> {
        self.options.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    pub(super) fn size(&self, example: &str) -> Result<(usize, usize, bool), SpecError> {
        let Some(s) = self.positional.first() else {
            return Err(self.err(format!("'{}' needs a size, e.g. {example}", self.name)));
        };
        parse_size(s).map_err(|r| self.err(r))
    }

    pub(super) fn number(&self, key: &str, default: f64) -> Result<f64, SpecError> {
        match self.option(key) {
            None => Ok(default),
            Some(v) => parse_number(v).map_err(|r| self.err(format!("{key}: {r}"))),
        }
    }

    /// The first plain argument as a number (`what` names it in the error).
    pub(super) fn value(&self, what: &str, example: &str) -> Result<f64, SpecError> {
        let Some(v) = self.positional.first() else {
            return Err(self.err(format!("'{}' needs {what}, e.g. {example}", self.name)));
        };
        parse_number(v).map_err(|r| self.err(format!("{what}: {r}")))
    }

    /// A whole number: the first plain argument (`key` None) or an option.
    pub(super) fn count(
        &self,
        key: Option<&str>,
        default: usize,
        example: &str,
    ) -> Result<usize, SpecError> {
        let (what, v) = match key {
            None => ("argument", self.positional.first().copied()),
            Some(k) => (k, self.option(k)),
        };
        match v {
            None if key.is_none() => Err(self.err(format!(
                "'{}' needs a whole number, e.g. {example}",
                self.name
            ))),
            None => Ok(default),
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| self.err(format!("{what}: '{v}' is not a whole number"))),
        }
    }

    /// The `fill` option: one value 0..=255 for every channel (default 0).
    pub(super) fn fill(&self) -> Result<u8, SpecError> {
        match self.option("fill") {
            None => Ok(0),
            Some(v) => v
                .parse::<u8>()
                .map_err(|_| self.err(format!("fill: '{v}' is not a value within 0..=255"))),
        }
    }

    pub(super) fn range(&self, key: &str, default: (f64, f64)) -> Result<(f64, f64), SpecError> {
        match self.option(key) {
            None => Ok(default),
            Some(v) => parse_range(v).map_err(|r| self.err(format!("{key}: {r}"))),
        }
    }
}
