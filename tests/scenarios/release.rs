//! The release as `scripts/release.sh` builds it, checked from outside the script: its dry run
//! (with this test's binary standing in for the release builds, which .ci/run's own dry run
//! makes for real) leaves an image index whose platforms and digests are those of its
//! manifests, charts whose values name that image by digest, an SBOM of the crates in
//! Cargo.lock, and checksums of every file; its verifier refuses a release that disagrees
//! with itself; and the image builder refuses what would mislabel a platform.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

const REPO: &str = "registry.example.com/team/passmower-elector";
const VERSION: &str = env!("CARGO_PKG_VERSION");
const BINARY: &str = env!("CARGO_BIN_EXE_passmower-elector");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Helm 3 as .ci/run builds it: `$PME_HELM3`, else its cached path.
fn helm() -> PathBuf {
    let path = std::env::var_os("PME_HELM3")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("PME_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".cache/passmower-elector")
                });
            cache.join("helm/helm-v3.22.0/helm")
        });
    assert!(
        path.is_file(),
        "{} is missing: build it with scripts/build-helm.sh (or set PME_HELM3)",
        path.display()
    );
    path
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(path: &Path) -> Value {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release is built on {other}"),
    }
}

/// The dry run's directory and its listing, made once for the tests of this file.
struct DryRun {
    dir: tempfile::TempDir,
    listing: String,
}

fn dry_run() -> &'static DryRun {
    static ONCE: OnceLock<DryRun> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let listing = ok(Command::new(root().join("scripts/release.sh"))
            .current_dir(root())
            .env("HELM", helm())
            .env_remove("PME_RELEASE_IMAGE")
            .env_remove("PME_RELEASE_CHARTS")
            .args(["--image-repo", REPO, "--binary", BINARY, "--dir"])
            .arg(dir.path())
            .arg("dry-run"));
        DryRun { dir, listing }
    })
}

fn dist() -> PathBuf {
    dry_run().dir.path().join("dist")
}

/// `tar -x` of ARCHIVE into a new directory under the dry run's.
fn unpack(archive: &Path, flags: &str) -> tempfile::TempDir {
    let into = tempfile::tempdir().expect("tempdir");
    ok(Command::new("tar")
        .arg(flags)
        .arg(archive)
        .arg("-C")
        .arg(into.path()));
    into
}

/// The blob a descriptor names, checked against its digest and size.
fn blob(layout: &Path, desc: &Value) -> Vec<u8> {
    let digest = desc["digest"].as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let data = std::fs::read(layout.join("blobs/sha256").join(hex)).expect("the blob");
    assert_eq!(sha256_hex(&data), hex, "blob {digest}: its content");
    assert_eq!(
        Some(data.len() as u64),
        desc["size"].as_u64(),
        "blob {digest}: its size"
    );
    data
}

/// `(name, version) -> checksum` of every package in Cargo.lock.
fn cargo_lock() -> BTreeMap<(String, String), Option<String>> {
    let text = std::fs::read_to_string(root().join("Cargo.lock")).expect("Cargo.lock");
    let mut packages = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(&format!("{key} = \""))
                    .and_then(|v| v.strip_suffix('"'))
                    .map(str::to_owned)
            })
        };
        packages.insert(
            (
                field("name").expect("name"),
                field("version").expect("version"),
            ),
            field("checksum"),
        );
    }
    packages
}

#[test]
fn the_dry_run_image_index_lists_each_platform_by_its_manifest() {
    let run = dry_run();
    let archive = dist().join(format!("passmower-elector-image-{VERSION}.oci.tar"));
    let layout = unpack(&archive, "-xf");
    let top = json(&layout.path().join("index.json"));
    let top = &top["manifests"][0];
    assert_eq!(top["mediaType"], "application/vnd.oci.image.index.v1+json");
    assert_eq!(
        top["annotations"]["io.containerd.image.name"],
        format!("{REPO}:{VERSION}").as_str()
    );
    let digest = top["digest"].as_str().expect("digest").to_owned();
    // The digest the later steps were given is the index's.
    let recorded =
        std::fs::read_to_string(run.dir.path().join("work/image-digest")).expect("digest");
    assert_eq!(recorded.trim(), digest);

    let index: Value = serde_json::from_slice(&blob(layout.path(), top)).expect("image index");
    let manifests = index["manifests"].as_array().expect("manifests");
    let platforms: Vec<String> = manifests
        .iter()
        .map(|m| {
            format!(
                "{}/{}",
                m["platform"]["os"].as_str().unwrap_or("?"),
                m["platform"]["architecture"].as_str().unwrap_or("?")
            )
        })
        .collect();
    assert_eq!(platforms, vec![format!("linux/{}", host_arch())]);
    for m in manifests {
        let manifest: Value = serde_json::from_slice(&blob(layout.path(), m)).expect("manifest");
        let config: Value =
            serde_json::from_slice(&blob(layout.path(), &manifest["config"])).expect("config");
        assert_eq!(config["architecture"], m["platform"]["architecture"]);
        assert_eq!(config["os"], m["platform"]["os"]);
        assert_eq!(config["config"]["User"], "65532:65532");
        for layer in manifest["layers"].as_array().expect("layers") {
            blob(layout.path(), layer);
        }
        // The listing names the platform and its manifest digest.
        let line = format!("linux/{}", host_arch());
        assert!(
            run.listing
                .lines()
                .any(|l| l.contains(&line) && l.contains(m["digest"].as_str().unwrap_or("-"))),
            "{}",
            run.listing
        );
    }
    assert!(
        run.listing
            .contains(&format!("image index  {REPO}:{VERSION}@{digest}")),
        "{}",
        run.listing
    );
}

#[test]
fn the_dry_run_charts_name_the_image_by_version_and_digest() {
    let run = dry_run();
    let digest = std::fs::read_to_string(run.dir.path().join("work/image-digest")).expect("digest");
    let reference = format!("{REPO}:{VERSION}@{}", digest.trim());
    for chart in ["passmower-elector", "passmower-elector-webhook"] {
        let tgz = dist().join(format!("{chart}-{VERSION}.tgz"));
        let unpacked = unpack(&tgz, "-xzf");
        let read = |file: &str| {
            let text = std::fs::read_to_string(unpacked.path().join(chart).join(file)).expect(file);
            serde_norway::from_str::<Value>(&text).expect(file)
        };
        let meta = read("Chart.yaml");
        assert_eq!(meta["version"], VERSION, "{chart}: version");
        assert_eq!(meta["appVersion"], VERSION, "{chart}: appVersion");
        let values = read("values.yaml");
        assert_eq!(values["image"]["repository"], REPO, "{chart}");
        assert_eq!(values["image"]["tag"], VERSION, "{chart}");
        assert_eq!(values["image"]["digest"], digest.trim(), "{chart}");
        assert!(
            run.listing
                .lines()
                .any(|l| l.contains(&format!("{chart}-{VERSION}.tgz")) && l.ends_with(&reference)),
            "{chart}: {}",
            run.listing
        );
    }
    // The packaged webhook chart, installed with no values, runs and injects that image.
    let rendered = ok(Command::new(helm())
        .args(["template", "pmw", "-n", "passmower-elector-system"])
        .arg(dist().join(format!("passmower-elector-webhook-{VERSION}.tgz"))));
    assert!(
        rendered.contains(&format!("image: {reference}\n")),
        "{rendered}"
    );
    assert!(
        rendered.contains(&format!("\"--image={reference}\"")),
        "{rendered}"
    );
}

#[test]
fn the_dry_run_sbom_lists_the_crates_of_cargo_lock_built_in() {
    let sbom = json(&dist().join(format!("passmower-elector-{VERSION}.spdx.json")));
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let lock = cargo_lock();
    let packages = sbom["packages"].as_array().expect("packages");
    let mut names = BTreeSet::new();
    for p in packages {
        let name = p["name"].as_str().expect("name").to_owned();
        let version = p["versionInfo"].as_str().expect("version").to_owned();
        if name == "passmower-elector" {
            assert_eq!(version, VERSION);
            continue;
        }
        let checksum = lock
            .get(&(name.clone(), version.clone()))
            .unwrap_or_else(|| panic!("{name} {version} is not in Cargo.lock"));
        assert_eq!(
            p["checksums"][0]["checksumValue"].as_str(),
            checksum.as_deref(),
            "{name} {version}: Cargo.lock's checksum"
        );
        names.insert(name);
    }
    // What the binary links is there; what only the tests use is not.
    for linked in [
        "kube",
        "tokio",
        "ring",
        "rustls",
        "clap",
        "serde_norway",
        "rcgen",
        "hyper",
    ] {
        assert!(names.contains(linked), "{linked} missing from the SBOM");
    }
    assert!(!names.contains("tempfile"), "a dev-dependency is listed");
    assert!(
        names.len() > 100 && names.len() < lock.len(),
        "{} of {} crates",
        names.len(),
        lock.len()
    );
}

#[test]
fn the_dry_run_checksums_cover_every_published_file() {
    let sums = std::fs::read_to_string(dist().join("SHA256SUMS")).expect("SHA256SUMS");
    let mut listed = BTreeSet::new();
    for line in sums.lines() {
        let (hex, name) = line.split_once("  ").expect("HASH  NAME");
        let data = std::fs::read(dist().join(name)).expect(name);
        assert_eq!(sha256_hex(&data), hex, "{name}");
        listed.insert(name.to_owned());
    }
    let files: BTreeSet<String> = std::fs::read_dir(dist())
        .expect("dist")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "SHA256SUMS")
        .collect();
    assert_eq!(listed, files);
    let expected: BTreeSet<String> = [
        format!("passmower-elector-image-{VERSION}.oci.tar"),
        format!("passmower-elector-{VERSION}-linux-{}", host_arch()),
        format!("passmower-elector-{VERSION}.tgz"),
        format!("passmower-elector-webhook-{VERSION}.tgz"),
        format!("passmower-elector-{VERSION}.spdx.json"),
    ]
    .into_iter()
    .collect();
    assert_eq!(files, expected);
}

/// A copy of the dry run, changed by `tamper`, must fail verification saying `expected`.
fn refused_after(tamper: impl FnOnce(&Path), extra: &[&str], expected: &str) {
    let copy = tempfile::tempdir().expect("tempdir");
    ok(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", dry_run().dir.path().display()))
        .arg(copy.path()));
    tamper(copy.path());
    let out = run(Command::new("python3")
        .current_dir(root())
        .arg("scripts/release/verify.py")
        .arg("--dir")
        .arg(copy.path())
        .args([
            "--repo",
            REPO,
            "--version",
            VERSION,
            "--platforms",
            host_arch(),
        ])
        .args(extra));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{expected}: {stderr}");
    assert!(stderr.contains(expected), "expected {expected:?}: {stderr}");
}

#[test]
fn the_verifier_refuses_a_release_that_disagrees_with_itself() {
    let prebuilt = ["--prebuilt"];
    // Untouched, it passes (so each refusal below is the tampering's).
    let out = run(Command::new("python3")
        .current_dir(root())
        .arg("scripts/release/verify.py")
        .arg("--dir")
        .arg(dry_run().dir.path())
        .args([
            "--repo",
            REPO,
            "--version",
            VERSION,
            "--platforms",
            host_arch(),
        ])
        .args(prebuilt));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let sbom = format!("passmower-elector-{VERSION}.spdx.json");
    refused_after(
        |dir| {
            let path = dir.join("dist").join(&sbom);
            let mut text = std::fs::read_to_string(&path).expect("sbom");
            text.push('\n');
            std::fs::write(&path, text).expect("write");
        },
        &prebuilt,
        &format!("{sbom}: its sha256 is not the listed one"),
    );
    refused_after(
        |dir| std::fs::write(dir.join("dist/NOTES.txt"), "x").expect("write"),
        &prebuilt,
        "the release has NOTES.txt",
    );
    refused_after(
        |dir| {
            let zeros = format!("sha256:{}\n", "0".repeat(64));
            std::fs::write(dir.join("work/image-digest"), zeros).expect("write");
        },
        &prebuilt,
        "but the release recorded sha256:0000",
    );
    // A chart packaged with another digest.
    refused_after(
        |dir| {
            let chart = "passmower-elector-webhook";
            let tgz = dir.join(format!("dist/{chart}-{VERSION}.tgz"));
            let unpacked = unpack(&tgz, "-xzf");
            let values = unpacked.path().join(chart).join("values.yaml");
            let text = std::fs::read_to_string(&values).expect("values");
            let digest = std::fs::read_to_string(dir.join("work/image-digest")).expect("digest");
            let changed = text.replace(digest.trim(), &format!("sha256:{}", "1".repeat(64)));
            assert_ne!(text, changed, "the values name the digest");
            std::fs::write(&values, changed).expect("write");
            ok(Command::new("tar")
                .arg("-czf")
                .arg(&tgz)
                .arg("-C")
                .arg(unpacked.path())
                .arg(chart));
        },
        &prebuilt,
        "values image.digest 'sha256:1111",
    );
    // Without --prebuilt the development binary is what a release must not be.
    refused_after(
        |_| {},
        &[],
        "has a program interpreter (dynamically linked), not static",
    );
}

#[test]
fn the_image_builder_refuses_to_mislabel_a_platform() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let image = |arch: &str, file: &Path, out: &Path| {
        run(Command::new("python3")
            .arg(root().join("scripts/oci-image.py"))
            .arg("--out")
            .arg(out)
            .args(["--ref", "docker.io/local/x:1", "--arch", arch, "--file"])
            .arg(format!("{}:/usr/local/bin/x:0755", file.display())))
    };
    let (other, other_elf) = match host_arch() {
        "amd64" => ("arm64", "x86_64"),
        _ => ("amd64", "aarch64"),
    };
    let out = image(other, Path::new(BINARY), &tmp.path().join("wrong.tar"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "an ELF file for {other_elf}, not for --arch {other}"
        )),
        "{stderr}"
    );
    let out = image("armv7", Path::new(BINARY), &tmp.path().join("armv7.tar"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--arch 'armv7': unknown architecture"),
        "{stderr}"
    );
    let out = run(Command::new(root().join("scripts/build-sidecar-image.sh"))
        .args([
            "--binary",
            BINARY,
            "--target",
            "armv7-unknown-linux-gnueabihf",
            "--out",
        ])
        .arg(tmp.path().join("armv7.tar")));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("x86_64 and aarch64 Linux"));
}

/// An ELF header for `machine` (62 x86_64, 183 aarch64): all the image builder reads of a file.
fn fake_elf(dir: &Path, machine: u16) -> PathBuf {
    let mut header = vec![0u8; 64];
    header[..6].copy_from_slice(b"\x7fELF\x02\x01");
    header[18..20].copy_from_slice(&machine.to_le_bytes());
    let path = dir.join(format!("elf-{machine}"));
    std::fs::write(&path, &header).expect("write");
    path
}

/// Two platforms into one index, each once (ELF headers stand in for the binaries: this
/// machine builds no aarch64 binary).
#[test]
fn an_index_holds_each_platform_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let single = |arch: &str, file: &Path| {
        let out = tmp.path().join(format!("{arch}.tar"));
        ok(Command::new("python3")
            .arg(root().join("scripts/oci-image.py"))
            .arg("--out")
            .arg(&out)
            .args(["--ref", "docker.io/local/x:1", "--arch", arch, "--file"])
            .arg(format!("{}:/usr/local/bin/x:0755", file.display())));
        out
    };
    let amd64 = single("amd64", &fake_elf(tmp.path(), 62));
    let arm64 = single("arm64", &fake_elf(tmp.path(), 183));
    let combine = |sources: &[&Path], out: &Path| {
        let mut cmd = Command::new("python3");
        cmd.arg(root().join("scripts/oci-image.py"))
            .arg("--out")
            .arg(out)
            .args(["--ref", "docker.io/local/x:1"]);
        for s in sources {
            cmd.arg("--from").arg(s);
        }
        run(&mut cmd)
    };
    let both = tmp.path().join("both.tar");
    let out = combine(&[&arm64, &amd64], &both);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let layout = unpack(&both, "-xf");
    let top = json(&layout.path().join("index.json"));
    let index: Value =
        serde_json::from_slice(&blob(layout.path(), &top["manifests"][0])).expect("index");
    let archs: Vec<&str> = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| {
            m["platform"]["architecture"]
                .as_str()
                .expect("architecture")
        })
        .collect();
    assert_eq!(archs, ["amd64", "arm64"]);
    let out = combine(&[&amd64, &amd64], &tmp.path().join("twice.tar"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a second image for linux/amd64"));
}
