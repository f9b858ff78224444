//! Certificates for the TLS tests, made with rcgen into a test's temporary
//! directory: a CA, and leaves it signs for a server or a client.

#![allow(dead_code)]

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// Write `text` to `path`, mode 0600 from creation (a key must be).
pub fn write_private(path: &Path, text: &str) {
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("create");
    file.write_all(text.as_bytes()).expect("write");
    file.sync_all().expect("fsync");
}

/// A certificate authority made for the test, its certificate in
/// `<dir>/<name>.ca.pem`.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub pem: PathBuf,
}

impl Ca {
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer =
            CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("ca");
        let pem = dir.join(format!("{name}.ca.pem"));
        std::fs::write(&pem, issuer.pem()).expect("write the CA");
        Self { issuer, pem }
    }

    /// A leaf certificate and its key, written to `<dir>/<name>.pem` and
    /// `<dir>/<name>.key` (0600): for a server (the loopback IPs and
    /// `localhost`) or a client; `expired`: valid in 2020 only.
    pub fn leaf(&self, dir: &Path, name: &str, server: bool, expired: bool) -> (PathBuf, PathBuf) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        if server {
            params.subject_alt_names = vec![
                SanType::IpAddress(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
                SanType::IpAddress(std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
                SanType::DnsName("localhost".try_into().expect("a name")),
            ];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        } else {
            params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("a name"))];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 12, 31);
        }
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).expect("write the certificate");
        write_private(&key_path, &key.serialize_pem());
        (cert_path, key_path)
    }
}
