//! The deployment files in deploy/: every Kustomize overlay renders and validates offline
//! against the Kubernetes schemas, the agent's ConfigMap passes `causeway agent --check-config`,
//! the Helm chart renders the Kustomize base's objects, the systemd unit verifies, and the
//! Containerfile lints. The tools come from scripts/deps.sh (.deps/k8s); a missing one fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The Kubernetes version the rendered objects are validated against (its JSON schemas ship
/// with kubernetes-validate): a release the large providers still run, after 1.30, where
/// appArmorProfile became a field.
const KUBERNETES_VERSION: &str = "1.32.0";

/// The capabilities the agent holds, in Kubernetes' spelling (docs/deploy.md says why each).
const AGENT_CAPS: [&str; 5] = ["BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH", "KILL"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn deploy() -> PathBuf {
    repo().join("deploy")
}

/// A tool scripts/deps.sh installs: .deps/k8s/bin/NAME or .deps/k8s/venv/bin/NAME.
fn tool(name: &str) -> PathBuf {
    let k8s = repo().join(".deps/k8s");
    for p in [k8s.join("bin").join(name), k8s.join("venv/bin").join(name)] {
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} is missing from {}: run `bash scripts/deps.sh` (it installs kubectl, helm, \
         kubernetes-validate and hadolint for this test)",
        k8s.display()
    );
}

/// A command found on PATH (a system package scripts/deps.sh installs).
fn system_tool(name: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not on PATH: run `bash scripts/deps.sh` (Debian package {package})")
        })
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Multi-document YAML as JSON values (PyYAML from the kubernetes-validate environment).
fn yaml_docs(yaml: &[u8]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("in.yaml");
    std::fs::write(&file, yaml).unwrap();
    let out = run(Command::new(tool("python")).args([
        "-c",
        "import json, sys, yaml\n\
         docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None]\n\
         json.dump(docs, sys.stdout)",
        file.to_str().unwrap(),
    ]));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// `kubectl kustomize DIR`: the YAML and its objects.
fn kustomize(dir: &Path) -> (Vec<u8>, Vec<Value>) {
    let out = run(Command::new(tool("kubectl")).arg("kustomize").arg(dir));
    let docs = yaml_docs(&out.stdout);
    (out.stdout, docs)
}

/// `helm template` of the chart in namespace `causeway` with `--set` values.
fn helm_template(sets: &[&str]) -> (Vec<u8>, Vec<Value>) {
    let mut cmd = Command::new(tool("helm"));
    cmd.args(["template", "causeway"])
        .arg(deploy().join("helm/causeway"))
        .args(["--namespace", "causeway"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = run(&mut cmd);
    let docs = yaml_docs(&out.stdout);
    (out.stdout, docs)
}

/// Validates rendered YAML against the Kubernetes schemas, rejecting unknown fields.
fn validate(what: &str, yaml: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{what}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new(tool("kubernetes-validate"))
        .args(["--strict", "--quiet", "-k", KUBERNETES_VERSION])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: objects do not validate against Kubernetes {KUBERNETES_VERSION}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every overlay directory under deploy/kubernetes/overlays.
fn overlays() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(deploy().join("kubernetes/overlays"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("kustomization.yaml").is_file())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 2,
        "expected the single-node and fleet overlays"
    );
    dirs
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} among the rendered objects"))
}

/// (kind, name) of each object, the ConfigMap's content hash suffix removed.
fn kinds_and_names(docs: &[Value]) -> BTreeSet<(String, String)> {
    docs.iter()
        .map(|d| {
            let kind = d["kind"].as_str().unwrap().to_string();
            let name = d["metadata"]["name"].as_str().unwrap();
            let name = match name.rsplit_once('-') {
                Some((base, hash)) if kind == "ConfigMap" && hash.len() == 10 => base,
                _ => name,
            };
            (kind, name.to_string())
        })
        .collect()
}

/// The agent.toml a rendered ConfigMap holds.
fn agent_toml(docs: &[Value]) -> String {
    let cms: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "ConfigMap").collect();
    assert_eq!(cms.len(), 1, "one ConfigMap (the agent's)");
    cms[0]["data"]["agent.toml"].as_str().unwrap().to_string()
}

/// The agent DaemonSet's pod spec, checked for least privilege and what the agent needs.
fn check_agent_pod(docs: &[Value], what: &str) {
    let pod = &find(docs, "DaemonSet", "causeway-agent")["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true, "{what}: the agent traces host pids");
    assert!(pod["hostNetwork"].is_null(), "{what}: no host network");
    assert_eq!(pod["serviceAccountName"], "causeway-agent", "{what}");
    let c = &pod["containers"][0];
    assert_eq!(
        c["args"],
        serde_json::json!(["agent", "--config", "/etc/causeway/agent.toml"]),
        "{what}"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{what}"
    );
    assert_eq!(
        sc["capabilities"]["add"],
        serde_json::json!(AGENT_CAPS),
        "{what}: the capabilities docs/deploy.md lists"
    );
    let env = c["env"].as_array().unwrap();
    let node_name = env.iter().find(|e| e["name"] == "NODE_NAME").unwrap();
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName",
        "{what}: in-cluster pod names need NODE_NAME from the downward API"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["tcpSocket"]["port"], "http", "{what}: {probe}");
    }
    assert_eq!(c["ports"][0]["containerPort"], 8765, "{what}");
    assert!(c["resources"]["limits"]["memory"].is_string(), "{what}");
    // Every hostPath is one docs/deploy.md explains; the data directory is the config's.
    let doc = std::fs::read_to_string(repo().join("docs/deploy.md")).unwrap();
    let host_paths: BTreeSet<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert_eq!(
        host_paths,
        BTreeSet::from(["/sys/fs/cgroup", "/var/lib/causeway"]),
        "{what}: hostPath mounts"
    );
    for p in host_paths {
        assert!(
            doc.contains(&format!("`{p}`")),
            "docs/deploy.md explains {p}"
        );
    }
    for cap in AGENT_CAPS {
        assert!(
            doc.contains(&format!("`CAP_{cap}`")),
            "docs/deploy.md explains CAP_{cap}"
        );
    }
}

/// Runs `causeway agent --check-config` on `toml` as the DaemonSet would (NODE_NAME and
/// CAUSEWAY_NODE from the downward API). Passes once `causeway agent` exists (issue 32, 1).
fn check_config(what: &str, toml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["agent", "--check-config", "--config"])
        .arg(&file)
        .env("NODE_NAME", "gpu-node-1")
        .env("CAUSEWAY_NODE", "gpu-node-1")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: causeway agent --check-config rejected the deployed configuration:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("data_dir") && stdout.contains("/var/lib/causeway"),
        "{what}: the effective configuration names the data directory:\n{stdout}"
    );
}

#[test]
fn every_overlay_renders_and_validates_against_the_kubernetes_schemas() {
    for dir in overlays() {
        let what = dir.file_name().unwrap().to_string_lossy().to_string();
        let (yaml, docs) = kustomize(&dir);
        validate(&what, &yaml);
        check_agent_pod(&docs, &what);
        find(&docs, "Service", "causeway-agent");
        let role = find(&docs, "ClusterRole", "causeway-agent");
        assert_eq!(
            role["rules"],
            serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
            "{what}: in-cluster pod names list this node's pods, nothing more"
        );
        assert!(agent_toml(&docs).contains("data_dir = \"/var/lib/causeway\""));
    }
}

#[test]
fn single_node_serves_alone_and_fleet_pushes_to_collect() {
    let (_, single) = kustomize(&deploy().join("kubernetes/overlays/single-node"));
    assert!(
        !single.iter().any(|d| d["kind"] == "StatefulSet"),
        "single-node has no cluster store"
    );
    assert!(!agent_toml(&single).contains("[otlp]"));

    let (_, fleet) = kustomize(&deploy().join("kubernetes/overlays/fleet"));
    let collect = &find(&fleet, "StatefulSet", "causeway-collect")["spec"];
    assert_eq!(collect["replicas"], 1, "one writer per DuckDB file");
    assert_eq!(
        collect["volumeClaimTemplates"][0]["metadata"]["name"],
        "data"
    );
    let c = &collect["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "collect");
    assert!(args.contains(&"--db=/var/lib/causeway/cluster.duckdb"));
    assert!(args.contains(&"--token-file=/etc/causeway/token"));
    assert_eq!(
        collect["template"]["spec"]["securityContext"]["runAsNonRoot"],
        true
    );
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert!(c["securityContext"]["capabilities"]["add"].is_null());
    let service = find(&fleet, "Service", "causeway-collect");
    let ports: BTreeSet<i64> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, BTreeSet::from([4317, 4318]));

    // The fleet configuration is the base's plus [otlp] to that Service, with the token the
    // agents' pod mounts.
    let toml = agent_toml(&fleet);
    assert!(toml.contains("endpoint = \"http://causeway-collect.causeway.svc:4318\""));
    assert!(toml.contains("token_file = \"/etc/causeway/collect-token\""));
    let base = std::fs::read_to_string(deploy().join("agent.toml")).unwrap();
    let settings = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| l.split('#').next().unwrap().trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let (base, fleet_settings) = (settings(&base), settings(&toml));
    assert_eq!(
        fleet_settings[..base.len()],
        base[..],
        "overlays/fleet/agent.toml is deploy/agent.toml plus [otlp]"
    );
    assert_eq!(fleet_settings[base.len()], "[otlp]");
    let sources = &find(&fleet, "DaemonSet", "causeway-agent")["spec"]["template"]["spec"]["volumes"]
        [0]["projected"]["sources"];
    assert!(
        sources
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["secret"]["name"] == "causeway-collect-token"
                && s["secret"]["items"][0]["path"] == "collect-token")
    );
}

#[test]
fn the_configmap_is_deploy_agent_toml() {
    let file = deploy().join("agent.toml").canonicalize().unwrap();
    assert_eq!(
        file,
        deploy().join("kubernetes/base/agent.toml"),
        "deploy/agent.toml is the base's file (one source)"
    );
    assert_eq!(
        deploy()
            .join("helm/causeway/files/agent.toml")
            .canonicalize()
            .unwrap(),
        file,
        "the chart's agent.toml is the same file"
    );
    let (_, docs) = kustomize(&deploy().join("kubernetes/overlays/single-node"));
    assert_eq!(agent_toml(&docs), std::fs::read_to_string(&file).unwrap());
}

#[test]
fn deployed_agent_configs_pass_check_config() {
    for dir in overlays() {
        let what = dir.file_name().unwrap().to_string_lossy().to_string();
        let (_, docs) = kustomize(&dir);
        check_config(&what, &agent_toml(&docs));
    }
    let (_, docs) = helm_template(&["agent.otlp.enabled=true"]);
    check_config("helm (agent.otlp.enabled)", &agent_toml(&docs));
}

#[test]
fn helm_chart_renders_the_kustomize_base() {
    let chart = deploy().join("helm/causeway");
    run(Command::new(tool("helm"))
        .args(["lint", "--strict"])
        .arg(&chart));

    let (_, base) = kustomize(&deploy().join("kubernetes/base"));
    let (yaml, helm) = helm_template(&["namespace.create=true"]);
    validate("helm", &yaml);
    assert_eq!(
        kinds_and_names(&helm),
        kinds_and_names(&base),
        "the chart's objects are the Kustomize base's"
    );
    check_agent_pod(&helm, "helm");
    assert_eq!(
        agent_toml(&helm),
        agent_toml(&base),
        "the chart's agent.toml is the base's"
    );

    // collect.enabled=false is the single-node overlay (less the Namespace it leaves to Helm).
    let (yaml, helm) = helm_template(&["collect.enabled=false"]);
    validate("helm-single-node", &yaml);
    let (_, single) = kustomize(&deploy().join("kubernetes/overlays/single-node"));
    let mut expected = kinds_and_names(&single);
    expected.remove(&("Namespace".to_string(), "causeway".to_string()));
    assert_eq!(kinds_and_names(&helm), expected);

    // agent.otlp.enabled mounts the collect token where [otlp] reads it.
    let (yaml, helm) = helm_template(&["agent.otlp.enabled=true"]);
    validate("helm-fleet", &yaml);
    let toml = agent_toml(&helm);
    assert!(toml.contains("[otlp]") && toml.contains("/etc/causeway/collect-token"));
    let sources = &find(&helm, "DaemonSet", "causeway-agent")["spec"]["template"]["spec"]["volumes"]
        [0]["projected"]["sources"];
    assert_eq!(sources.as_array().unwrap().len(), 3);
}

#[test]
fn systemd_unit_verifies_and_holds_the_agents_capabilities() {
    let unit = std::fs::read_to_string(deploy().join("systemd/causeway-agent.service")).unwrap();
    let analyze = system_tool("systemd-analyze", "systemd");
    // verify checks that ExecStart's program exists: point it at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("causeway-agent.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/causeway", env!("CARGO_BIN_EXE_causeway")),
    )
    .unwrap();
    run(Command::new(&analyze).arg("verify").arg(&copy));
    // Exposure 3.0 or less ("OK"); the unit scores 2.6 with systemd 252.
    run(Command::new(&analyze)
        .args(["security", "--offline=true", "--threshold=30", "--no-pager"])
        .arg(&copy));

    let setting = |key: &str| -> BTreeSet<String> {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key}= is missing"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let caps: BTreeSet<String> = AGENT_CAPS.iter().map(|c| format!("CAP_{c}")).collect();
    assert_eq!(setting("CapabilityBoundingSet"), caps);
    assert_eq!(setting("AmbientCapabilities"), caps);
    for line in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=causeway",
        "PrivateTmp=yes",
        "ExecStart=/usr/local/bin/causeway agent --config /etc/causeway/agent.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line}");
    }
}

#[test]
fn containerfile_lints_and_ships_the_duckdb_library_where_the_rpath_looks() {
    let file = deploy().join("Containerfile");
    run(Command::new(tool("hadolint")).arg(&file));
    let text = std::fs::read_to_string(&file).unwrap();
    // The DuckDB library of scripts/deps.sh, the one the `duckdb` crate is pinned to.
    let deps = std::fs::read_to_string(repo().join("scripts/deps.sh")).unwrap();
    let var = |name: &str| -> String {
        let line = deps
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap();
        line.trim_matches('"').to_string()
    };
    let npm = var("DUCKDB_NPM").replace("${DUCKDB_VERSION}", &var("DUCKDB_VERSION"));
    assert!(
        text.contains(&format!("ARG DUCKDB_NPM={npm}\n")),
        "the Containerfile fetches {npm}, as scripts/deps.sh does"
    );
    let build_rs = std::fs::read_to_string(repo().join("crates/causeway/build.rs")).unwrap();
    assert!(build_rs.contains("$ORIGIN/../lib/causeway"));
    assert!(text.contains("/out/usr/local/bin/causeway"));
    assert!(text.contains("/out/usr/local/lib/causeway/libduckdb.so"));
    let last_stage = text.rsplit("\nFROM ").next().unwrap();
    assert!(last_stage.contains("\nUSER 65532:65532\n"), "non-root");
    assert!(last_stage.contains("\nENTRYPOINT [\"causeway\"]\n"));
}

/// `causeway query --json SQL` on `db`: the first column of the first row.
fn count(db: &Path, sql: &str) -> i64 {
    let out = run(Command::new(env!("CARGO_BIN_EXE_causeway"))
        .args(["query", "--json", "--db"])
        .arg(db)
        .arg(sql));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["rows"][0][0].as_i64().unwrap()
}

/// The capability set the DaemonSet and the unit give is enough: `causeway trace --pid` of a
/// root process of the stand-in workload, run as an unprivileged uid holding only those
/// capabilities (ambient, as under systemd), attaches to the library the process maps from a
/// directory only root may search and records its calls. (It checks that the set suffices;
/// docs/deploy.md says what each capability is for.)
#[test]
fn the_agents_capabilities_suffice_to_trace_another_users_process() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;
    if !crate::trace::bpf_tests() {
        return;
    }
    let setpriv = system_tool("setpriv", "util-linux");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let db = dir.path().join("t.duckdb");
    let caps = AGENT_CAPS
        .iter()
        .map(|c| format!("+{}", c.to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    // The workload (root, this test's uid) launches a kernel every millisecond for 8 s.
    let mut workload = Command::new(crate::trace::standin())
        .args(["hold", "8000"])
        .spawn()
        .unwrap();
    let pid = workload.id();
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg(env!("CARGO_BIN_EXE_causeway"))
        .args([
            "trace",
            "--duration",
            "4s",
            "--pid",
            &pid.to_string(),
            "--db",
        ])
        .arg(&db)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let status = workload.wait().unwrap();
    assert!(
        out.status.success(),
        "causeway trace with only {caps}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(status.success(), "workload: {status}");
    let attached = count(
        &db,
        &format!(
            "SELECT count(*) FROM library_attach WHERE pid = {pid} AND attached_ns IS NOT NULL"
        ),
    );
    assert!(
        attached >= 1,
        "the root process's CUDA libraries were attached"
    );
    let launches = count(
        &db,
        &format!("SELECT count(*) FROM events WHERE pid = {pid} AND op = 'cudaLaunchKernel'"),
    );
    assert!(launches > 0, "its kernel launches were recorded");
}
