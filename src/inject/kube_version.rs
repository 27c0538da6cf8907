//! The Kubernetes version `inject` writes for (`--kube-version`, else what the cluster
//! serves): it decides which API fields and kinds the manifests may use.

/// A Kubernetes `MAJOR.MINOR`, what decides which API fields and kinds a cluster serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    pub major: u32,
    pub minor: u32,
}

impl KubeVersion {
    /// Native sidecars (an initContainer with `restartPolicy: Always`): on by default from 1.29.
    pub const NATIVE_SIDECAR: KubeVersion = KubeVersion::new(1, 29);
    /// The `preStop` sleep action (beta, on by default, from 1.30; alpha in 1.29, where the
    /// apiserver drops the field and then refuses the empty handler), and
    /// ValidatingAdmissionPolicy in `admissionregistration.k8s.io/v1` (GA in 1.30).
    pub const SLEEP_ACTION_AND_POLICY: KubeVersion = KubeVersion::new(1, 30);

    pub const fn new(major: u32, minor: u32) -> Self {
        KubeVersion { major, minor }
    }

    /// Parses `1.29`, `v1.29.3`, `1.29.3-eks-abc` or `v1.29.3+k3s1` (what `kubectl version`
    /// and Helm's `.Capabilities.KubeVersion.Version` print); only MAJOR.MINOR counts. Used as a
    /// clap value parser, so clap names the flag in its error.
    pub fn parse(s: &str) -> Result<KubeVersion, String> {
        let bad = || {
            format!("expected a Kubernetes version MAJOR.MINOR such as 1.29 or v1.30.2, got {s:?}")
        };
        let trimmed = s.trim();
        let core = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let number = |p: Option<&str>| {
            p.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u32>().ok())
        };
        let major = number(parts.next()).ok_or_else(bad)?;
        let minor = number(parts.next()).ok_or_else(bad)?;
        match parts.next() {
            None => {}
            Some(patch) if number(Some(patch)).is_some() && parts.next().is_none() => {}
            Some(_) => return Err(bad()),
        }
        if major != 1 {
            return Err(format!("{} (Kubernetes 1.x)", bad()));
        }
        Ok(KubeVersion { major, minor })
    }

    /// Whether a cluster of version `cluster` (`None`: 1.30 or later) serves what came in `self`.
    pub fn served_by(self, cluster: Option<KubeVersion>) -> bool {
        cluster.is_none_or(|c| c >= self)
    }
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_versions_parse_as_kubectl_and_helm_print_them() {
        let v = KubeVersion::new;
        for (text, want) in [
            ("1.29", v(1, 29)),
            ("v1.30.2", v(1, 30)),
            ("1.29.3-eks-adc7111", v(1, 29)),
            ("v1.29.3+k3s1", v(1, 29)),
            (" 1.31 ", v(1, 31)),
        ] {
            assert_eq!(KubeVersion::parse(text), Ok(want), "{text}");
        }
        for bad in [
            "", "1", "1.", "v", "1.x", "1.29.x", "2.0", "1.29.3.4", "latest",
        ] {
            let e = KubeVersion::parse(bad).unwrap_err();
            assert!(e.contains("MAJOR.MINOR"), "{bad}: {e}");
        }
        let s = KubeVersion::SLEEP_ACTION_AND_POLICY;
        assert!(s.served_by(None));
        assert!(s.served_by(Some(v(1, 30))));
        assert!(s.served_by(Some(v(1, 37))));
        assert!(!s.served_by(Some(v(1, 29))));
    }
}
