//! Pod names from Kubernetes: the pod list of this node, from the kubelet (`/pods`) or the API
//! server (`/api/v1/pods?fieldSelector=spec.nodeName=NODE`), both answering a PodList. Asked
//! once per unknown pod (rate-limited), cached; every failure becomes a note, never an error
//! that stops tracing.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where pod metadata comes from and how to authenticate.
#[derive(Debug, Clone)]
pub struct PodSource {
    /// The URL answering a PodList.
    pub url: String,
    /// Bearer token (a service account's), if any.
    pub token: Option<String>,
    /// PEM of the CA that signed the server's certificate (https), if not a public one.
    pub ca_pem: Option<Vec<u8>>,
    /// Per-request time limit.
    pub timeout: Duration,
}

impl PodSource {
    /// A source at `url`, reading the token and CA from files when given.
    pub fn new(
        url: &str,
        token_file: Option<&Path>,
        ca_file: Option<&Path>,
    ) -> Result<PodSource, String> {
        let read = |p: &Path, what: &str| {
            std::fs::read(p).map_err(|e| format!("{}: cannot read the {what}: {e}", p.display()))
        };
        let token = token_file
            .map(|p| read(p, "token").map(|b| String::from_utf8_lossy(&b).trim().to_string()))
            .transpose()?;
        let ca_pem = ca_file.map(|p| read(p, "CA certificate")).transpose()?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("{url}: not an http(s) URL"));
        }
        Ok(PodSource {
            url: url.to_string(),
            token,
            ca_pem,
            timeout: Duration::from_secs(3),
        })
    }

    /// The in-cluster API server's pod list for node `node`, with the pod's service account
    /// (KUBERNETES_SERVICE_HOST/PORT and /var/run/secrets/kubernetes.io/serviceaccount).
    pub fn in_cluster(node: &str) -> Result<PodSource, String> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST")
            .map_err(|_| "KUBERNETES_SERVICE_HOST is not set: not running in a pod".to_string())?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let sa = Path::new("/var/run/secrets/kubernetes.io/serviceaccount");
        PodSource::new(
            &format!("https://{host}:{port}/api/v1/pods?fieldSelector=spec.nodeName={node}"),
            Some(&sa.join("token")),
            Some(&sa.join("ca.crt")),
        )
    }
}

/// What Kubernetes says about one container's pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMeta {
    /// Pod name.
    pub pod_name: String,
    /// Namespace.
    pub namespace: String,
    /// Container name ("" when the container id is not among the pod's).
    pub container_name: String,
}

#[derive(Debug, Clone, Default)]
struct Pod {
    name: String,
    namespace: String,
    /// container id (runtime prefix removed) -> container name.
    containers: HashMap<String, String>,
}

/// The pods of this node, fetched on demand and cached.
#[derive(Debug)]
pub struct PodDirectory {
    source: PodSource,
    agent: ureq::Agent,
    pods: HashMap<String, Pod>,
    last_fetch: Option<Instant>,
    last_error: Option<String>,
    /// The least time between two fetches (a pod the list lacks is not asked for in a loop).
    pub min_refresh: Duration,
}

impl PodDirectory {
    /// A directory that asks `source`.
    pub fn new(source: PodSource) -> Result<PodDirectory, String> {
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(pem) = &source.ca_pem {
            let certs: Vec<_> = ureq::tls::parse_pem(pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err("the CA file holds no PEM certificate".into());
            }
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(source.timeout))
            .http_status_as_error(false)
            .tls_config(tls.build())
            .build()
            .into();
        Ok(PodDirectory {
            source,
            agent,
            pods: HashMap::new(),
            last_fetch: None,
            last_error: None,
            min_refresh: Duration::from_secs(10),
        })
    }

    /// The pod `pod_uid` and the name of container `container_id` in it, or a note saying why
    /// they are not known.
    pub fn lookup(&mut self, pod_uid: &str, container_id: &str) -> Result<PodMeta, String> {
        if !self.pods.contains_key(pod_uid) {
            let due = self
                .last_fetch
                .is_none_or(|t| t.elapsed() >= self.min_refresh);
            if due {
                self.last_fetch = Some(Instant::now());
                match self.fetch() {
                    Ok(pods) => {
                        self.pods = pods;
                        self.last_error = None;
                    }
                    Err(e) => self.last_error = Some(e),
                }
            }
        }
        match self.pods.get(pod_uid) {
            Some(p) => Ok(PodMeta {
                pod_name: p.name.clone(),
                namespace: p.namespace.clone(),
                container_name: p.containers.get(container_id).cloned().unwrap_or_default(),
            }),
            None => Err(self.last_error.clone().unwrap_or_else(|| {
                format!(
                    "pod {pod_uid} is not in the pod list of {}",
                    self.source.url
                )
            })),
        }
    }

    fn fetch(&self) -> Result<HashMap<String, Pod>, String> {
        let url = &self.source.url;
        let mut req = self.agent.get(url).header("Accept", "application/json");
        if let Some(t) = &self.source.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req
            .call()
            .map_err(|e| format!("pod metadata unavailable: cannot reach {url}: {e}"))?;
        let status = resp.status();
        if !status.is_success() {
            let why = match status.as_u16() {
                401 => " (the token was not accepted)",
                403 => " (the service account needs get and list on pods)",
                _ => "",
            };
            return Err(format!(
                "pod metadata refused: {url} answered {status}{why}"
            ));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| format!("pod metadata unavailable: reading {url}: {e}"))?;
        parse_pod_list(&body).map_err(|e| format!("pod metadata malformed: {url}: {e}"))
    }
}

/// Pods by uid from a PodList (the kubelet's /pods or the API server's /api/v1/pods).
fn parse_pod_list(body: &str) -> Result<HashMap<String, Pod>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON ({e})"))?;
    let items = v
        .get("items")
        .and_then(|i| i.as_array())
        .ok_or("not a PodList (no items array)")?;
    let mut pods = HashMap::new();
    for item in items {
        let meta = item.get("metadata");
        let text = |v: Option<&serde_json::Value>, k: &str| {
            v.and_then(|m| m.get(k))
                .and_then(|s| s.as_str())
                .unwrap_or("")
                .to_string()
        };
        let uid = text(meta, "uid");
        if uid.is_empty() {
            continue;
        }
        let mut containers = HashMap::new();
        let status = item.get("status");
        for key in [
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ] {
            for c in status
                .and_then(|s| s.get(key))
                .and_then(|c| c.as_array())
                .into_iter()
                .flatten()
            {
                let id = text(Some(c), "containerID");
                // "containerd://<id>", "cri-o://<id>", "docker://<id>".
                let id = id.rsplit("://").next().unwrap_or("").to_string();
                if !id.is_empty() {
                    containers.insert(id, text(Some(c), "name"));
                }
            }
        }
        pods.insert(
            uid.to_ascii_lowercase(),
            Pod {
                name: text(meta, "name"),
                namespace: text(meta, "namespace"),
                containers,
            },
        );
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_list_maps_uids_and_container_ids() {
        let body = r#"{"kind":"PodList","items":[{"metadata":{"name":"trainer-0","namespace":"ml-jobs","uid":"0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b"},
            "status":{"containerStatuses":[{"name":"trainer","containerID":"containerd://aa"}],
                      "initContainerStatuses":[{"name":"fetch","containerID":"containerd://bb"}]}}]}"#;
        let pods = parse_pod_list(body).unwrap();
        let p = &pods["0f3a5c1e-2b4d-4e6f-8a9b-0c1d2e3f4a5b"];
        assert_eq!(
            (p.name.as_str(), p.namespace.as_str()),
            ("trainer-0", "ml-jobs")
        );
        assert_eq!(p.containers["aa"], "trainer");
        assert_eq!(p.containers["bb"], "fetch");
        assert!(parse_pod_list("{}").is_err());
        assert!(parse_pod_list("<html>").is_err());
    }
}
