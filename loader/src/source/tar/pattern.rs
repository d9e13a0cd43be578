//! Brace patterns naming shards, as WebDataset writes them:
//! `train-{000000..000127}.tar` (a zero-padded numeric range) and `{a,b}.tar` (a list).

/// True when `s` holds a brace pattern to expand.
pub fn is_pattern(s: &str) -> bool {
    s.contains('{') && s.contains('}')
}

/// The most names one pattern may expand to.
pub const MAX_EXPANSION: usize = 1_000_000;

/// Every name `pattern` stands for, in order. Each `{A..B}` is a range of whole
/// numbers (written with as many digits as `A`, which sets the zero-padding), each
/// `{x,y,z}` a list; several braces multiply out left to right.
pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('{') else {
        return Ok(vec![pattern.to_string()]);
    };
    let close = pattern[open..]
        .find('}')
        .map(|i| open + i)
        .ok_or_else(|| format!("'{pattern}': a '{{' without its '}}'"))?;
    let (head, body, tail) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    if body.contains('{') {
        return Err(format!("'{pattern}': nested braces are not supported"));
    }
    let choices: Vec<String> = if let Some((a, b)) = body.split_once("..") {
        let bad = || {
            format!(
                "'{pattern}': '{{{body}}}' is not a range of whole numbers like {{000000..000127}}"
            )
        };
        let lo: u64 = a.trim().parse().map_err(|_| bad())?;
        let hi: u64 = b.trim().parse().map_err(|_| bad())?;
        if hi < lo {
            return Err(format!(
                "'{pattern}': the range {{{body}}} is empty (it ends before it starts)"
            ));
        }
        if hi - lo >= MAX_EXPANSION as u64 {
            return Err(format!(
                "'{pattern}': the range {{{body}}} names more than {MAX_EXPANSION} shards"
            ));
        }
        let width = a.trim().len();
        (lo..=hi).map(|n| format!("{n:0width$}")).collect()
    } else if body.contains(',') {
        body.split(',').map(str::to_string).collect()
    } else {
        return Err(format!(
            "'{pattern}': '{{{body}}}' is neither a range {{A..B}} nor a list {{x,y}}"
        ));
    };
    let rest = expand(tail)?;
    let mut out = Vec::with_capacity(choices.len() * rest.len());
    for c in &choices {
        for r in &rest {
            if out.len() >= MAX_EXPANSION {
                return Err(format!(
                    "'{pattern}' names more than {MAX_EXPANSION} shards"
                ));
            }
            out.push(format!("{head}{c}{r}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_and_lists() {
        assert_eq!(
            expand("train-{000..002}.tar").unwrap(),
            ["train-000.tar", "train-001.tar", "train-002.tar"]
        );
        assert_eq!(
            expand("{a,b}-{8..10}").unwrap(),
            ["a-8", "a-9", "a-10", "b-8", "b-9", "b-10"]
        );
        assert_eq!(expand("plain.tar").unwrap(), ["plain.tar"]);
        assert!(is_pattern("x-{0..1}.tar") && !is_pattern("x.tar"));
    }

    #[test]
    fn refuses_bad_patterns() {
        for (p, want) in [
            ("x-{3..1}.tar", "empty"),
            ("x-{a..b}.tar", "whole numbers"),
            ("x-{0..1.tar", "without"),
            ("x-{0..99999999}.tar", "more than"),
            ("x-{abc}.tar", "neither"),
        ] {
            let e = expand(p).unwrap_err();
            assert!(e.contains(want), "{p}: {e}");
        }
    }
}
