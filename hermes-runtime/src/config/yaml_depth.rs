//! A YAML file's nesting, measured before it is parsed: the parser takes tens of seconds to
//! refuse a file nested 100,000 levels deep (a config file is at most a few levels deep), so a
//! file past [`MAX_DEPTH`] is refused at once, naming the line.

/// The deepest nesting a config file may have (block levels, `- ` entries on one line and
/// flow brackets together); a real one needs fewer than ten.
pub(crate) const MAX_DEPTH: usize = 64;

/// The first line (1-based) where `text` nests deeper than `limit`, with the depth there.
pub(crate) fn too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let content = line.trim_start_matches(' ');
        if flow == 0 {
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let indent = line.len() - content.len();
            while indents.last().is_some_and(|&top| indent < top) {
                indents.pop();
            }
            if indents.last().is_none_or(|&top| indent > top) {
                indents.push(indent);
            }
        }
        let dashes = content
            .as_bytes()
            .chunks(2)
            .take_while(|pair| *pair == b"- ")
            .count();
        let base = indents.len() + dashes;
        if base > limit {
            return Some((n + 1, base));
        }
        match flow_depth_after(content, flow, |depth| base + depth > limit) {
            Ok(depth) => flow = depth,
            Err(depth) => return Some((n + 1, base + depth)),
        }
    }
    None
}

/// The flow-bracket depth after `line`, starting at `depth`; `Err(depth)` as soon as
/// `over(depth)` holds. Quoted scalars and comments do not count.
fn flow_depth_after(
    line: &str,
    mut depth: usize,
    over: impl Fn(usize) -> bool,
) -> Result<usize, usize> {
    let mut quote: Option<u8> = None;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(b'"') if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'#' if i == 0 || bytes[i - 1].is_ascii_whitespace() => break,
                b'[' | b'{' => {
                    depth += 1;
                    if over(depth) {
                        return Err(depth);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        i += 1;
    }
    Ok(depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_nest_shallowly() {
        let text = "env:\n  group_size: 4\n  docker_hosts: [\"a\", \"b\"]\nopenai:\n  - base_url: x # [[[\n    model_name: '[[['\n";
        assert_eq!(too_deep(text, 4), None);
    }

    #[test]
    fn deep_flow_and_block_nesting_are_found_at_their_line() {
        let flow = format!(
            "env:\n  x: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(too_deep(&flow, MAX_DEPTH), Some((2, MAX_DEPTH + 1)));
        let block: String = (0..100)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        assert_eq!(
            too_deep(&block, MAX_DEPTH),
            Some((MAX_DEPTH + 1, MAX_DEPTH + 1))
        );
        let dashes = format!("env:\n  {}x\n", "- ".repeat(100));
        assert_eq!(too_deep(&dashes, MAX_DEPTH).map(|(line, _)| line), Some(2));
    }

    #[test]
    fn a_flow_collection_over_several_lines_keeps_its_depth() {
        let text = "a: [[\n  [[\n  1]]]]\nb: 1\n";
        // `a:` is one level, each bracket one more.
        assert_eq!(too_deep(text, 4), Some((2, 5)));
        assert_eq!(too_deep(text, 5), None);
    }
}
