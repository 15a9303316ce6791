//! Where email goes, named by a URL, and the lettre transport built from it.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::transport::smtp::{AsyncSmtpTransport, PoolConfig};
use lettre::{AsyncTransport, Tokio1Executor};

/// How an SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// `smtp://…?tls=required` (the default): STARTTLS, and a server that
    /// does not offer it is an error.
    Required,
    /// `smtp://…?tls=starttls`: STARTTLS when the server offers it, plain
    /// text otherwise. Not safe against an active attacker.
    Opportunistic,
    /// `smtp://…?tls=none`: plain text, for a relay on the same host.
    None,
    /// `smtps://…`: TLS from the first byte (port 465).
    Implicit,
}

/// A parsed `email.transport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportUrl {
    Smtp { host: String, port: u16, tls: TlsMode, user: Option<String>, password: Option<String> },
    File { dir: PathBuf },
}

fn decode(s: &str) -> String {
    percent_decode(s)
}

/// `%XX` decoding for user names and passwords in the URL.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(std::str::from_utf8(hex).unwrap_or("zz"), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl TransportUrl {
    /// Parses a transport URL; the error says what is accepted.
    pub fn parse(s: &str) -> Result<TransportUrl, String> {
        const EXPECTED: &str = "smtp://[USER:PASS@]HOST[:PORT][?tls=required|starttls|none], \
                                smtps://[USER:PASS@]HOST[:PORT] or file:///DIR";
        let url = url::Url::parse(s).map_err(|e| format!("{EXPECTED} ({e})"))?;
        match url.scheme() {
            "file" => {
                let dir = url.to_file_path().map_err(|()| format!("{EXPECTED} (file:// needs an absolute path)"))?;
                Ok(TransportUrl::File { dir })
            }
            scheme @ ("smtp" | "smtps") => {
                let host = url
                    .host_str()
                    .filter(|h| !h.is_empty())
                    .ok_or_else(|| format!("{EXPECTED} (no host)"))?
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned();
                let mut tls = if scheme == "smtps" { TlsMode::Implicit } else { TlsMode::Required };
                for (k, v) in url.query_pairs() {
                    match (k.as_ref(), v.as_ref(), scheme) {
                        ("tls", "required", "smtp") => tls = TlsMode::Required,
                        ("tls", "starttls" | "opportunistic", "smtp") => tls = TlsMode::Opportunistic,
                        ("tls", "none", "smtp") => tls = TlsMode::None,
                        ("tls", other, "smtp") => {
                            return Err(format!("tls=required, tls=starttls or tls=none (got tls={other})"));
                        }
                        (other, _, _) => return Err(format!("{EXPECTED}, with no parameter but tls= (got {other:?})")),
                    }
                }
                let default_port = match tls {
                    TlsMode::Implicit => 465,
                    TlsMode::Required | TlsMode::Opportunistic => 587,
                    TlsMode::None => 25,
                };
                let user = Some(url.username()).filter(|u| !u.is_empty()).map(decode);
                let password = url.password().map(decode);
                if user.is_some() != password.is_some() {
                    return Err(format!("{EXPECTED}, with both a user and a password or neither"));
                }
                Ok(TransportUrl::Smtp { host, port: url.port().unwrap_or(default_port), tls, user, password })
            }
            other => Err(format!("{EXPECTED} (got scheme {other:?})")),
        }
    }

    pub fn is_file(&self) -> bool {
        matches!(self, TransportUrl::File { .. })
    }

    /// The URL with any password replaced, for logs and error messages.
    pub fn redacted(s: &str) -> String {
        match url::Url::parse(s) {
            Ok(mut u) => {
                if u.password().is_some() {
                    let _ = u.set_password(Some("***"));
                }
                u.to_string()
            }
            Err(_) => "(not a URL)".into(),
        }
    }

    /// What `Sent` records as the transport: the host, never credentials.
    pub fn describe(&self) -> String {
        match self {
            TransportUrl::Smtp { host, port, .. } => format!("smtp {host}:{port}"),
            TransportUrl::File { dir } => format!("file {}", dir.display()),
        }
    }

    /// An SMTP transport for this URL. `pool_size` 0 gives a pool of one
    /// that the caller shuts after each message (one connection per message).
    /// `ca_file` is `email.tls_ca_file`.
    pub fn smtp(
        &self,
        timeout: Duration,
        pool_size: u32,
        ca_file: Option<&Path>,
    ) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
        let TransportUrl::Smtp { host, port, tls, user, password } = self else {
            return Err("not an SMTP transport".into());
        };
        let params = || tls_parameters(host, ca_file);
        let tls = match tls {
            TlsMode::Required => Tls::Required(params()?),
            TlsMode::Opportunistic => Tls::Opportunistic(params()?),
            TlsMode::None => Tls::None,
            TlsMode::Implicit => Tls::Wrapper(params()?),
        };
        let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host.as_str())
            .port(*port)
            .tls(tls)
            .timeout(Some(timeout))
            .pool_config(PoolConfig::new().max_size(pool_size.max(1)).idle_timeout(Duration::from_secs(60)));
        if let (Some(u), Some(p)) = (user, password) {
            b = b.credentials(Credentials::new(u.clone(), p.clone()));
        }
        Ok(b.build())
    }
}

/// The certificates an SMTP server's may chain to: the built-in Mozilla
/// roots (webpki-roots), the operating system's store (rustls-native-certs,
/// which also reads `SSL_CERT_FILE` and `SSL_CERT_DIR`), and the PEM bundle
/// of `email.tls_ca_file`. lettre's default with rustls was the built-in
/// roots alone, so a relay whose certificate a private CA issued failed
/// every handshake with `UnknownIssuer`, whatever the system trusted.
pub fn tls_parameters(host: &str, ca_file: Option<&Path>) -> Result<TlsParameters, String> {
    let mut b = TlsParameters::builder(host.to_owned()).certificate_store(CertificateStore::WebpkiRoots);
    for der in system_roots() {
        b = b.add_root_certificate(der.clone());
    }
    if let Some(path) = ca_file {
        b = b.add_root_certificate(read_ca_file(path)?);
    }
    b.build().map_err(|e| format!("TLS setup for {host}: {e}"))
}

/// The CA certificates in a PEM file, checked: at least one certificate,
/// each one usable as a trust anchor.
pub fn read_ca_file(path: &Path) -> Result<Certificate, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    use rustls::pki_types::pem::PemObject;
    let ders = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{} is not a PEM certificate bundle: {e:?}", path.display()))?;
    if ders.is_empty() {
        return Err(format!("{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", path.display()));
    }
    let mut probe = rustls::RootCertStore::empty();
    for der in &ders {
        probe
            .add(der.clone())
            .map_err(|e| format!("{}: a certificate cannot be a trust anchor: {e}", path.display()))?;
    }
    Certificate::from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))
}

/// The operating system's trusted certificates, read once per process;
/// ones rustls cannot use as trust anchors are skipped (one bad file in
/// `/etc/ssl/certs` must not stop all mail).
fn system_roots() -> &'static [Certificate] {
    static ROOTS: std::sync::OnceLock<Vec<Certificate>> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::debug!(error = %e, "a system certificate could not be loaded");
        }
        let mut probe = rustls::RootCertStore::empty();
        found
            .certs
            .into_iter()
            .filter(|der| probe.add(der.clone()).is_ok())
            .filter_map(|der| Certificate::from_der(der.to_vec()).ok())
            .collect()
    })
}

/// One connection per message: a fresh single-connection transport, shut
/// (QUIT) after the send.
pub async fn send_unpooled(
    url: &TransportUrl,
    timeout: Duration,
    ca_file: Option<&Path>,
    envelope: &lettre::address::Envelope,
    bytes: &[u8],
) -> Result<lettre::transport::smtp::response::Response, super::classify::SendFailure> {
    let t = url.smtp(timeout, 1, ca_file).map_err(super::classify::SendFailure::Setup)?;
    let r = t.send_raw(envelope, bytes).await.map_err(super::classify::SendFailure::Smtp);
    t.shutdown().await;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_urls() {
        assert_eq!(
            TransportUrl::parse("smtp://u:p%40ss@mail.example.com:2525?tls=none").unwrap(),
            TransportUrl::Smtp {
                host: "mail.example.com".into(),
                port: 2525,
                tls: TlsMode::None,
                user: Some("u".into()),
                password: Some("p@ss".into())
            }
        );
        let TransportUrl::Smtp { port, tls, .. } = TransportUrl::parse("smtp://relay").unwrap() else { panic!() };
        assert_eq!((port, tls), (587, TlsMode::Required));
        let TransportUrl::Smtp { port, tls, .. } = TransportUrl::parse("smtps://relay").unwrap() else { panic!() };
        assert_eq!((port, tls), (465, TlsMode::Implicit));
        let TransportUrl::Smtp { tls, .. } = TransportUrl::parse("smtp://relay?tls=starttls").unwrap() else {
            panic!()
        };
        assert_eq!(tls, TlsMode::Opportunistic);
    }

    #[test]
    fn file_urls_and_refusals() {
        assert_eq!(TransportUrl::parse("file:///tmp/mail").unwrap(), TransportUrl::File { dir: "/tmp/mail".into() });
        assert!(TransportUrl::parse("smtp://relay?tls=maybe").unwrap_err().contains("maybe"));
        assert!(TransportUrl::parse("http://relay").unwrap_err().contains("http"));
        assert!(TransportUrl::parse("smtp://u@relay").unwrap_err().contains("password"));
        assert_eq!(TransportUrl::redacted("smtp://u:secret@h"), "smtp://u:***@h");
    }
}
