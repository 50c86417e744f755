//! The TLS setup every HTTP client of this crate shares: rustls with the ring provider and the
//! platform's root certificates, read at the first TLS handshake of the process instead of at
//! each client's build. reqwest's own rustls setup reads and parses every system root
//! certificate in `ClientBuilder::build` (a large share of a `process` run's start-up), for
//! servers that are mostly `http://` (a local vLLM, SGLang or `run-api`).

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// A reqwest client builder whose `https://` connections verify servers with the platform's
/// roots (the same verifier reqwest builds itself), loaded once per process when first needed.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(client_config())
}

/// The rustls configuration [`client_builder`] gives reqwest: TLS 1.2 and 1.3 (rustls's safe
/// defaults, as reqwest sets them), ALPN `http/1.1` (reqwest's, without HTTP/2).
fn client_config() -> rustls::ClientConfig {
    let provider = provider();
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports TLS 1.2 and 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(LazyPlatformVerifier { provider }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// The process's crypto provider: ring, installed as the default for the other rustls users
/// (reqwest's `rustls-no-provider` build and hf-hub look it up). rustls 0.23.48 deprecates
/// ring's provider for lacking post-quantum key exchange; the alternative (aws-lc-rs) needs
/// cmake and a C toolchain in every author's build, and the peers here are inference servers
/// and the trajectory API, so ring stays and its deprecation is not passed on to dependents.
#[allow(deprecated)]
fn provider() -> Arc<CryptoProvider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

/// The platform verifier, built (the roots read) at the first certificate to verify.
static PLATFORM: OnceLock<Result<Verifier, rustls::Error>> = OnceLock::new();

/// [`Verifier`] with its roots read at the first handshake; a system without roots fails every
/// handshake with rustls's "No CA certificates were loaded from the system", said once at
/// warning level when first found.
#[derive(Debug)]
struct LazyPlatformVerifier {
    provider: Arc<CryptoProvider>,
}

impl LazyPlatformVerifier {
    fn platform(&self) -> Result<&Verifier, rustls::Error> {
        PLATFORM
            .get_or_init(|| {
                let verifier = Verifier::new(self.provider.clone());
                if let Err(e) = &verifier {
                    tracing::warn!(
                        "cannot read the system's root certificates ({e}): every https:// \
                         connection of this run fails (install ca-certificates, or name a CA \
                         file in SSL_CERT_FILE)"
                    );
                }
                verifier
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl ServerCertVerifier for LazyPlatformVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.platform()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;

    /// Environment variable naming the CA file in the child run of
    /// [`a_server_signed_by_a_platform_root_is_trusted`].
    const CHILD_CA: &str = "HERMES_TLS_TEST_CA";

    /// `openssl s_server -www` on a free port with a certificate for `localhost` signed by a
    /// fresh CA in `dir` (`ca.pem`); killed on drop.
    struct TlsServer {
        child: Child,
        port: u16,
    }

    impl Drop for TlsServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("this test needs the openssl command-line tool (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn tls_server(dir: &Path) -> TlsServer {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=hermes test CA",
            ],
        );
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        );
        std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost\n").unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.pem",
                "-days",
                "2",
                "-extfile",
                "ext.cnf",
            ],
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("openssl")
            .args(["s_server", "-www", "-quiet", "-accept"])
            .arg(port.to_string())
            .args(["-cert", "server.pem", "-key", "server.key"])
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let server = TlsServer { child, port };
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "openssl s_server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    async fn get(port: u16) -> Result<String, String> {
        let client = client_builder().build().map_err(|e| e.to_string())?;
        let response = client
            .get(format!("https://localhost:{port}/"))
            .send()
            .await
            .map_err(|e| format!("{e:?}"))?;
        response.text().await.map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn roots_are_read_at_the_first_handshake_and_an_unknown_issuer_is_refused() {
        let client = client_builder().build().expect("client");
        drop(client);
        assert!(
            PLATFORM.get().is_none(),
            "building a client read the platform's roots"
        );
        let dir = tempfile::tempdir().unwrap();
        let server = tls_server(dir.path());
        let refused = get(server.port)
            .await
            .expect_err("a self-signed CA is trusted");
        assert!(
            refused.contains("UnknownIssuer"),
            "not refused for its issuer: {refused}"
        );
        assert!(PLATFORM.get().is_some(), "the handshake read no roots");
    }

    /// In a child run of this test binary with `SSL_CERT_FILE` naming the test CA (the
    /// platform verifier reads it as the system's roots), the server is trusted.
    #[test]
    fn a_server_signed_by_a_platform_root_is_trusted() {
        if let Ok(port) = std::env::var(CHILD_CA) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let page = runtime
                .block_on(get(port.parse().unwrap()))
                .expect("the server is trusted");
            assert!(page.contains("s_server"), "{page}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let server = tls_server(dir.path());
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tls::tests::a_server_signed_by_a_platform_root_is_trusted",
            ])
            .env(CHILD_CA, server.port.to_string())
            .env("SSL_CERT_FILE", dir.path().join("ca.pem"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "child run failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
