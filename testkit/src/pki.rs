//! The PKI of a test control plane, made in memory (rcgen, ECDSA P-256) and written as PEM
//! files: a CA, the apiserver's serving certificate for every name and address it is reached
//! by, client certificates, and the ServiceAccount token key pair. Clients verify the
//! apiserver honestly (also through the fault proxy and the node's forwarder, which listen on
//! other addresses the certificate names).

use std::fs;
use std::net::IpAddr;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

/// What to issue.
#[derive(Clone, Debug)]
pub struct PkiSpec<'a> {
    /// The CA's common name.
    pub ca_name: &'a str,
    /// The apiserver's names: IP addresses and DNS names.
    pub server_names: &'a [&'a str],
    /// Client certificates: (file stem, common name, organization — the apiserver's group).
    pub clients: &'a [(&'a str, &'a str, Option<&'a str>)],
}

/// The files [`generate`] writes into its directory.
pub mod files {
    pub const CA_CERT: &str = "ca.crt";
    pub const CA_KEY: &str = "ca.key";
    pub const SERVER_CERT: &str = "server.crt";
    pub const SERVER_KEY: &str = "server.key";
    /// The ServiceAccount token signing key (PKCS#8) and its public half (SPKI), which the
    /// apiserver verifies tokens with.
    pub const SA_KEY: &str = "sa.key";
    pub const SA_PUB: &str = "sa.pub";
}

/// The names every loopback control plane's serving certificate carries.
pub const LOOPBACK_SERVER_NAMES: [&str; 3] = ["127.0.0.1", "localhost", "kubernetes.default.svc"];

/// Writes `ca.crt`/`ca.key`, `server.crt`/`server.key`, `<stem>.crt`/`<stem>.key` for every
/// client and `sa.key`/`sa.pub` into `dir` (which must exist).
pub fn generate(dir: &Path, spec: &PkiSpec) -> Result<(), String> {
    fn err(what: &'static str) -> impl Fn(rcgen::Error) -> String {
        move |e| format!("{what}: {e}")
    }
    let write = |name: &str, text: &str| {
        fs::write(dir.join(name), text).map_err(|e| format!("write {name}: {e}"))
    };

    let ca_key = KeyPair::generate().map_err(err("CA key"))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = name(spec.ca_name, None);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).map_err(err("CA certificate"))?;
    write(files::CA_CERT, &ca_cert.pem())?;
    write(files::CA_KEY, &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca, ca_key);

    let server_key = KeyPair::generate().map_err(err("server key"))?;
    let mut server = CertificateParams::default();
    server.distinguished_name = name("kube-apiserver", None);
    server.subject_alt_names = spec
        .server_names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => (*n)
                .to_owned()
                .try_into()
                .map(SanType::DnsName)
                .map_err(err("server name")),
        })
        .collect::<Result<_, _>>()?;
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.use_authority_key_identifier_extension = true;
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .map_err(err("server certificate"))?;
    write(files::SERVER_CERT, &server_cert.pem())?;
    write(files::SERVER_KEY, &server_key.serialize_pem())?;

    for (stem, common_name, organization) in spec.clients {
        let key = KeyPair::generate().map_err(err("client key"))?;
        let mut client = CertificateParams::default();
        client.distinguished_name = name(common_name, *organization);
        client.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        client.use_authority_key_identifier_extension = true;
        let cert = client
            .signed_by(&key, &issuer)
            .map_err(err("client certificate"))?;
        write(&format!("{stem}.crt"), &cert.pem())?;
        write(&format!("{stem}.key"), &key.serialize_pem())?;
    }

    let sa = KeyPair::generate().map_err(err("ServiceAccount key"))?;
    write(files::SA_KEY, &sa.serialize_pem())?;
    write(files::SA_PUB, &sa.public_key_pem())?;
    Ok(())
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}
