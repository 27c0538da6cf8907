//! Certificates: a CA and a serving certificate made in memory (the self-signed mode), the
//! validity of any certificate read from DER, and the caBundle arithmetic (add ours, drop the
//! expired and the replaced) that several replicas apply to one shared bundle.
//!
//! Each replica makes its own CA and never writes its key anywhere: the API server trusts
//! every CA in the bundle, so replicas need no shared secret, only the bundle.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Clock skew the certificates tolerate: they are valid from this long before they are made.
const BACKDATE: Duration = Duration::from_secs(300);
/// Most CAs kept in the bundle, a bound on the object's size only: each replica names itself in
/// its CA and replaces its own earlier CAs when it starts (see [`merge_bundle`]), so a
/// crash-looping replica keeps one entry. What is left to grow the bundle is replicas that died
/// without withdrawing their CA (a lost node), whose CAs stay until they expire. Past the cap
/// the ones issued earliest go (their replica, if still alive, adds its own back at its next
/// check).
pub const MAX_BUNDLE_CAS: usize = 64;
/// The common name of every CA this webhook makes starts with this.
const CA_NAME: &str = "passmower-elector webhook CA";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot make a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// What was read cannot be served: `what` names the source, `problem` says what is wrong.
    #[error("{what}: {problem}")]
    Invalid { what: String, problem: &'static str },
    /// The certificate or key file is not PEM.
    #[error("{what}: {problem}: {source}")]
    Pem {
        what: String,
        problem: &'static str,
        source: rustls_pki_types::pem::Error,
    },
    /// rustls refuses the key, or the key does not sign for the certificate.
    #[error("{what}: {problem}: {source}")]
    Key {
        what: String,
        problem: &'static str,
        source: rustls::Error,
    },
}

/// A CA and the serving certificate it signed, both valid for the same period.
pub struct Issued {
    /// The CA, PEM: what goes into the caBundle.
    pub ca_pem: String,
    pub ca_der: CertificateDer<'static>,
    /// The serving certificate (alone: the CA is in the client's bundle).
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

impl Issued {
    /// The serving certificate as PEM (what a `tls.crt` holds).
    pub fn chain_pem(&self) -> String {
        to_pem(&self.chain)
    }

    /// The serving key as PKCS#8 PEM (what a `tls.key` holds).
    pub fn key_pem(&self) -> String {
        let mut out = String::from("-----BEGIN PRIVATE KEY-----\n");
        for line in base64(self.key.secret_der()).as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END PRIVATE KEY-----\n");
        out
    }
}

/// Makes a fresh CA (ECDSA P-256) and a serving certificate for `names` (DNS names, or IP
/// addresses written as such), valid from a little before `now` until `now + validity`. The CA
/// names `replica` (the pod) in its subject's organizational unit, which [`replica_of`] reads.
pub fn issue(
    names: &[String],
    validity: Duration,
    now: SystemTime,
    replica: Option<&str>,
) -> Result<Issued, CertError> {
    let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
    let not_after = now + validity;
    let period = |params: &mut CertificateParams| {
        params.not_before = time::OffsetDateTime::from(not_before);
        params.not_after = time::OffsetDateTime::from(not_after);
    };
    let stamp = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, format!("{CA_NAME} {stamp}"));
    if let Some(replica) = replica {
        ca.distinguished_name
            .push(DnType::OrganizationalUnitName, replica);
    }
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    period(&mut ca);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(names.to_vec())?;
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name.push(
        DnType::CommonName,
        names
            .first()
            .cloned()
            .unwrap_or_else(|| "passmower-elector-webhook".into()),
    );
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    period(&mut leaf);
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;

    Ok(Issued {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().clone(),
        chain: vec![leaf_cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        not_before,
        not_after,
    })
}

/// Reads a PEM certificate chain and its private key (what cert-manager writes as `tls.crt`
/// and `tls.key`). `what` names the source in errors.
pub fn parse_pem_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    what: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), CertError> {
    let invalid = |problem| CertError::Invalid {
        what: what.to_owned(),
        problem,
    };
    let pem = |problem| {
        move |source| CertError::Pem {
            what: what.to_owned(),
            problem,
            source,
        }
    };
    let key_error = |problem| {
        move |source| CertError::Key {
            what: what.to_owned(),
            problem,
            source,
        }
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem("the certificate file is not PEM"))?;
    if chain.is_empty() {
        return Err(invalid("the certificate file holds no CERTIFICATE block"));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(pem("the key file holds no usable private key"))?;
    // The key must sign for the certificate's public key, or every handshake fails later.
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(key_error("the private key is not usable"))?;
    let certified = rustls::sign::CertifiedKey::new(chain.clone(), signing);
    certified
        .keys_match()
        .map_err(key_error("the key does not belong to the certificate"))?;
    validity(&chain[0]).ok_or_else(|| invalid("the certificate's validity is unreadable"))?;
    Ok((chain, key))
}

/// The first fields of a DER certificate's tbsCertificate, the version skipped: serial number,
/// signature algorithm, issuer, validity, subject.
fn tbs_fields(cert: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
    //   serialNumber, signature, issuer, validity SEQUENCE { notBefore, notAfter }, subject, ... } }
    let (tag, certificate, _) = der_item(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, mut tbs, _) = der_item(certificate)?;
    if tag != 0x30 {
        return None;
    }
    let mut fields = Vec::new();
    while !tbs.is_empty() && fields.len() < 5 {
        let (tag, content, rest) = der_item(tbs)?;
        if tag != 0xa0 {
            fields.push((tag, content));
        }
        tbs = rest;
    }
    Some(fields)
}

/// `(notBefore, notAfter)` of a DER certificate, or `None` when it cannot be read.
pub fn validity(cert: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let fields = tbs_fields(cert)?;
    let &(tag, validity) = fields.get(3)?;
    if tag != 0x30 {
        return None;
    }
    let (t1, before, rest) = der_item(validity)?;
    let (t2, after, _) = der_item(rest)?;
    Some((der_time(t1, before)?, der_time(t2, after)?))
}

/// The replica a CA of this webhook names (see [`issue`]), or `None` for any other
/// certificate: a CA someone else put in the bundle is never taken for one of ours.
pub fn replica_of(cert: &[u8]) -> Option<String> {
    const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    const UNIT: &[u8] = &[0x55, 0x04, 0x0b];
    let fields = tbs_fields(cert)?;
    let &(tag, mut name) = fields.get(4)?;
    if tag != 0x30 {
        return None;
    }
    // Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value DirectoryString }
    let (mut ours, mut replica) = (false, None);
    while !name.is_empty() {
        let (set_tag, mut set, rest) = der_item(name)?;
        name = rest;
        if set_tag != 0x31 {
            return None;
        }
        while !set.is_empty() {
            let (_, attribute, rest) = der_item(set)?;
            set = rest;
            let (oid_tag, oid, value) = der_item(attribute)?;
            let (value_tag, value, _) = der_item(value)?;
            // UTF8String, PrintableString, IA5String.
            if oid_tag != 0x06 || ![0x0c, 0x13, 0x16].contains(&value_tag) {
                continue;
            }
            let Ok(text) = std::str::from_utf8(value) else {
                continue;
            };
            if oid == COMMON_NAME {
                ours = text.starts_with(CA_NAME);
            } else if oid == UNIT {
                replica = Some(text.to_owned());
            }
        }
    }
    replica.filter(|_| ours)
}

/// One DER item of `input`: its tag, its contents and what follows it.
fn der_item(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), as X.509 requires them.
fn der_time(tag: u8, text: &[u8]) -> Option<SystemTime> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let (year, rest) = match (tag, text.len()) {
        (0x17, 12) => {
            let yy: i64 = text[..2].parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (0x18, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    let num = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let (month, day, hour, minute, second) = (num(0)?, num(2)?, num(4)?, num(6)?, num(8)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    if secs >= 0 {
        Some(UNIX_EPOCH + Duration::from_secs(secs as u64))
    } else {
        Some(UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The certificates of a PEM bundle, as DER; blocks that are not certificates are dropped.
pub fn bundle_certs(bundle: &[u8]) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(bundle)
        .filter_map(Result::ok)
        .collect()
}

/// The bundle after adding `add`, removing `remove`, every certificate expired at `now` and
/// every CA of replica `retire` (a replica that starts retires the CAs of its earlier runs,
/// whose keys died with them), then dropping the earliest-issued beyond [`MAX_BUNDLE_CAS`]
/// (never one of `add`). A certificate whose validity cannot be read is kept: it is not ours
/// to judge.
pub fn merge_bundle(
    current: &[u8],
    add: &[CertificateDer<'static>],
    remove: &[CertificateDer<'static>],
    retire: Option<&str>,
    now: SystemTime,
) -> Vec<CertificateDer<'static>> {
    let mut kept: Vec<CertificateDer<'static>> = Vec::new();
    for cert in bundle_certs(current) {
        let expired = validity(&cert).is_some_and(|(_, after)| after <= now);
        let retired = retire.is_some() && replica_of(&cert).as_deref() == retire;
        if expired
            || retired
            || remove.contains(&cert)
            || add.contains(&cert)
            || kept.contains(&cert)
        {
            continue;
        }
        kept.push(cert);
    }
    let issued = |c: &CertificateDer<'_>| validity(c).map(|(before, _)| before);
    while kept.len() + add.len() > MAX_BUNDLE_CAS && !kept.is_empty() {
        let oldest = (0..kept.len()).min_by_key(|&i| issued(&kept[i]));
        match oldest {
            Some(i) => {
                kept.remove(i);
            }
            None => break,
        }
    }
    kept.extend(add.iter().cloned());
    kept
}

/// PEM text of `certs`, as the caBundle holds them.
pub fn to_pem(certs: &[CertificateDer<'_>]) -> String {
    let mut out = String::new();
    for cert in certs {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let encoded = base64(cert);
        for line in encoded.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

fn base64(input: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(input)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["127.0.0.1".into(), "webhook.ns.svc".into()]
    }

    fn secs(t: SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH).unwrap().as_secs()
    }

    #[test]
    fn issued_certificates_carry_the_validity_we_asked_for() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let issued = issue(&names(), Duration::from_secs(3600), now, None).unwrap();
        for der in [&issued.ca_der, &issued.chain[0]] {
            let (before, after) = validity(der).unwrap();
            assert_eq!(secs(before), 1_800_000_000 - 300);
            assert_eq!(secs(after), 1_800_003_600);
        }
        // The PEM we publish is the DER we serve against.
        assert_eq!(
            bundle_certs(issued.ca_pem.as_bytes()),
            vec![issued.ca_der.clone()]
        );
        assert_eq!(
            to_pem(std::slice::from_ref(&issued.ca_der)).trim(),
            issued.ca_pem.trim()
        );
    }

    #[test]
    fn the_key_pair_reads_back_and_a_wrong_key_is_refused() {
        let a = issue(&names(), Duration::from_secs(60), SystemTime::now(), None).unwrap();
        let b = issue(&names(), Duration::from_secs(60), SystemTime::now(), None).unwrap();
        let cert_pem = a.chain_pem();
        assert!(parse_pem_pair(cert_pem.as_bytes(), a.key_pem().as_bytes(), "x").is_ok());
        let err = parse_pem_pair(
            cert_pem.as_bytes(),
            b.key_pem().as_bytes(),
            "--tls-key-file",
        )
        .unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
        let err = parse_pem_pair(b"nothing", a.key_pem().as_bytes(), "x").unwrap_err();
        assert!(err.to_string().contains("no CERTIFICATE"), "{err}");
    }

    #[test]
    fn der_times_in_both_forms() {
        assert_eq!(secs(der_time(0x17, b"700101000000Z").unwrap()), 0);
        assert_eq!(
            secs(der_time(0x17, b"491231235959Z").unwrap()),
            2_524_607_999
        );
        assert_eq!(
            secs(der_time(0x18, b"20380119031408Z").unwrap()),
            2_147_483_648
        );
        assert!(der_time(0x17, b"701301000000Z").is_none());
        assert!(der_time(0x18, b"2038011903140Z").is_none());
        assert!(validity(b"\x30\x03\x02\x01").is_none());
        assert!(validity(&[]).is_none());
    }

    #[test]
    fn the_bundle_keeps_others_and_drops_the_expired_and_the_replaced() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let old = issue(&names(), Duration::from_secs(100), t0, None).unwrap();
        let other = issue(&names(), Duration::from_secs(1000), t0, None).unwrap();
        let mine = issue(&names(), Duration::from_secs(1000), t0, None).unwrap();
        let next = issue(&names(), Duration::from_secs(1000), t0, None).unwrap();
        let bundle = to_pem(&[
            old.ca_der.clone(),
            other.ca_der.clone(),
            mine.ca_der.clone(),
        ]);
        // Before `old` expires, nothing of others' is touched; adding twice adds once.
        let merged = merge_bundle(
            bundle.as_bytes(),
            std::slice::from_ref(&mine.ca_der),
            &[],
            None,
            t0,
        );
        assert_eq!(merged.len(), 3);
        // After it expires it goes; a rotation swaps ours.
        let later = t0 + Duration::from_secs(200);
        let merged = merge_bundle(
            bundle.as_bytes(),
            std::slice::from_ref(&next.ca_der),
            std::slice::from_ref(&mine.ca_der),
            None,
            later,
        );
        assert_eq!(merged, vec![other.ca_der.clone(), next.ca_der.clone()]);
    }

    #[test]
    fn the_bundle_is_capped_dropping_the_earliest_issued() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let cas: Vec<_> = (0..MAX_BUNDLE_CAS as u64 + 2)
            .map(|i| {
                issue(
                    &names(),
                    Duration::from_secs(10_000),
                    t0 + Duration::from_secs(i),
                    None,
                )
                .unwrap()
                .ca_der
            })
            .collect();
        let bundle = to_pem(&cas[..cas.len() - 1]);
        let newest = cas[cas.len() - 1].clone();
        let merged = merge_bundle(
            bundle.as_bytes(),
            std::slice::from_ref(&newest),
            &[],
            None,
            t0,
        );
        assert_eq!(merged.len(), MAX_BUNDLE_CAS);
        assert!(!merged.contains(&cas[0]) && !merged.contains(&cas[1]));
        assert_eq!(merged.last(), Some(&newest));
    }

    /// A replica that crash-loops makes a CA at every start. Each start retires the CAs its
    /// earlier runs left (same replica name), so the bundle holds one per replica however
    /// often it restarts, and the healthy replica's CA (issued first, so the first to go under
    /// a count cap) stays. Retiring touches no CA of another replica, nor one without a name.
    #[test]
    fn a_crash_looping_replica_replaces_its_own_ca_and_evicts_no_other() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let validity = Duration::from_secs(86_400);
        let healthy = issue(&names(), validity, t0, Some("webhook-7c9f-a")).unwrap();
        let foreign = issue(&names(), validity, t0, None).unwrap();
        assert_eq!(
            replica_of(&healthy.ca_der).as_deref(),
            Some("webhook-7c9f-a")
        );
        assert_eq!(replica_of(&foreign.ca_der), None);
        assert_eq!(
            replica_of(&healthy.chain[0]),
            None,
            "the serving certificate"
        );
        let mut bundle = to_pem(&[healthy.ca_der.clone(), foreign.ca_der.clone()]);
        let mut last = None;
        for start in 1..=(MAX_BUNDLE_CAS as u64 * 2) {
            let now = t0 + Duration::from_secs(start);
            let run = issue(&names(), validity, now, Some("webhook-7c9f-b")).unwrap();
            let merged = merge_bundle(
                bundle.as_bytes(),
                std::slice::from_ref(&run.ca_der),
                &[],
                Some("webhook-7c9f-b"),
                now,
            );
            assert_eq!(
                merged,
                vec![
                    healthy.ca_der.clone(),
                    foreign.ca_der.clone(),
                    run.ca_der.clone()
                ],
                "after start {start}"
            );
            bundle = to_pem(&merged);
            last = Some(run);
        }
        // A rotation (no retiring) keeps the previous CA next to the new one until it is removed.
        let now = t0 + Duration::from_secs(1000);
        let next = issue(&names(), validity, now, Some("webhook-7c9f-b")).unwrap();
        let during = merge_bundle(
            bundle.as_bytes(),
            std::slice::from_ref(&next.ca_der),
            &[],
            None,
            now,
        );
        assert_eq!(during.len(), 4);
        let after = merge_bundle(
            to_pem(&during).as_bytes(),
            std::slice::from_ref(&next.ca_der),
            std::slice::from_ref(&last.unwrap().ca_der),
            None,
            now,
        );
        assert_eq!(after, vec![healthy.ca_der, foreign.ca_der, next.ca_der]);
    }
}
