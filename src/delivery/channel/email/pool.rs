//! SMTP connections with `TCP_NODELAY`, pooled or one per message, for
//! `smtp://` transports (plain or STARTTLS).
//!
//! Why not lettre's own pool: lettre writes a message's body and its closing
//! `.` as two writes on a socket without `TCP_NODELAY`, so Nagle's algorithm
//! holds the `.` until the server's delayed ACK, about 40 ms per message on
//! Linux. Here lettre still speaks SMTP (`AsyncSmtpConnection`), over a
//! `TcpStream` we open with `TCP_NODELAY` set. `smtps://` (implicit TLS)
//! keeps lettre's transport, which owns the TLS handshake there.

use std::sync::Mutex;
use std::time::Duration;

use lettre::address::Envelope;
use lettre::transport::smtp::authentication::{Credentials, DEFAULT_MECHANISMS};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use lettre::transport::smtp::response::Response;
use tokio::time::Instant;

use super::classify::SendFailure;
use super::transport::TlsMode;

/// A connection idle longer than this is checked with NOOP before reuse.
const CHECK_AFTER: Duration = Duration::from_secs(2);
/// A connection idle longer than this is closed rather than reused.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

pub struct NoDelaySmtp {
    host: String,
    port: u16,
    tls: TlsMode,
    /// Built once (the trust anchors are a few hundred certificates), used
    /// for every connection's STARTTLS.
    tls_params: Option<TlsParameters>,
    credentials: Option<Credentials>,
    timeout: Duration,
    hello: ClientId,
    /// `None`: one connection per message (QUIT after each).
    idle: Option<Mutex<Vec<(AsyncSmtpConnection, Instant)>>>,
    max_idle: usize,
}

impl NoDelaySmtp {
    pub fn new(
        host: String,
        port: u16,
        tls: TlsMode,
        tls_params: Option<TlsParameters>,
        credentials: Option<Credentials>,
        timeout: Duration,
        pool: Option<usize>,
    ) -> NoDelaySmtp {
        NoDelaySmtp {
            host,
            port,
            tls,
            tls_params,
            credentials,
            timeout,
            hello: ClientId::default(),
            max_idle: pool.unwrap_or(0),
            idle: pool.map(|_| Mutex::new(Vec::new())),
        }
    }

    async fn connect(&self) -> Result<AsyncSmtpConnection, SendFailure> {
        let io = |what: &str, e: std::io::Error| SendFailure::Io(format!("{what} {}:{}: {e}", self.host, self.port));
        let stream = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| io("cannot connect to", e))?;
        stream.set_nodelay(true).map_err(|e| io("cannot set TCP_NODELAY on the connection to", e))?;
        let mut conn = AsyncSmtpConnection::connect_with_transport(Box::new(stream), &self.hello)
            .await
            .map_err(SendFailure::Smtp)?;
        let params = || {
            self.tls_params.clone().ok_or_else(|| SendFailure::Setup(format!("no TLS parameters for {}", self.host)))
        };
        match self.tls {
            TlsMode::Required => conn.starttls(params()?, &self.hello).await.map_err(SendFailure::Smtp)?,
            TlsMode::Opportunistic if conn.can_starttls() => {
                conn.starttls(params()?, &self.hello).await.map_err(SendFailure::Smtp)?;
            }
            TlsMode::Opportunistic | TlsMode::None => {}
            TlsMode::Implicit => return Err(SendFailure::Setup("implicit TLS is not handled here".into())),
        }
        if let Some(c) = &self.credentials {
            conn.auth(DEFAULT_MECHANISMS, c).await.map_err(SendFailure::Smtp)?;
        }
        Ok(conn)
    }

    async fn checkout(&self) -> Result<AsyncSmtpConnection, SendFailure> {
        if let Some(idle) = &self.idle {
            loop {
                let Some((mut conn, since)) = idle.lock().unwrap_or_else(|p| p.into_inner()).pop() else { break };
                let age = since.elapsed();
                if age < CHECK_AFTER || (age < IDLE_LIMIT && conn.test_connected().await) {
                    return Ok(conn);
                }
                conn.abort().await;
            }
        }
        self.connect().await
    }

    async fn checkin(&self, mut conn: AsyncSmtpConnection) {
        if let Some(idle) = &self.idle
            && !conn.has_broken()
        {
            let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < self.max_idle {
                idle.push((conn, Instant::now()));
                return;
            }
        }
        // One connection per message, a full pool, or a broken connection.
        if conn.has_broken() {
            conn.abort().await;
        } else {
            let _ = conn.quit().await;
        }
    }

    /// Sends one message; the whole exchange is bounded by the timeout.
    pub async fn send(&self, envelope: &Envelope, bytes: &[u8]) -> Result<Response, SendFailure> {
        let attempt = async {
            let mut conn = self.checkout().await?;
            let result = conn.send(envelope, bytes).await;
            self.checkin(conn).await;
            result.map_err(SendFailure::Smtp)
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(SendFailure::Io(format!(
                "the SMTP server {}:{} did not answer within {}",
                self.host,
                self.port,
                humantime::format_duration(self.timeout)
            ))),
        }
    }
}
