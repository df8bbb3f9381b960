//! TLS on every job connection (master <-> workers, worker <-> worker, operator and
//! command line -> master), with mutual authentication against a per-job CA.
//!
//! A job's certificates are five PEM files in one folder (a mounted Kubernetes Secret, or
//! a private folder `linea` made itself): the job CA ([`CA_CERT`]), the master's server
//! certificate and key ([`MASTER_CERT`], [`MASTER_KEY`]; its names are the master Service's
//! DNS names) and one member certificate and key ([`CLIENT_CERT`], [`CLIENT_KEY`]) that
//! workers present to the master and to each other and that the operator and `linea status`
//! present to the master. Workers have no stable DNS names (pods come and go on any IP),
//! so their certificate names [`WORKER_NAME`] and peers check that name instead of the
//! address's host. The CA's private key is never written anywhere: [`JobCertificates`]
//! signs the three certificates and drops it (the operator can derive it again from its
//! own key; see [`JobCertificates::derive`]).
//!
//! TLS is transport security; the job's Bearer secret ([`crate::auth`]) stays the
//! authorization on top of it.

use crate::error::{ProtoError, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ED25519,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::{Path, PathBuf};
use std::time::Duration;
use time::OffsetDateTime;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Folder of the job's certificates when no `--tls-dir` is given.
pub const TLS_DIR_ENV: &str = "LINEA_TLS_DIR";
pub const CA_CERT: &str = "ca.crt";
pub const MASTER_CERT: &str = "master.crt";
pub const MASTER_KEY: &str = "master.key";
pub const CLIENT_CERT: &str = "client.crt";
pub const CLIENT_KEY: &str = "client.key";
/// The DNS name in every member certificate, checked when a worker calls a peer.
pub const WORKER_NAME: &str = "linea-worker";
/// How long a job's certificates are valid: they do not rotate, so longer than any job.
pub const VALIDITY: time::Duration = time::Duration::days(3653);
/// Longest TLS handshake a server waits for (a silent connection holds no task for ever).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which certificate a process presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The master's server certificate.
    Master,
    /// The member certificate: workers (to the master and as a peer server), the operator
    /// and command-line clients.
    Member,
}

impl Role {
    fn files(self) -> (&'static str, &'static str) {
        match self {
            Role::Master => (MASTER_CERT, MASTER_KEY),
            Role::Member => (CLIENT_CERT, CLIENT_KEY),
        }
    }
}

/// The rustls crypto provider of every job connection. The `linea` binary also links
/// aws-lc-rs (through the S3 client), and rustls then refuses to pick one by itself.
pub fn install_crypto_provider() {
    // Err: one is installed already (the operator installs ring itself), which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A process's TLS identity in one job: the job CA it trusts and the certificate it shows.
#[derive(Clone)]
pub struct Tls {
    ca: Certificate,
    /// Always set but in tests of a client that shows no certificate.
    identity: Option<Identity>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(<job certificates>)")
    }
}

impl Tls {
    /// From PEM text; `origin(file)` names where each part came from, for errors. Checks that
    /// each part parses and that the key belongs to the certificate.
    fn from_pem(ca: &str, cert: &str, key: &str, origin: impl Fn(&str) -> PathBuf, role: Role) -> Result<Self> {
        let (cert_file, key_file) = role.files();
        let invalid = |file: &str, message: String| ProtoError::TlsFile { path: origin(file), message };
        let certificates = |file: &str, text: &str| -> Result<Vec<CertificateDer<'static>>> {
            let parsed: Vec<_> = CertificateDer::pem_slice_iter(text.as_bytes())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| invalid(file, format!("not a PEM certificate ({e})")))?;
            if parsed.is_empty() {
                return Err(invalid(file, "no PEM certificate in it".into()));
            }
            Ok(parsed)
        };
        certificates(CA_CERT, ca)?;
        let chain = certificates(cert_file, cert)?;
        let private = PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| invalid(key_file, format!("not a PEM private key ({e})")))?;
        rustls::sign::CertifiedKey::from_der(chain, private, &rustls::crypto::ring::default_provider())
            .map_err(|e| invalid(key_file, format!("not the key of {cert_file} ({e})")))?;
        Ok(Self { ca: Certificate::from_pem(ca), identity: Some(Identity::from_pem(cert, key)) })
    }

    /// A client that trusts `ca` but has no certificate of its own (tests of refusals).
    #[cfg(test)]
    pub(crate) fn without_identity(ca: &str) -> Self {
        Self { ca: Certificate::from_pem(ca), identity: None }
    }

    /// The job CA and `role`'s certificate from the folder `dir`.
    pub fn load(dir: &Path, role: Role) -> Result<Self> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read_to_string(&path).map_err(|source| ProtoError::TlsRead { path, source })
        };
        let (cert_file, key_file) = role.files();
        Self::from_pem(&read(CA_CERT)?, &read(cert_file)?, &read(key_file)?, |f| dir.join(f), role)
    }

    /// A server that accepts only clients showing a certificate of the job CA.
    pub(crate) fn server_config(&self) -> ServerTlsConfig {
        let config = ServerTlsConfig::new().client_ca_root(self.ca.clone()).timeout(HANDSHAKE_TIMEOUT);
        match &self.identity {
            Some(identity) => config.identity(identity.clone()),
            None => config,
        }
    }

    /// A client that trusts only the job CA, shows its own certificate and expects the
    /// server to be `server_name` (`None`: the host of the address it connects to).
    pub(crate) fn client_config(&self, server_name: Option<&str>) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new().ca_certificate(self.ca.clone()).timeout(HANDSHAKE_TIMEOUT);
        if let Some(identity) = &self.identity {
            config = config.identity(identity.clone());
        }
        match server_name {
            Some(name) => config.domain_name(name),
            None => config,
        }
    }
}

/// How a process's job connections travel.
#[derive(Debug, Clone)]
pub enum Transport {
    /// TLS with mutual authentication: the default everywhere.
    Tls(Tls),
    /// Plain HTTP/2: only with an explicit `--insecure`, for local debugging (anyone on the
    /// network can read the traffic and the job secret in it).
    Plaintext,
}

impl Transport {
    /// From `--tls-dir` if given, else `$LINEA_TLS_DIR`; `--insecure` for plain text.
    /// `Ok(None)`: neither was given (the caller decides: a master makes its own CA, a
    /// worker or client cannot go on).
    pub fn load(dir: Option<&str>, insecure: bool, role: Role) -> Result<Option<Self>> {
        let from_env = std::env::var(TLS_DIR_ENV).ok().filter(|d| !d.is_empty());
        match (dir.map(str::to_string).or(from_env), insecure) {
            (Some(_), true) if dir.is_some() => Err(ProtoError::TlsConflict),
            (_, true) => Ok(Some(Transport::Plaintext)),
            (Some(dir), false) => Ok(Some(Transport::Tls(Tls::load(Path::new(&dir), role)?))),
            (None, false) => Ok(None),
        }
    }

    /// As [`Transport::load`], with no certificates an error.
    pub fn require(dir: Option<&str>, insecure: bool, role: Role) -> Result<Self> {
        Self::load(dir, insecure, role)?.ok_or(ProtoError::NoTls)
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }
}

/// Why a TLS peer refused this process or this process the peer, if that is what `error`
/// (or one of its sources) says: a certificate of another CA, none at all, a wrong name.
/// Such a failure is permanent; a lost connection is not.
pub fn refusal(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    /// Alerts a TLS server sends about the client's certificate.
    const CERTIFICATE_ALERTS: [&str; 7] = [
        "CertificateRequired",
        "BadCertificate",
        "UnknownCA",
        "CertificateUnknown",
        "UnsupportedCertificate",
        "CertificateExpired",
        "AccessDenied",
    ];
    let mut next = Some(error);
    while let Some(e) = next {
        // rustls errors travel inside io::Errors, whose `source` skips them; an alert the
        // other side sent arrives as text by the time it reaches the client.
        let io = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).map(|i| i as &dyn std::error::Error);
        let inner = io.unwrap_or(e);
        if let Some(rustls::Error::InvalidCertificate(why)) = inner.downcast_ref::<rustls::Error>() {
            return Some(format!("its certificate is not the job's ({why:?})"));
        }
        let text = inner.to_string();
        if let Some(alert) = text.strip_prefix("received fatal alert: ")
            && CERTIFICATE_ALERTS.contains(&alert)
        {
            return Some(format!("it refused this process's certificate ({alert})"));
        }
        next = e.source();
    }
    None
}

/// A job's certificates: the CA certificate and two signed certificates with their keys.
/// `Debug` shows no key.
#[derive(Clone, PartialEq, Eq)]
pub struct JobCertificates {
    pub ca_cert: String,
    pub master_cert: String,
    master_key: String,
    pub client_cert: String,
    client_key: String,
}

impl std::fmt::Debug for JobCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobCertificates(<redacted>)")
    }
}

/// 32 bytes for `label`, derived from `seed` (HMAC-SHA256).
fn derive_bytes(seed: &[u8], label: &str) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, seed);
    let tag = ring::hmac::sign(&key, label.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// The Ed25519 key whose private seed is derived from `seed` and `label`: the same inputs
/// give the same key, which is what lets the operator recompute a job's CA.
fn ed25519_key(seed: &[u8], label: &str) -> Result<KeyPair> {
    // PKCS#8 v1 of an Ed25519 private key (RFC 8410): a fixed prefix and the 32-byte seed.
    const PREFIX: [u8; 16] =
        [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    let mut der = PREFIX.to_vec();
    der.extend_from_slice(&derive_bytes(seed, label));
    KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(der), &PKCS_ED25519).map_err(certificate_error)
}

fn certificate_error(e: rcgen::Error) -> ProtoError {
    ProtoError::Certificate(e.to_string())
}

fn params(
    names: &[String],
    common_name: String,
    not_before: OffsetDateTime,
    usages: &[ExtendedKeyUsagePurpose],
) -> Result<CertificateParams> {
    let invalid = |name: &str, e: String| {
        ProtoError::Certificate(format!("{name:?}: not a valid certificate name ({e}); use DNS names or IP addresses"))
    };
    for name in names {
        rustls::pki_types::ServerName::try_from(name.as_str()).map_err(|e| invalid(name, e.to_string()))?;
    }
    let mut params = CertificateParams::new(names.to_vec()).map_err(|e| invalid(&names.join(","), e.to_string()))?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::OrganizationName, "linea");
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.not_before = not_before;
    params.not_after = not_before + VALIDITY;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = usages.to_vec();
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

impl JobCertificates {
    /// The certificates of job `job` (a name for people: it goes into the certificates'
    /// common names), everything derived from the secret `seed`: the same seed, job, names
    /// and start give the same bytes (Ed25519 signatures are deterministic, serial numbers
    /// are hashes of the keys). `master_names` are the DNS names or IP addresses the master
    /// is reached by; the certificates are valid from `not_before` for [`VALIDITY`].
    pub fn derive(seed: &[u8], job: &str, master_names: &[String], not_before: OffsetDateTime) -> Result<Self> {
        if master_names.is_empty() {
            return Err(ProtoError::Certificate("the master needs at least one name".into()));
        }
        let ca_key = ed25519_key(seed, "linea-tls-v1/ca")?;
        let mut ca = params(&[], format!("linea job CA {job}"), not_before, &[])?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        ca.use_authority_key_identifier_extension = false;
        let ca_cert = ca.self_signed(&ca_key).map_err(certificate_error)?;
        let issuer = Issuer::new(ca, ca_key);

        let master_key = ed25519_key(seed, "linea-tls-v1/master")?;
        let master =
            params(master_names, format!("linea master {job}"), not_before, &[ExtendedKeyUsagePurpose::ServerAuth])?;
        let master_cert = master.signed_by(&master_key, &issuer).map_err(certificate_error)?;

        let client_key = ed25519_key(seed, "linea-tls-v1/member")?;
        let member = params(
            &[WORKER_NAME.to_string()],
            format!("linea member {job}"),
            not_before,
            &[ExtendedKeyUsagePurpose::ClientAuth, ExtendedKeyUsagePurpose::ServerAuth],
        )?;
        let client_cert = member.signed_by(&client_key, &issuer).map_err(certificate_error)?;
        Ok(Self {
            ca_cert: ca_cert.pem(),
            master_cert: master_cert.pem(),
            master_key: master_key.serialize_pem(),
            client_cert: client_cert.pem(),
            client_key: client_key.serialize_pem(),
        })
    }

    /// Fresh certificates for one run (`linea train --workers N`, `linea master` without
    /// `--tls-dir`, `linea certs`): a random seed that is forgotten at once, so nobody can
    /// sign another certificate of this CA.
    pub fn generate(job: &str, master_names: &[String]) -> Result<Self> {
        let seed: [u8; 32] = rand::random();
        // An hour back: a worker machine whose clock is a little behind still accepts them.
        let not_before = OffsetDateTime::now_utc() - time::Duration::hours(1);
        Self::derive(&seed, job, master_names, not_before)
    }

    /// The five files, by name.
    pub fn files(&self) -> [(&'static str, &str); 5] {
        [
            (CA_CERT, &self.ca_cert),
            (MASTER_CERT, &self.master_cert),
            (MASTER_KEY, &self.master_key),
            (CLIENT_CERT, &self.client_cert),
            (CLIENT_KEY, &self.client_key),
        ]
    }

    /// Writes the files into `dir` (which must exist), readable by this user only.
    pub fn write(&self, dir: &Path) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        for (name, text) in self.files() {
            let path = dir.join(name);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .map_err(|source| ProtoError::TlsRead { path: path.clone(), source })?;
            file.write_all(text.as_bytes()).map_err(|source| ProtoError::TlsRead { path, source })?;
        }
        Ok(())
    }

    /// The identity of `role` in this job.
    pub fn tls(&self, role: Role) -> Result<Tls> {
        let (cert, key) = match role {
            Role::Master => (&self.master_cert, &self.master_key),
            Role::Member => (&self.client_cert, &self.client_key),
        };
        Tls::from_pem(&self.ca_cert, cert, key, |file: &str| PathBuf::from(file), role)
    }
}

/// A folder only this user can enter, removed with everything in it when dropped: where a
/// run's own certificates wait for the worker processes it starts.
#[derive(Debug)]
pub struct PrivateDir(PathBuf);

impl PrivateDir {
    pub fn new() -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        loop {
            let suffix: u64 = rand::random();
            let path = base.join(format!("linea-tls-{}-{suffix:016x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(ProtoError::TlsRead { path, source }),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["ads-master.ml.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn certificates_derive_from_the_seed_alone() {
        let start = OffsetDateTime::from_unix_timestamp(1_760_000_000).unwrap();
        let a = JobCertificates::derive(b"seed-one", "ml/ads", &names(), start).unwrap();
        assert_eq!(a, JobCertificates::derive(b"seed-one", "ml/ads", &names(), start).unwrap());
        let b = JobCertificates::derive(b"seed-two", "ml/ads", &names(), start).unwrap();
        assert_ne!(a.ca_cert, b.ca_cert);
        assert_ne!(a.client_key, b.client_key);
        assert!(!format!("{a:?}").contains("PRIVATE"), "Debug shows no key");
        for role in [Role::Master, Role::Member] {
            a.tls(role).unwrap();
        }
        assert!(matches!(
            JobCertificates::derive(b"s", "j", &["not a name!".into()], start),
            Err(ProtoError::Certificate(_))
        ));
    }

    #[test]
    fn bad_files_are_named_with_what_is_wrong() {
        let dir = PrivateDir::new().unwrap();
        let missing = Tls::load(dir.path(), Role::Member).unwrap_err().to_string();
        assert!(missing.starts_with(&format!("{}: ", dir.path().join(CA_CERT).display())), "{missing}");
        let certs = JobCertificates::generate("t", &names()).unwrap();
        certs.write(dir.path()).unwrap();
        Tls::load(dir.path(), Role::Member).unwrap();
        std::fs::write(dir.path().join(CLIENT_CERT), "garbage").unwrap();
        let garbage = Tls::load(dir.path(), Role::Member).unwrap_err().to_string();
        assert!(garbage.contains("client.crt") && garbage.contains("no PEM certificate"), "{garbage}");
        // Another job's key: parses, but is not the certificate's.
        let other = JobCertificates::generate("t", &names()).unwrap();
        std::fs::write(dir.path().join(CLIENT_CERT), &certs.client_cert).unwrap();
        std::fs::write(dir.path().join(CLIENT_KEY), &other.client_key).unwrap();
        let mismatch = Tls::load(dir.path(), Role::Member).unwrap_err().to_string();
        assert!(mismatch.contains("client.key") && mismatch.contains("not the key of client.crt"), "{mismatch}");
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists(), "the private folder goes with its owner");
    }
}
