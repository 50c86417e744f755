//! Bounded capture of command output: keeps the first 40% and last 60% of the character
//! budget while streaming, so a command printing gigabytes costs a fixed amount of memory,
//! and the [`ExecOutput`] a finished or killed command's capture becomes.

use std::collections::VecDeque;
use std::time::Duration;

use crate::sandbox::api::ExecOutput;

/// Streaming head/tail capture that reproduces Hermes's truncation exactly.
#[derive(Debug)]
pub struct CappedOutput {
    limit: usize,
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total_bytes: usize,
    total_chars: usize,
}

impl CappedOutput {
    /// A capture that shows at most `limit_chars` characters.
    pub fn new(limit_chars: usize) -> Self {
        // Four bytes per character is enough to hold any UTF-8 text of that many characters.
        let head_cap = limit_chars * 2 / 5 * 4;
        let tail_cap = (limit_chars - limit_chars * 2 / 5) * 4;
        CappedOutput {
            limit: limit_chars,
            head: Vec::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap,
            total_bytes: 0,
            total_chars: 0,
        }
    }

    /// Appends a chunk of raw output.
    pub fn push(&mut self, chunk: &[u8]) {
        self.total_bytes += chunk.len();
        self.total_chars += chunk.iter().filter(|b| (**b & 0xC0) != 0x80).count();
        let room = self.head_cap.saturating_sub(self.head.len());
        let (to_head, rest) = chunk.split_at(room.min(chunk.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest.iter().copied());
        let excess = self.tail.len().saturating_sub(self.tail_cap);
        self.tail.drain(..excess);
    }

    /// Total characters seen (counted on the raw stream).
    pub fn total_chars(&self) -> usize {
        self.total_chars
    }

    /// The text to show: everything when within the limit, else head + marker + tail.
    pub fn finish(self) -> String {
        let head_chars = self.limit * 2 / 5;
        let tail_chars = self.limit - head_chars;
        let mut all = self.head;
        all.extend(self.tail);
        let text = String::from_utf8_lossy(&all).into_owned();
        let count = text.chars().count();
        if self.total_bytes == all.len() && count <= self.limit {
            return text;
        }
        let total = self.total_chars.max(count);
        if total <= self.limit {
            return text;
        }
        let head: String = text.chars().take(head_chars).collect();
        let tail_start = count.saturating_sub(tail_chars);
        let tail: String = text.chars().skip(tail_start).collect();
        let omitted = total - head_chars - tail_chars;
        format!(
            "{head}\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {total} total] ...\n\n{tail}"
        )
    }
}

impl ExecOutput {
    /// The result of a command that ended with `exit_code`.
    pub(crate) fn finished(output: CappedOutput, exit_code: i32) -> Self {
        ExecOutput {
            output: output.finish(),
            exit_code,
            timed_out: false,
        }
    }

    /// The result of a command the deadline killed (exit 124, with Hermes's marker line).
    pub(crate) fn killed_by_deadline(output: CappedOutput, timeout: Duration) -> Self {
        let mut output = output.finish();
        output.push_str(&format!(
            "\n[Command timed out after {}s]",
            timeout.as_secs()
        ));
        ExecOutput {
            output,
            exit_code: 124,
            timed_out: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::api::OUTPUT_LIMIT_CHARS;

    #[test]
    fn short_output_is_unchanged() {
        let mut c = CappedOutput::new(50);
        c.push("héllo\n".as_bytes());
        assert_eq!(c.finish(), "héllo\n");
    }

    #[test]
    fn long_output_keeps_40_percent_head_and_60_percent_tail() {
        let mut c = CappedOutput::new(OUTPUT_LIMIT_CHARS);
        let text: String = (0..120_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        for chunk in text.as_bytes().chunks(4096) {
            c.push(chunk);
        }
        let out = c.finish();
        let expected = format!(
            "{}\n\n... [OUTPUT TRUNCATED - 70000 chars omitted out of 120000 total] ...\n\n{}",
            &text[..20_000],
            &text[90_000..]
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn multibyte_characters_are_counted_as_characters() {
        let mut c = CappedOutput::new(10);
        c.push("ééééééééééééééé".as_bytes());
        let out = c.finish();
        assert!(out.starts_with("éééé\n\n... [OUTPUT TRUNCATED - 5 chars omitted out of 15 total]"));
        assert!(out.ends_with("éééééé"));
    }
}
