//! The reference pages in `docs/reference/` are generated from the code
//! (`hermes_runtime::reference`); this test fails while a committed page differs from what
//! the code renders, and with `UPDATE_REFERENCE=1` rewrites the pages instead.

use std::path::Path;

use hermes_runtime::reference::{pages, REGENERATE};

#[test]
fn reference_pages_match_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference");
    let update = std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, page) in pages() {
        let path = dir.join(name);
        if update {
            std::fs::create_dir_all(&dir).expect("create docs/reference");
            std::fs::write(&path, &page).unwrap_or_else(|e| panic!("write {name}: {e}"));
            continue;
        }
        let difference = match std::fs::read_to_string(&path) {
            Ok(committed) => first_difference(&committed, &page),
            Err(e) => Some(format!("cannot be read ({e})")),
        };
        if let Some(difference) = difference {
            stale.push(format!("docs/reference/{name}: {difference}"));
        }
    }
    assert!(
        stale.is_empty(),
        "the reference pages are out of date:\n{}\nregenerate them with `{REGENERATE}`",
        stale.join("\n")
    );
}

/// The first line where `committed` and `generated` differ, if they do.
fn first_difference(committed: &str, generated: &str) -> Option<String> {
    if committed == generated {
        return None;
    }
    let (mut old, mut new) = (committed.split('\n'), generated.split('\n'));
    let mut line = 1;
    loop {
        match (old.next(), new.next()) {
            (Some(a), Some(b)) if a == b => line += 1,
            (a, b) => {
                let shown =
                    |l: Option<&str>| l.map_or("(end of file)".to_owned(), |l| format!("{l:?}"));
                return Some(format!(
                    "line {line} differs\n  committed: {}\n  generated: {}",
                    shown(a),
                    shown(b)
                ));
            }
        }
    }
}
