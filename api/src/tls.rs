//! TLS for the gateway (`serve --api --tls-cert --tls-key`), with rustls: the certificate
//! chain and key read from PEM files, and read again on [`Tls::reload`] (SIGHUP), so that a
//! renewed certificate is served without a restart; connections already open keep theirs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

use crate::ApiError;

/// A certificate and key from files, reloadable.
#[derive(Debug)]
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    config: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    /// Reads the certificate chain at `cert` and the private key at `key` (PEM). Fails,
    /// naming the file, when either cannot be read or they do not belong together.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, ApiError> {
        let config = read(cert, key)?;
        Ok(Tls {
            cert: cert.to_owned(),
            key: key.to_owned(),
            config: RwLock::new(config),
        })
    }

    /// Reads the files again; new connections get the new certificate. On failure the old
    /// one stays in use.
    pub fn reload(&self) -> Result<(), ApiError> {
        let config = read(&self.cert, &self.key)?;
        if let Ok(mut current) = self.config.write() {
            *current = config;
        }
        Ok(())
    }

    /// The configuration new connections get.
    pub(crate) fn current(&self) -> Option<Arc<ServerConfig>> {
        self.config.read().ok().map(|c| c.clone())
    }
}

fn read(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, ApiError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ApiError::Tls(format!("the certificate {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(ApiError::Tls(format!(
            "the certificate {} holds no PEM certificate",
            cert.display()
        )));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| ApiError::Tls(format!("the key {}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            ApiError::Tls(format!(
                "the certificate {} and the key {}: {e}",
                cert.display(),
                key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
