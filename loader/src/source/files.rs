//! Which files a data argument names when it is more than one path: glob patterns in
//! the last part of a path (`data/train-*.parquet`), and the Hugging Face Hub's
//! repository layout, where `split=` picks the files (`data/{split}-*.parquet`,
//! `{config}/{split}-*.parquet`, `{config}/{split}/*.parquet`). Brace patterns are
//! expanded first, by [`super::tar::expand`]. The rules work on names relative to a
//! root, so a local folder and an object-store prefix follow the same ones.

use std::path::{Path, PathBuf};

use super::{Split, Why};

/// True when `s` has a glob character (`*`, `?` or `[`) in its last part.
pub fn is_glob(s: &str) -> bool {
    let last = s.rsplit('/').next().unwrap_or(s);
    last.contains(['*', '?', '['])
}

/// Whether `name` matches the glob `pattern`: `*` any run of characters, `?` one
/// character, `[abc]` / `[a-z]` / `[!a-z]` a set; everything else itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Backtracking over the last `*` only: linear for the patterns file names use.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
                continue;
            }
            Some('?') => {
                pi += 1;
                ni += 1;
                continue;
            }
            Some('[') => {
                if let Some((matched, len)) = class_match(&p[pi..], n[ni]) {
                    if matched {
                        pi += len;
                        ni += 1;
                        continue;
                    }
                } else if n[ni] == '[' {
                    // An unclosed '[' is itself.
                    pi += 1;
                    ni += 1;
                    continue;
                }
            }
            Some(&c) if c == n[ni] => {
                pi += 1;
                ni += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `[...]` at the start of `p` against `c`: (whether it matches, the class's length),
/// or `None` when the bracket is not closed.
fn class_match(p: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negate = matches!(p.get(i), Some('!') | Some('^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while let Some(&x) = p.get(i) {
        if x == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        first = false;
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&y| y != ']') {
            matched |= (x..=p[i + 2]).contains(&c);
            i += 3;
        } else {
            matched |= x == c;
            i += 1;
        }
    }
    None
}

/// The files a local glob names (its last part matched against the names in its
/// folder), sorted. A glob in a folder part is an error.
pub fn glob_local(pattern: &str) -> Result<Vec<PathBuf>, String> {
    glob_local_why(pattern).map_err(String::from)
}

/// [`glob_local`], keeping the I/O error when listing the folder fails.
pub(crate) fn glob_local_why(pattern: &str) -> Result<Vec<PathBuf>, Why> {
    let path = Path::new(pattern);
    let (dir, last) = match (path.parent(), path.file_name()) {
        (Some(d), Some(l)) => (d, l.to_string_lossy().into_owned()),
        _ => return Err(format!("'{pattern}': no file name to match").into()),
    };
    if dir.to_string_lossy().contains(['*', '?', '[']) {
        return Err(
            format!("'{pattern}': a glob may only stand in the last part of the path").into(),
        );
    }
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let listing = |e: std::io::Error| Why::because(format!("{}: {e}", dir.display()), e);
    let entries = std::fs::read_dir(dir).map_err(listing)?;
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(listing)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if glob_match(&last, &name) && e.path().is_file() {
            out.push(dir.join(name));
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(format!("'{pattern}': no file matches").into());
    }
    Ok(out)
}

/// How deep below a root the Hub layout puts its files (`{config}/{split}/x.parquet`).
pub const HUB_DEPTH: usize = 3;

/// The Parquet files under a local folder, as names relative to it with `/`
/// separators, sorted, at most [`HUB_DEPTH`] parts deep. Below the top, a folder whose
/// first file is not Parquet is left at once: an image folder's class folders cost one
/// entry each, not a listing of every image.
pub fn parquet_names_under(root: &Path) -> Result<Vec<String>, std::io::Error> {
    fn walk(dir: &Path, rel: &str, depth: usize, out: &mut Vec<String>) -> std::io::Result<()> {
        let mut subdirs = Vec::new();
        let before = out.len();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let ty = e.file_type()?;
            let full = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if ty.is_dir() {
                subdirs.push((e.path(), full));
            } else if super::parquet::is_parquet_name(&name) {
                out.push(full);
            } else if depth > 0 && out.len() == before {
                return Ok(());
            }
        }
        if depth + 1 < HUB_DEPTH {
            for (path, full) in subdirs {
                walk(&path, &full, depth + 1, out)?;
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, "", 0, &mut out)?;
    out.sort();
    Ok(out)
}

/// The split a file belongs to by the Hub's naming: a folder part named like a split
/// (`{config}/{split}/x.parquet`), or the file name's part before its first `-` or
/// `.` (`data/{split}-00000-of-00002.parquet`).
fn split_of(rel: &str) -> &str {
    let mut parts: Vec<&str> = rel.split('/').collect();
    let file = parts.pop().unwrap_or(rel);
    if let Some(dir) = parts.last().filter(|d| KNOWN_SPLITS.contains(d)) {
        return dir;
    }
    file.split(['-', '.']).next().unwrap_or(file)
}

/// Split names the Hub's viewer and the `datasets` library recognise in folder names.
const KNOWN_SPLITS: &[&str] = &["train", "validation", "valid", "val", "dev", "test"];

/// Whether `rel` belongs to `split`.
fn in_split(rel: &str, split: &str) -> bool {
    let mut parts: Vec<&str> = rel.split('/').collect();
    let file = parts.pop().unwrap_or(rel);
    parts.contains(&split)
        || file.strip_prefix(split).is_some_and(|rest| {
            rest.starts_with('-') || rest.starts_with('_') || rest.starts_with('.')
        })
}

/// The configuration a file belongs to: its folder parts, less the split's and the
/// default `data` folder.
fn config_of<'a>(rel: &'a str, split: &str) -> String {
    let mut parts: Vec<&'a str> = rel.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .filter(|p| *p != split && *p != "data")
        .collect::<Vec<_>>()
        .join("/")
}

/// Picks the files of one split from the Parquet files under a root (`names`, relative
/// and sorted):
/// - for a split by name, the files whose name or folder says that split;
/// - for [`Split::Train`] or [`Split::Test`], when the names say splits (`train`,
///   `validation`, `test`, ...), the `train` split for training, and for evaluation
///   `validation`, else `test`; files whose names say no split, or no such split, are read whole.
///
/// Files of several configurations in the chosen split are an error that names them
/// (give the folder of one). `what` names the root in messages.
pub fn select_split(names: &[String], split: &Split, what: &str) -> Result<Vec<String>, String> {
    let splits = || {
        let mut s: Vec<&str> = names.iter().map(|n| split_of(n)).collect();
        s.sort();
        s.dedup();
        s.join(", ")
    };
    let chosen: Vec<String> = match split.name() {
        Some(s) => {
            let v: Vec<String> = names.iter().filter(|n| in_split(n, s)).cloned().collect();
            if v.is_empty() {
                return Err(format!(
                    "{what}: no Parquet file of split '{s}' (the splits by name: {})",
                    splits()
                ));
            }
            v
        }
        None if !names.iter().any(|n| KNOWN_SPLITS.contains(&split_of(n))) => names.to_vec(),
        None => {
            let wanted: &[&str] = if split.is_train() {
                &["train"]
            } else {
                &["validation", "valid", "val", "test"]
            };
            match wanted.iter().find(|s| names.iter().any(|n| in_split(n, s))) {
                Some(s) => return select_split(names, &Split::named(*s), what),
                None => names.to_vec(),
            }
        }
    };
    let split_name = split.name().unwrap_or("");
    let mut configs: Vec<String> = chosen.iter().map(|n| config_of(n, split_name)).collect();
    configs.sort();
    configs.dedup();
    if configs.len() > 1 {
        return Err(format!(
            "{what}: the files are of several configurations ({}): give the folder of one",
            configs
                .iter()
                .map(|c| if c.is_empty() { "(top)" } else { c.as_str() })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_match(
            "train-*.parquet",
            "train-00000-of-00002.parquet"
        ));
        assert!(!glob_match(
            "train-*.parquet",
            "test-00000-of-00002.parquet"
        ));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("shard-[0-3].tar", "shard-2.tar"));
        assert!(!glob_match("shard-[0-3].tar", "shard-7.tar"));
        assert!(glob_match("shard-[!0-3].tar", "shard-7.tar"));
        assert!(glob_match("*-*-of-*", "train-1-of-2"));
        assert!(!glob_match("*.parquet", "x.parquet.tmp"));
        assert!(glob_match("a[b", "a[b"));
        assert!(is_glob("data/train-*.parquet"));
        assert!(!is_glob("da*ta/train.parquet"));
    }

    #[test]
    fn the_hub_layouts_pick_one_split() {
        let flat = names(&[
            "data/test-00000-of-00001.parquet",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
        ]);
        let train = select_split(&flat, &Split::Train, "r").unwrap();
        assert_eq!(train, flat[1..].to_vec());
        assert_eq!(select_split(&flat, &Split::Test, "r").unwrap(), flat[..1]);
        assert_eq!(
            select_split(&flat, &Split::named("test"), "r").unwrap(),
            flat[..1]
        );
        let err = select_split(&flat, &Split::named("validation"), "r").unwrap_err();
        assert!(
            err.contains("'validation'") && err.contains("test, train"),
            "{err}"
        );

        let nested = names(&[
            "default/test/0000.parquet",
            "default/train/0000.parquet",
            "default/train/0001.parquet",
        ]);
        assert_eq!(
            select_split(&nested, &Split::named("train"), "r").unwrap(),
            nested[1..].to_vec()
        );
        // A split name that starts another's is not that split.
        let tricky = names(&["data/train-0.parquet", "data/trainval-0.parquet"]);
        assert_eq!(
            select_split(&tricky, &Split::named("train"), "r").unwrap(),
            tricky[..1]
        );
    }

    #[test]
    fn several_configurations_are_refused_and_a_flat_folder_is_read_whole() {
        // Splits side by side in one folder: still one split.
        let side = names(&["test-0.parquet", "train-0.parquet"]);
        assert_eq!(select_split(&side, &Split::Train, "r").unwrap(), side[1..]);
        let two = names(&["a/train-0.parquet", "b/train-0.parquet"]);
        let err = select_split(&two, &Split::named("train"), "r").unwrap_err();
        assert!(err.contains("(a, b)"), "{err}");
        let flat = names(&["part-0.parquet", "part-1.parquet"]);
        assert_eq!(select_split(&flat, &Split::Train, "r").unwrap(), flat);
    }

    #[test]
    fn a_local_walk_finds_the_hub_layout_and_skips_image_folders() {
        let dir = std::env::temp_dir().join(format!("stoker-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for f in [
            "README.md",
            "data/train-00000-of-00001.parquet",
            "cfg/test/0000.parquet",
            "cats/0001.jpg",
            "cats/0002.parquet",
            "a/b/c/deep.parquet",
        ] {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        let found = parquet_names_under(&dir).unwrap();
        // cats/ holds an image first or a Parquet file first, as read_dir lists them:
        // either way the Hub's files are there, and the too-deep one is not.
        assert!(found.contains(&"data/train-00000-of-00001.parquet".to_string()));
        assert!(found.contains(&"cfg/test/0000.parquet".to_string()));
        assert!(!found.iter().any(|f| f.contains("deep")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
