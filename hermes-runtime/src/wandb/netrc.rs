//! The W&B key `wandb login` saved: `~/.netrc` (or `$NETRC`) holds
//! `machine api.wandb.ai login user password KEY`, which the Python SDK reads when
//! `WANDB_API_KEY` is not set.

use std::path::PathBuf;

/// The `password` of the entry for `host` in the netrc file `text` (a `default` entry counts
/// when no `machine` matches), per the netrc token grammar (`macdef` bodies skipped).
pub fn password_for(text: &str, host: &str) -> Option<String> {
    let mut tokens = Tokens::new(text);
    let mut entry = Entry::None;
    let mut fallback = None;
    while let Some(token) = tokens.next() {
        match token {
            "machine" => entry = Entry::Machine(tokens.next() == Some(host)),
            "default" => entry = Entry::Default,
            "password" => {
                let value = tokens.next()?.to_owned();
                match entry {
                    Entry::Machine(true) => return Some(value),
                    Entry::Default => fallback = Some(value),
                    _ => {}
                }
            }
            "login" | "account" => {
                tokens.next();
            }
            "macdef" => tokens.skip_macro(),
            _ => {}
        }
    }
    fallback
}

/// Which entry the tokens being read belong to.
enum Entry {
    None,
    Machine(bool),
    Default,
}

/// The netrc file the SDK reads: `$NETRC`, else `$HOME/.netrc`.
pub fn path(lookup: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    lookup("NETRC")
        .map(PathBuf::from)
        .or_else(|| lookup("HOME").map(|home| PathBuf::from(home).join(".netrc")))
}

/// The host of an `http(s)://host[:port]/…` URL, as netrc `machine` names it.
pub fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority.split(':').next().unwrap_or(authority)
}

struct Tokens<'a> {
    lines: std::str::Lines<'a>,
    words: std::str::SplitWhitespace<'a>,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str) -> Self {
        Tokens {
            lines: text.lines(),
            words: "".split_whitespace(),
        }
    }

    /// A `macdef` body runs to the next empty line.
    fn skip_macro(&mut self) {
        self.words = "".split_whitespace();
        for line in self.lines.by_ref() {
            if line.trim().is_empty() {
                break;
            }
        }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            if let Some(word) = self.words.next() {
                if word.starts_with('#') {
                    self.words = "".split_whitespace();
                    continue;
                }
                return Some(word);
            }
            self.words = self.lines.next()?.split_whitespace();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_key_wandb_login_writes() {
        let text = "machine github.com login me password gh-token\n\
                    machine api.wandb.ai\n  login user\n  password 0123abcd\n";
        assert_eq!(
            password_for(text, "api.wandb.ai").as_deref(),
            Some("0123abcd")
        );
        assert_eq!(password_for(text, "wandb.example.com"), None);
    }

    #[test]
    fn default_entries_comments_and_macros() {
        let text = "# mine\nmacdef init\nmachine api.wandb.ai password fake\n\n\
                    machine other login x password y\ndefault login anon password dflt\n";
        assert_eq!(password_for(text, "api.wandb.ai").as_deref(), Some("dflt"));
        assert_eq!(password_for(text, "other").as_deref(), Some("y"));
    }

    #[test]
    fn hosts_of_urls() {
        assert_eq!(host_of("https://api.wandb.ai"), "api.wandb.ai");
        assert_eq!(host_of("http://127.0.0.1:8080/x"), "127.0.0.1");
    }
}
