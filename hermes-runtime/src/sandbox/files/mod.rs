//! Moving and reading sandbox files safely: tar streams packed and unpacked on blocking
//! threads with bounded memory, the link containment every host-side write obeys, reads
//! capped in size and limited to regular files, and lexical POSIX paths for sandboxes whose
//! file system this process cannot see.

pub(super) mod archive;
pub(super) mod bounded;
pub(super) mod links;
pub(super) mod no_links;
pub(super) mod remote_path;
