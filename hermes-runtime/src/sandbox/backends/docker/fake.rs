//! A fault-injecting Docker daemon for unit tests: answers each request (one per connection)
//! from a closure given its request line, and records the lines.

use std::sync::{Arc, Mutex};

use bollard::Docker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The request lines a fake daemon received, in order.
#[derive(Clone, Default)]
pub(super) struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    /// Their methods (`GET`, `DELETE`, …).
    pub(super) fn methods(&self) -> Vec<String> {
        self.lines()
            .iter()
            .map(|l| l.split(' ').next().unwrap_or_default().to_owned())
            .collect()
    }

    pub(super) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Starts a daemon answering `(status, JSON body)` per request line; returns a client of it.
pub(super) async fn daemon(
    mut answer: impl FnMut(&str) -> (&'static str, String) + Send + 'static,
) -> (Docker, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Seen::default();
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 8192];
            let n = stream.read(&mut request).await.unwrap_or(0);
            let line = String::from_utf8_lossy(&request[..n])
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            let (status, body) = answer(&line);
            log.0.lock().unwrap().push(line);
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    let docker = Docker::connect_with_http(
        &format!("tcp://{address}"),
        10,
        bollard::API_DEFAULT_VERSION,
    )
    .unwrap();
    (docker, seen)
}
