//! The accept loop: hyper serving the router, with the two limits
//! `axum::serve` does not offer.
//!
//! - **A header-read timeout** (`http.header_read_timeout`): a client that
//!   opens a connection and sends half a request header block is cut off
//!   when the time is up. `axum::serve` sets no timer, so such a connection
//!   was held forever: an outside review kept 2,000 of them open for 45 s and
//!   one still open after 150 s (slowloris).
//! - **A bound on open connections** (`http.max_connections`): past it the
//!   loop stops accepting until a connection closes, so a flood waits in the
//!   kernel's backlog instead of taking memory and file descriptors.
//!   Accept-then-close was rejected: it turns every client away, including
//!   the legitimate ones that would have been served a moment later.
//!
//! Everything else is what `axum::serve` does: HTTP/1.1 and HTTP/2 on one
//! port, the peer address for handlers (`ConnectInfo`), and on shutdown no
//! new connections while the open ones finish what they are doing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The limits the loop enforces (from `[http]`).
#[derive(Debug, Clone, Copy)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `app` on `listener` until `shutdown` is cancelled, then waits for
/// the open connections to finish their requests.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, limits: ServerLimits, shutdown: CancellationToken) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut full_logged = false;
    loop {
        // A slot first, then the connection: at the bound, new connections
        // wait in the backlog.
        if slots.available_permits() == 0 && !full_logged {
            tracing::warn!(
                max_connections = limits.max_connections,
                "http.max_connections reached: new connections wait until one closes"
            );
            full_logged = true;
        }
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        if slots.available_permits() > 0 {
            full_logged = false;
        }
        let _ = stream.set_nodelay(true);
        let service = app.clone().map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            req
        });
        let conn = builder
            .serve_connection_with_upgrades(
                TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(service),
            )
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
