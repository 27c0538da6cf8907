//! Holder identities: the one definition of how an elector's identity is written and read —
//! what it says about the pod and the process that wrote it, and the one question adoption asks
//! of two of them: are they two processes of one pod?
//!
//! An elector that knows its pod's UID writes `<pod-name>_<pod-uid>_<suffix>`: the pod name for
//! people reading `kubectl get lease`, the full UID (downward API `metadata.uid`) to tell this
//! pod from an earlier one of the same name (a StatefulSet replica, a force-deleted pod
//! recreated), and a random per-process suffix so two processes of one pod never share an
//! identity. A pod name (a DNS-1123 subdomain) and a UID never contain `_`, so the identity
//! splits at its two underscores without ambiguity. Without a UID it is `<base>_<suffix>`, which
//! names no pod incarnation and is never adopted.
//!
//! Pure: the random suffix is drawn by the caller (`elect`), so building and parsing can be
//! tested against each other. The write fence's admission policy (`inject::fence`) checks the
//! same prefix, `<pod-name>_<pod-uid>_`, in CEL.

/// Joins the parts of a holder identity; neither a pod name nor a UID can contain it.
pub const SEPARATOR: char = '_';

/// The holder identity of one elector process: `<base>_<pod-uid>_<suffix>` when the pod's UID
/// is known, else `<base>_<suffix>`; the suffix is written as 8 hexadecimal digits. With a UID,
/// `base` must be the pod's name for [`HolderIdentity::parse`] to read the result back.
pub fn build(base: &str, pod_uid: Option<&str>, suffix: u32) -> String {
    match pod_uid {
        Some(uid) => format!("{base}{SEPARATOR}{uid}{SEPARATOR}{suffix:08x}"),
        None => format!("{base}{SEPARATOR}{suffix:08x}"),
    }
}

/// The parts of a holder identity `<pod-name>_<pod-uid>_<suffix>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderIdentity<'a> {
    pub pod_name: &'a str,
    /// The full UID as written: a prefix would let a pod whose UID shares it pass as this one.
    pub pod_uid: &'a str,
    pub suffix: &'a str,
}

impl<'a> HolderIdentity<'a> {
    /// Parses `<pod-name>_<pod-uid>_<suffix>`; `None` for anything else — an identity without a
    /// UID (an elector without `--pod-uid`, an older one), a client-go peer's, a hand edit.
    pub fn parse(identity: &'a str) -> Option<Self> {
        let mut parts = identity.split(SEPARATOR);
        let (pod_name, pod_uid, suffix) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some()
            || !crate::config::is_dns1123_subdomain(pod_name)
            || !is_uid(pod_uid)
            || suffix.is_empty()
            || suffix.len() > 16
            || !suffix.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return None;
        }
        Some(HolderIdentity {
            pod_name,
            pod_uid,
            suffix,
        })
    }

    /// Whether `other` names the same pod incarnation: the same name and the very same UID. The
    /// UID is compared byte for byte; both come from the same downward API field, so one pod's
    /// processes always write it alike.
    pub fn same_pod(&self, other: &HolderIdentity<'_>) -> bool {
        self.pod_name == other.pod_name && self.pod_uid == other.pod_uid
    }
}

/// Whether `s` has the form of a Kubernetes UID as the downward API gives it (an RFC 4122 UUID:
/// 8-4-4-4-12 hexadecimal digits). Either case is accepted and kept as given: the write fence
/// compares it byte for byte with the UID in the pod's ServiceAccount token.
pub fn is_uid(s: &str) -> bool {
    let bytes = s.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f40";

    #[test]
    fn the_three_parts_of_an_identity_with_a_pod_uid() {
        let id = format!("passmower-7d9f-abcde_{UID}_1a2b3c4d");
        let h = HolderIdentity::parse(&id).expect("parses");
        assert_eq!(h.pod_name, "passmower-7d9f-abcde");
        assert_eq!(h.pod_uid, UID);
        assert_eq!(h.suffix, "1a2b3c4d");
    }

    #[test]
    fn a_built_identity_with_a_pod_uid_parses_back_to_its_parts() {
        for (name, uid, suffix) in [
            ("passmower-7d9f-abcde", UID, 0x1a2b3c4d),
            ("pod.with.dots", UID, 0),
            ("p", &*UID.to_uppercase(), u32::MAX),
        ] {
            let id = build(name, Some(uid), suffix);
            let hex = format!("{suffix:08x}");
            assert_eq!(
                HolderIdentity::parse(&id),
                Some(HolderIdentity {
                    pod_name: name,
                    pod_uid: uid,
                    suffix: &hex,
                }),
                "{id}"
            );
        }
        assert_eq!(
            build("passmower-7d9f-abcde", Some(UID), 0x1a2b3c4d),
            format!("passmower-7d9f-abcde_{UID}_1a2b3c4d")
        );
    }

    #[test]
    fn a_built_identity_without_a_pod_uid_names_no_pod() {
        let id = build("passmower-7d9f-abcde", None, 7);
        assert_eq!(id, "passmower-7d9f-abcde_00000007");
        assert_eq!(HolderIdentity::parse(&id), None);
        // A base that is no pod name does not parse either, UID or not.
        assert_eq!(HolderIdentity::parse(&build("pod_a", Some(UID), 7)), None);
    }

    #[test]
    fn a_uid_in_either_case_but_no_other_form() {
        assert!(is_uid(UID));
        assert!(is_uid(&UID.to_uppercase()));
        for bad in [
            "abc",
            "0f9c3a52_6b1e_4d0a_9a57_3c2e1d7b8f40",
            "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f4",
            "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f4g",
            "0f9c3a526b1e4d0a9a573c2e1d7b8f40aaaa",
        ] {
            assert!(!is_uid(bad), "{bad}");
        }
    }

    #[test]
    fn identities_without_a_full_uid_name_no_pod() {
        for bad in [
            "passmower-7d9f-abcde_1a2b3c4d".to_owned(),
            format!("pod_{}_1a2b3c4d", &UID[..35]),
            format!("pod_{}0_1a2b3c4d", UID),
            format!("pod_{UID}_"),
            format!("pod_{UID}_xyz"),
            format!("pod_{UID}_1a2b3c4d_extra"),
            format!("Pod_{UID}_1a2b3c4d"),
            format!("_{UID}_1a2b3c4d"),
            format!("pod_{}_1a2b3c4d", UID.replace('-', "_")),
            String::new(),
            "intruder-7".to_owned(),
        ] {
            assert_eq!(HolderIdentity::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn same_pod_needs_the_same_name_and_the_whole_uid() {
        let other_uid = "0f9c3a52-6b1e-4d0a-9a57-3c2e1d7b8f41";
        let a1 = format!("pod-a_{UID}_00000001");
        let a2 = format!("pod-a_{UID}_00000002");
        let a_again = format!("pod-a_{other_uid}_00000003");
        let b = format!("pod-b_{UID}_00000004");
        fn p(s: &str) -> HolderIdentity<'_> {
            HolderIdentity::parse(s).unwrap()
        }
        assert!(p(&a1).same_pod(&p(&a2)));
        // A StatefulSet replica recreated under the same name is another pod.
        assert!(!p(&a_again).same_pod(&p(&a2)));
        assert!(!p(&b).same_pod(&p(&a2)));
    }
}
