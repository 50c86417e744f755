//! POSIX paths inside a sandbox that is not this host's file system (a container, an ssh
//! host): resolved lexically, since there is no local file system to ask.

/// `/a/./b/../c/` → `/a/c` (`..` above the root stays at the root).
pub(crate) fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The directory holding the absolute path `abs` (`/` for a top-level entry).
pub(crate) fn parent_of(abs: &str) -> String {
    match abs.rfind('/') {
        Some(0) | None => "/".to_owned(),
        Some(i) => abs[..i].to_owned(),
    }
}

/// Where a symbolic link at `abs` pointing at `link` leads.
pub(crate) fn follow_link(abs: &str, link: &str) -> String {
    if link.starts_with('/') {
        normalize(link)
    } else {
        normalize(&format!("{}/{link}", parent_of(abs)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_and_links_followed() {
        assert_eq!(normalize("/root/./a/../b/"), "/root/b");
        assert_eq!(normalize("/a/./b/../c/"), "/a/c");
        assert_eq!(normalize("/../.."), "/");
        assert_eq!(parent_of("/root/x"), "/root");
        assert_eq!(parent_of("/x"), "/");
        assert_eq!(follow_link("/root/l", "../etc/x"), "/etc/x");
        assert_eq!(follow_link("/root/l", "/tmp/./y"), "/tmp/y");
    }
}
