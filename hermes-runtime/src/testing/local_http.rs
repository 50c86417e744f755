//! Serving a test server's router on 127.0.0.1 until its owner goes away.

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Serves `app` on `listener` in a background task; the server shuts down gracefully when the
/// returned sender is dropped (keep it in the server handle).
pub(crate) fn serve_until_dropped(listener: TcpListener, app: Router) -> oneshot::Sender<()> {
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await;
    });
    stop
}
