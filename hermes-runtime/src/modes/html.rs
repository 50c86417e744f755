//! The self-contained HTML rollout viewer written next to a groups JSONL file (and by
//! `<bin> view FILE.jsonl` for any Atropos JSONL). What the page shows of each group (its
//! conversations and `group_overrides`, not its tokens and masks, which were 95% of the
//! bytes) is streamed into it as data, never held in memory whole, with a small score
//! index; a `process` run keeps those lines as it writes the JSONL (`ShownLines`), so the
//! viewer does not read the JSONL again. The page's script renders
//! groups lazily, 20 at a time as you scroll, so a 100 MB file opens quickly. Each rollout
//! shows its reward and its conversation: roles, reasoning, tool calls with pretty-printed
//! arguments, and tool results (long ones collapsed). A score range filters rollouts; it is
//! kept in the URL (`#min=0.5&max=1`). No network access is needed.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Seek, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::failures::{count_failures, failures_path};
use crate::atropos::ScoredDataGroup;
use crate::pyjson::to_python_string;

/// What a viewer contains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewerStats {
    /// Groups shown.
    pub groups: usize,
    /// Rollouts shown.
    pub rollouts: usize,
    /// Lines skipped (not JSON, or without `messages` and `scores`).
    pub skipped: usize,
}

/// Per group line: its scores and its number of message lists, as the writer had them.
type KnownIndex = Vec<(Vec<f64>, usize)>;

/// The fields the page needs; everything else is skipped while parsing.
#[derive(Deserialize)]
struct Line {
    scores: Option<Vec<Option<f64>>>,
    messages: Option<Vec<Value>>,
    group_overrides: Option<Value>,
    overrides: Option<Value>,
}

/// The data line the page holds for one group: what its script reads.
#[derive(Serialize)]
struct Shown<M, O, R> {
    messages: M,
    group_overrides: O,
    /// Per-rollout marks (a tampered rollout's `tampered` and `tripwires`).
    overrides: R,
}

/// The page's data lines of the groups a `process` run writes, with their index (scores
/// and number of message lists), kept as the run writes its JSONL: in an unnamed temporary
/// file beside it (gone with this value), so memory stays flat over a long run.
pub(crate) struct ShownLines {
    file: BufWriter<File>,
    index: KnownIndex,
}

impl ShownLines {
    /// Starts an empty set in `dir` (the JSONL's directory).
    pub fn create_in(dir: &Path) -> std::io::Result<Self> {
        Ok(ShownLines {
            file: BufWriter::new(tempfile::tempfile_in(dir)?),
            index: Vec::new(),
        })
    }

    /// Adds the line of `group`, just written to the JSONL (secret values scrubbed, as
    /// there).
    pub fn push(&mut self, group: &ScoredDataGroup) -> std::io::Result<()> {
        let line = to_python_string(&Shown {
            messages: &group.messages,
            group_overrides: &group.group_overrides,
            overrides: &group.overrides,
        });
        self.file
            .write_all(crate::config::redact::scrub(&line).as_bytes())?;
        self.file.write_all(b"\n")?;
        let messages = group.messages.value().map_or(0, Vec::len);
        self.index.push((group.scores.clone(), messages));
        Ok(())
    }

    /// The lines from the first, and their index.
    fn into_parts(self) -> std::io::Result<(impl BufRead, KnownIndex)> {
        let mut file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.rewind()?;
        Ok((BufReader::with_capacity(1 << 20, file), self.index))
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = r#"
body{font-family:system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:.6rem 1.2rem;z-index:1}
h1{font-size:1.15rem;margin:.2rem 0}
.controls{display:flex;gap:1rem;align-items:center;flex-wrap:wrap;font-size:.9rem}
.controls input[type=number]{width:6rem}
main{padding:0 1.2rem}
.group{background:#fff;border:1px solid #ddd;border-radius:6px;margin:1rem 0;padding:.4rem 1rem}
.group h2{font-size:1rem;margin:.4rem 0}
.warn{color:#a00;font-size:.85rem}
.rollout{border-top:1px solid #eee;padding:.5rem 0}
.reward{font-weight:bold;margin-bottom:.3rem}
.reward .score{display:inline-block;min-width:3rem;padding:0 .4rem;border-radius:4px;background:#eee}
.reward .score.good{background:#cfc}.reward .score.bad{background:#fcc}.reward .tampered{color:#b00;font-weight:bold}
.msg{margin:.3rem 0;padding:.3rem .6rem;border-radius:4px;border-left:4px solid #ccc}
.msg pre{white-space:pre-wrap;word-break:break-word;margin:.2rem 0;font-family:ui-monospace,monospace;font-size:.82rem}
.role{font-weight:bold;font-size:.8rem;text-transform:uppercase;letter-spacing:.03em}
.system{background:#eef;border-color:#88c}.user{background:#efe;border-color:#8b8}
.assistant{background:#ffe;border-color:#cc8}.tool{background:#f3f3f3;border-color:#999}
.call{background:#fff6ee;border:1px solid #e8c8a8;border-radius:4px;padding:.2rem .5rem;margin:.3rem 0}
.call-name{font-family:ui-monospace,monospace;color:#a40;font-weight:bold}
.gen{font-size:.75rem;color:#666}
details summary{cursor:pointer;font-size:.8rem;color:#555}
#more{display:block;margin:1rem auto;padding:.4rem 1.2rem}
footer{color:#666;font-size:.8rem;padding:0 1.2rem 2rem}
"#;

const SCRIPT: &str = r##"
(function () {
  "use strict";
  var PAGE = 20, LONG = 2000;
  var dataEl = document.getElementById("data"), indexEl = document.getElementById("index");
  var lines = dataEl.textContent.split("\n").filter(function (l) { return l.length > 0; });
  var index = JSON.parse(indexEl.textContent);
  // The text now lives in `lines`; dropping the elements keeps one copy in memory.
  dataEl.remove();
  indexEl.remove();
  var main = document.getElementById("groups"), more = document.getElementById("more");
  var minBox = document.getElementById("min"), maxBox = document.getElementById("max");
  var count = document.getElementById("count");
  var matches = [], shown = 0, filter = { min: -Infinity, max: Infinity };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function textOf(content) {
    if (content === null || content === undefined) return "";
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.map(function (p) { return p && p.text ? p.text : ""; }).join("");
    return JSON.stringify(content);
  }
  function pretty(args) {
    if (typeof args !== "string") return JSON.stringify(args, null, 2);
    try { return JSON.stringify(JSON.parse(args), null, 2); } catch (e) { return args; }
  }
  function pre(text) {
    if (text.length <= LONG) return el("pre", null, text);
    var d = el("details"), s = el("summary", null, text.length + " characters");
    d.appendChild(s); d.appendChild(el("pre", null, text));
    return d;
  }
  function inRange(s) { return s !== null && s >= filter.min && s <= filter.max; }
  function fmt(s) { return s === null ? "null" : String(s); }

  function renderMessage(m, callNames) {
    var role = typeof m.role === "string" ? m.role : "?";
    var cls = ["system", "user", "assistant", "tool"].indexOf(role) >= 0 ? role : "tool";
    var box = el("div", "msg " + cls);
    var label = role;
    if (role === "tool") {
      var name = callNames[m.tool_call_id];
      label = "tool result" + (name ? " · " + name : "");
    }
    box.appendChild(el("div", "role", label));
    var reasoning = m.reasoning_content || m.reasoning;
    if (reasoning) {
      var d = el("details"); d.appendChild(el("summary", null, "thinking"));
      d.appendChild(el("pre", null, textOf(reasoning))); box.appendChild(d);
    }
    var text = textOf(m.content);
    if (text.length > 0) box.appendChild(pre(text));
    (Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach(function (c) {
      var f = c.function || {}, call = el("div", "call");
      call.appendChild(el("span", "call-name", "\u2192 " + (f.name || "?")));
      call.appendChild(el("pre", null, pretty(f.arguments === undefined ? "" : f.arguments)));
      box.appendChild(call);
    });
    var gen = generation(m);
    if (gen) box.appendChild(el("div", m.finish_reason === "length" ? "gen warn" : "gen", gen));
    return box;
  }

  // How an assistant turn's generation ended and its token counts, one line.
  function generation(m) {
    var parts = [];
    if (typeof m.finish_reason === "string") {
      parts.push(m.finish_reason === "length" ? "cut at max_tokens (finish_reason length)" : "finish_reason " + m.finish_reason);
    }
    var u = m.usage || {};
    if (typeof u.prompt_tokens === "number") parts.push(u.prompt_tokens + " prompt tokens");
    if (typeof u.completion_tokens === "number") parts.push(u.completion_tokens + " completion tokens");
    return parts.join(" \u00b7 ");
  }

  function renderGroup(i) {
    var g = JSON.parse(lines[i]), entry = index[i];
    var section = el("section", "group");
    section.id = "group-" + entry[0];
    var mean = entry[1].filter(function (s) { return s !== null; });
    mean = mean.length ? mean.reduce(function (a, b) { return a + b; }, 0) / mean.length : null;
    section.appendChild(el("h2", null, "Group " + entry[0] + " \u2014 " + entry[1].length + " rollouts, mean reward " + (mean === null ? "-" : mean.toFixed(3))));
    if (g.group_overrides && g.group_overrides.placeholder_tokens === true) {
      section.appendChild(el("p", "warn", "Phase 1 group: tokens are placeholders, not trainable."));
    }
    entry[1].forEach(function (score, j) {
      if (!inRange(score)) return;
      var r = el("div", "rollout");
      r.dataset.score = fmt(score);
      var head = el("div", "reward", "Rollout " + (j + 1) + " \u2014 Reward: ");
      head.appendChild(el("span", "score" + (score > 0 ? " good" : (score !== null && score < 0 ? " bad" : "")), fmt(score)));
      var mark = Array.isArray(g.overrides) && g.overrides[j];
      if (mark && mark.tampered === true) {
        head.appendChild(el("span", "tampered", " TAMPERED"));
        r.appendChild(el("p", "warn", "Tripwires fired before verification (not verified; scored tampered_reward): " + String(mark.tripwires || "")));
      }
      r.appendChild(head);
      var conv = Array.isArray(g.messages[j]) ? g.messages[j] : [];
      var callNames = {};
      conv.forEach(function (m) {
        (Array.isArray(m.tool_calls) ? m.tool_calls : []).forEach(function (c) {
          if (c && c.id) callNames[c.id] = c.function && c.function.name;
        });
      });
      conv.forEach(function (m) { r.appendChild(renderMessage(m || {}, callNames)); });
      section.appendChild(r);
    });
    return section;
  }

  function renderMore() {
    var end = Math.min(shown + PAGE, matches.length);
    for (; shown < end; shown++) main.appendChild(renderGroup(matches[shown]));
    more.hidden = shown >= matches.length;
  }

  function num(v, dflt) { var x = parseFloat(v); return isNaN(x) ? dflt : x; }

  function apply(updateHash) {
    filter = { min: num(minBox.value, -Infinity), max: num(maxBox.value, Infinity) };
    matches = [];
    var rollouts = 0;
    for (var i = 0; i < index.length; i++) {
      var n = index[i][1].filter(inRange).length;
      if (n > 0) { matches.push(i); rollouts += n; }
    }
    main.textContent = "";
    shown = 0;
    count.textContent = matches.length + " of " + index.length + " groups, " + rollouts + " rollouts match";
    renderMore();
    if (updateHash) {
      var parts = [];
      if (minBox.value !== "") parts.push("min=" + encodeURIComponent(minBox.value));
      if (maxBox.value !== "") parts.push("max=" + encodeURIComponent(maxBox.value));
      history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
    }
  }

  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var p = kv.split("=");
    if (p[0] === "min") minBox.value = decodeURIComponent(p[1] || "");
    if (p[0] === "max") maxBox.value = decodeURIComponent(p[1] || "");
  });
  minBox.addEventListener("input", function () { apply(true); });
  maxBox.addEventListener("input", function () { apply(true); });
  more.addEventListener("click", renderMore);
  if ("IntersectionObserver" in window) {
    new IntersectionObserver(function (es) { if (es.some(function (e) { return e.isIntersecting; })) renderMore(); }).observe(more);
  }
  apply(false);
})();
"##;

/// Streams the viewer for the JSONL in `input` to `out`. Lines without `messages` and
/// `scores` are skipped, as upstream does; a length mismatch is cut to the shorter.
pub fn render(
    title: &str,
    notice: Option<&str>,
    input: impl BufRead,
    out: &mut impl Write,
) -> std::io::Result<ViewerStats> {
    render_indexed(title, notice, input, out, &[])
}

/// The scores of one group line as the index shows them: cut to the rollouts the line has
/// messages for, non-finite ones as `null`.
fn index_scores(scores: &[Option<f64>], rollouts: usize) -> Vec<Option<f64>> {
    scores
        .iter()
        .take(rollouts)
        .map(|s| s.filter(|v| v.is_finite()))
        .collect()
}

/// [`render`] with the index of the first lines already known (`known[k]` = the scores
/// and the number of message lists of the k-th non-empty line, as its writer had them):
/// those lines are already the page's data (`ShownLines`) and are copied as they are.
/// Lines past `known` are parsed.
fn render_indexed(
    title: &str,
    notice: Option<&str>,
    mut input: impl BufRead,
    out: &mut impl Write,
    known: &[(Vec<f64>, usize)],
) -> std::io::Result<ViewerStats> {
    let notice = notice
        .map(|n| format!("<p class=\"warn\" id=\"failures\">{}</p>", escape(n)))
        .unwrap_or_default();
    write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>{STYLE}</style></head><body>\n\
         <header><h1>{t}</h1>{notice}<div class=\"controls\">\
         <label>Reward from <input id=\"min\" type=\"number\" step=\"any\" placeholder=\"min\"></label>\
         <label>to <input id=\"max\" type=\"number\" step=\"any\" placeholder=\"max\"></label>\
         <span id=\"count\"></span></div></header>\n<main id=\"groups\"></main>\
         <button id=\"more\" type=\"button\">Show more</button>\n\
         <script type=\"application/x-ndjson\" id=\"data\">\n",
        t = escape(title)
    )?;
    let mut index = Vec::new();
    let mut stats = ViewerStats {
        groups: 0,
        rollouts: 0,
        skipped: 0,
    };
    let (mut line, mut n, mut nonempty) = (String::new(), 0, 0);
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        n += 1;
        let text = line.strip_suffix('\n').unwrap_or(&line);
        if text.trim().is_empty() {
            continue;
        }
        nonempty += 1;
        let (scores, shown) = match known.get(nonempty - 1) {
            Some((scores, messages)) => {
                let scores: Vec<Option<f64>> = scores.iter().copied().map(Some).collect();
                (index_scores(&scores, *messages), None)
            }
            None => match serde_json::from_str::<Line>(text) {
                Ok(Line {
                    scores: Some(scores),
                    messages: Some(messages),
                    group_overrides,
                    overrides,
                }) => (
                    index_scores(&scores, messages.len()),
                    Some(to_python_string(&Shown {
                        messages,
                        group_overrides,
                        overrides,
                    })),
                ),
                _ => {
                    stats.skipped += 1;
                    continue;
                }
            },
        };
        stats.groups += 1;
        stats.rollouts += scores.len();
        index.push((n, scores));
        let text = shown.as_deref().unwrap_or(text);
        // `<` only occurs inside JSON strings, where `\u003c` means the same; this keeps
        // `</script>` and `<!--` in the data from ending the element.
        if text.contains('<') {
            out.write_all(text.replace('<', "\\u003c").as_bytes())?;
        } else {
            out.write_all(text.as_bytes())?;
        }
        out.write_all(b"\n")?;
    }
    let index = serde_json::to_string(&index).expect("the index serializes");
    write!(
        out,
        "</script>\n<script type=\"application/json\" id=\"index\">{index}</script>\n\
         <footer id=\"summary\">{} groups, {} rollouts</footer>\n<script>{SCRIPT}</script>\n</body></html>\n",
        stats.groups, stats.rollouts
    )?;
    Ok(stats)
}

/// Writes the viewer of `jsonl_path` to `html_path`.
pub(crate) fn write_viewer_to(jsonl_path: &Path, html_path: &Path) -> std::io::Result<ViewerStats> {
    let input = BufReader::with_capacity(1 << 20, File::open(jsonl_path)?);
    write_viewer(jsonl_path, html_path, input, &[])
}

/// [`write_viewer_to`] for the JSONL a `process` run wrote, from the lines it kept.
pub(crate) fn write_viewer_of_run(
    jsonl_path: &Path,
    html_path: &Path,
    lines: ShownLines,
) -> std::io::Result<ViewerStats> {
    let (input, known) = lines.into_parts()?;
    write_viewer(jsonl_path, html_path, input, &known)
}

/// The viewer of `jsonl_path` from `input` (its lines, or those of `ShownLines` with their
/// index in `known`), written to `html_path`.
fn write_viewer(
    jsonl_path: &Path,
    html_path: &Path,
    input: impl BufRead,
    known: &[(Vec<f64>, usize)],
) -> std::io::Result<ViewerStats> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(html_path)?);
    let title = jsonl_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let failures = failures_path(jsonl_path);
    let notice = count_failures(&failures)
        .filter(|c| c.total() > 0)
        .map(|c| {
            format!(
                "{c} items not shown: their rollouts kept failing for reasons that are not the model's \
                 (see {})",
                failures
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            )
        });
    let stats = render_indexed(&title, notice.as_deref(), input, &mut out, known)?;
    out.flush()?;
    if stats.skipped > 0 {
        tracing::warn!(
            "{}: {} lines without messages and scores were skipped in the viewer",
            jsonl_path.display(),
            stats.skipped
        );
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeds_groups_with_an_index_and_skips_other_lines() {
        let line = r#"{"tokens": [[1], [2]], "masks": [[1], [2]], "scores": [0.5, 1.0, 3.0], "messages": [[{"role": "user", "content": "</script><b>hi</b>"}], [{"role": "user", "content": "x"}]]}"#;
        let input = format!("{line}\n{{\"tokens\": []}}\nnot json\n\n");
        let mut out = Vec::new();
        let stats = render(
            "t<1>",
            Some("2 (2 llm) items <not shown>"),
            input.as_bytes(),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            stats,
            ViewerStats {
                groups: 1,
                rollouts: 2,
                skipped: 2
            }
        );
        let html = String::from_utf8(out).unwrap();
        assert!(html.contains("<title>t&lt;1&gt;</title>"));
        assert!(
            html.contains(r#"<p class="warn" id="failures">2 (2 llm) items &lt;not shown&gt;</p>"#)
        );
        assert!(html.contains(r#"[[1,[0.5,1.0]]]"#), "{html}");
        assert!(html.contains(r"\u003c/script>\u003cb>hi\u003c/b>"));
        assert!(!html.contains("masks"), "tokens and masks are not embedded");
        assert_eq!(
            html.matches("</script>").count(),
            3,
            "only the three script ends"
        );
        assert!(html.contains("1 groups, 2 rollouts"));
    }

    /// A `process` run's page, from the lines it kept, is the page `view` makes of its JSONL:
    /// a group's conversations and overrides (per-rollout ones too: the `tampered` marks),
    /// without its tokens and masks.
    #[test]
    fn a_runs_kept_lines_give_the_page_view_makes_of_its_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let groups = [
            r#"{"tokens": [[1, 2], [3]], "masks": [[-100, 2], [3]], "scores": [0.5, 1.0], "messages": [[{"role": "user", "content": "<a> 1.5e300"}], [{"role": "assistant", "content": "é"}]], "group_overrides": {"placeholder_tokens": true}, "overrides": [{"tampered": true, "tripwires": "w"}, {}]}"#,
            r#"{"tokens": [[1]], "masks": [[1]], "scores": [1.0], "messages": [[]]}"#,
        ];
        let jsonl = dir.path().join("out.jsonl");
        let mut kept = ShownLines::create_in(dir.path()).unwrap();
        let mut text = String::new();
        for g in groups {
            let mut group: ScoredDataGroup = serde_json::from_str(g).unwrap();
            group.fill_absent_nulls();
            text.push_str(&to_python_string(&group));
            text.push('\n');
            kept.push(&group).unwrap();
        }
        std::fs::write(&jsonl, text).unwrap();
        let (viewed, run) = (dir.path().join("viewed.html"), dir.path().join("run.html"));
        let a = write_viewer_to(&jsonl, &viewed).unwrap();
        let b = write_viewer_of_run(&jsonl, &run, kept).unwrap();
        assert_eq!(a, b);
        let page = std::fs::read_to_string(&run).unwrap();
        assert_eq!(std::fs::read_to_string(&viewed).unwrap(), page);
        assert!(
            page.contains(r#"{"messages": [[{"role": "user", "content": "\u003ca> 1.5e300"}]"#),
            "{page}"
        );
        assert!(page.contains(
            r#""group_overrides": {"placeholder_tokens": true}, "overrides": [{"tampered": true, "tripwires": "w"}, {}]}"#
        ));
        assert!(page.contains(r#""group_overrides": null, "overrides": null}"#));
        assert!(!page.contains("masks") && !page.contains("-100"), "{page}");
        assert!(page.contains("[[1,[0.5,1.0]],[2,[1.0]]]"));

        let nan = [(vec![f64::NAN, 1.0], 2)];
        let mut out = Vec::new();
        render_indexed("t", None, groups[0].as_bytes(), &mut out, &nan).unwrap();
        assert!(String::from_utf8(out).unwrap().contains("[[1,[null,1.0]]]"));
    }
}
