//! The sidecar image built without Docker (`scripts/build-sidecar-image.sh`) and the one
//! `Dockerfile.sidecar` describes must be the same image: the binary at the same path, the same
//! user, entrypoint and labels, nothing else in it — and the path is the one `inject` puts in
//! the sidecar's command.

use std::path::Path;
use std::process::Command;

/// What the Dockerfile's final stage declares.
#[derive(Debug, Default)]
struct Declared {
    path: String,
    user: String,
    entrypoint: Vec<String>,
    labels: Vec<(String, String)>,
}

/// Reads the final stage (after the last `FROM`) of a Dockerfile, joining continued lines and
/// substituting `${VERSION}` with `version`.
fn declared(dockerfile: &str, version: &str) -> Declared {
    let joined = dockerfile.replace("\\\n", " ");
    let lines: Vec<&str> = joined.lines().collect();
    let last = lines
        .iter()
        .rposition(|l| l.trim_start().starts_with("FROM "))
        .expect("a FROM line");
    let mut d = Declared::default();
    for line in lines.iter().skip(last + 1) {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("COPY ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            d.path = words.last().expect("COPY destination").to_string();
        } else if let Some(rest) = line.strip_prefix("USER ") {
            d.user = rest.trim().to_owned();
        } else if let Some(rest) = line.strip_prefix("ENTRYPOINT ") {
            d.entrypoint = serde_json::from_str(rest).expect("ENTRYPOINT in exec form (JSON)");
        } else if let Some(rest) = line.strip_prefix("LABEL ") {
            // key="value" pairs; values hold spaces but no quotes.
            let mut rest = rest.trim();
            while let Some((key, after)) = rest.split_once("=\"") {
                let (value, tail) = after.split_once('"').expect("closing quote");
                d.labels
                    .push((key.trim().to_owned(), value.replace("${VERSION}", version)));
                rest = tail.trim();
            }
        }
    }
    d
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("JSON")
}

#[test]
fn the_script_builds_what_the_dockerfile_declares() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile.sidecar")).expect("Dockerfile");
    let want = declared(&dockerfile, env!("CARGO_PKG_VERSION"));
    assert_eq!(want.entrypoint, vec![want.path.clone()]);
    // inject runs the sidecar (and copy-self) by that path.
    let deployment = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: passmower}
spec:
  selector: {matchLabels: {app: p}}
  template:
    metadata: {labels: {app: p}}
    spec:
      serviceAccountName: passmower
      containers: [{name: passmower, image: "passmower:1"}]
"#;
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("deployment.yaml");
    std::fs::write(&input, deployment).expect("write");
    let injected = run(Command::new(env!("CARGO_BIN_EXE_passmower-elector"))
        .args([
            "inject",
            "--image",
            "docker.io/local/passmower-elector:check",
            "--no-fence",
            "-f",
        ])
        .arg(&input));
    let docs: Vec<serde_json::Value> = injected
        .split("\n---")
        .filter(|d| !d.trim().trim_start_matches("---").trim().is_empty())
        .map(|d| serde_norway::from_str(d).expect("inject output is YAML"))
        .collect();
    let spec = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| &d["spec"]["template"]["spec"])
        .expect("the Deployment");
    let sidecar_commands: Vec<&serde_json::Value> = spec["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .filter(|c| c["image"] == "docker.io/local/passmower-elector:check")
        .map(|c| &c["command"])
        .collect();
    assert!(
        !sidecar_commands.is_empty(),
        "no container runs the sidecar image"
    );
    for command in sidecar_commands {
        assert_eq!(
            command,
            &serde_json::json!([want.path.clone()]),
            "inject's command"
        );
    }

    let archive = tmp.path().join("image.tar");
    // The test binary stands in for the static release build: what is checked here is the
    // image around it (the script's default build is what .ci/run and users run).
    let binary = env!("CARGO_BIN_EXE_passmower-elector");
    run(Command::new(root.join("scripts/build-sidecar-image.sh"))
        .args([
            "--binary",
            binary,
            "--image",
            "docker.io/local/passmower-elector:check",
        ])
        .arg("--out")
        .arg(&archive));

    let layout = tmp.path().join("layout");
    std::fs::create_dir(&layout).expect("mkdir");
    run(Command::new("tar")
        .arg("-C")
        .arg(&layout)
        .arg("-xf")
        .arg(&archive));
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&layout.join("index.json"));
    let entry = &index["manifests"][0];
    assert_eq!(
        entry["annotations"]["io.containerd.image.name"],
        "docker.io/local/passmower-elector:check"
    );
    let blob = |digest: &serde_json::Value| {
        let digest = digest.as_str().expect("digest");
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let manifest = json(&blob(&entry["digest"]));
    let config = json(&blob(&manifest["config"]["digest"]));
    let c = &config["config"];
    assert_eq!(c["User"], want.user.as_str(), "USER");
    assert_eq!(
        c["Entrypoint"],
        serde_json::json!(want.entrypoint),
        "ENTRYPOINT"
    );
    assert!(c.get("Cmd").is_none(), "the Dockerfile sets no CMD");
    for (key, value) in &want.labels {
        assert_eq!(c["Labels"][key], value.as_str(), "LABEL {key}");
    }
    assert_eq!(
        c["Labels"].as_object().map(|l| l.len()),
        Some(want.labels.len()),
        "labels beyond the Dockerfile's: {}",
        c["Labels"]
    );

    // One layer holding the binary at the path (owned by root, mode 0755) and its parents.
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "FROM scratch + one COPY is one layer");
    let layer = blob(&layers[0]["digest"]);
    let listing = run(Command::new("tar").arg("-tvzf").arg(&layer));
    let rel = want.path.trim_start_matches('/');
    let files: Vec<&str> = listing.lines().filter(|l| !l.starts_with('d')).collect();
    assert_eq!(files.len(), 1, "one file in the image: {listing}");
    assert!(
        files[0].starts_with("-rwxr-xr-x 0/0") && files[0].ends_with(rel),
        "the binary's entry: {}",
        files[0]
    );
    let unpacked = tmp.path().join("rootfs");
    std::fs::create_dir(&unpacked).expect("mkdir");
    run(Command::new("tar")
        .arg("-C")
        .arg(&unpacked)
        .arg("-xzf")
        .arg(&layer));
    assert!(
        std::fs::read(unpacked.join(rel)).expect("the binary")
            == std::fs::read(binary).expect("binary"),
        "the image holds other bytes than the binary given"
    );
    // The diff_id is the digest of the uncompressed layer, as the OCI spec requires.
    let plain = run(Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -dc {} | sha256sum", layer.display())));
    assert_eq!(
        config["rootfs"]["diff_ids"][0],
        format!(
            "sha256:{}",
            plain.split_whitespace().next().unwrap_or_default()
        )
    );
}
