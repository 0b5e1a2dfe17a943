//! Fake nodes: a std TcpListener on its own thread, one thread per connection, reading one
//! HTTP/1.1 request and answering it as the test's handler says (or never); plus the PKI the
//! TLS tests need.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One request a node received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// (lower-case name, value).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    /// The value of header `name`, if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How a node answers one request.
pub enum Answer {
    /// This status and body.
    Reply(u16, Vec<u8>),
    /// Nothing: the connection stays open until the client leaves.
    Silent,
}

impl Answer {
    /// A JSON answer.
    pub fn json(status: u16, v: serde_json::Value) -> Answer {
        Answer::Reply(status, v.to_string().into_bytes())
    }
}

type Handler = dyn Fn(&Seen) -> Answer + Send + Sync;

/// A node listening on loopback until the test process ends.
pub struct Node {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Node {
    /// A plain HTTP node.
    pub fn start(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Node {
        Node::serve(None, Arc::new(handler))
    }

    /// An HTTPS node with the TLS configuration `tls`.
    pub fn start_tls(
        tls: Arc<rustls::ServerConfig>,
        handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
    ) -> Node {
        Node::serve(Some(tls), Arc::new(handler))
    }

    fn serve(tls: Option<Arc<rustls::ServerConfig>>, handler: Arc<Handler>) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (tls, handler, log) = (tls.clone(), handler.clone(), log.clone());
                std::thread::spawn(move || match tls {
                    None => converse(stream, &*handler, &log),
                    Some(cfg) => {
                        let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                            return;
                        };
                        converse(rustls::StreamOwned::new(conn, stream), &*handler, &log);
                    }
                });
            }
        });
        Node { addr, seen }
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request off `s`, records it, and answers it.
fn converse<S: Read + Write>(s: S, handler: &Handler, log: &Mutex<Vec<Seen>>) {
    let mut r = BufReader::new(s);
    // A client that fails its TLS handshake or leaves early sends no request.
    let Some(req) = read_request(&mut r) else {
        return;
    };
    log.lock().unwrap().push(req.clone());
    let mut s = r.into_inner();
    match handler(&req) {
        Answer::Reply(status, body) => {
            let head = format!(
                "HTTP/1.1 {status} Answer\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(&body);
            let _ = s.flush();
        }
        Answer::Silent => {
            // Held until the client gives up and closes.
            let _ = s.read_to_end(&mut Vec::new());
        }
    }
}

fn read_request<R: BufRead>(r: &mut R) -> Option<Seen> {
    let mut line = String::new();
    r.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    r.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body,
    })
}

/// An address where nothing listens (bound, then released).
pub fn dead_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// PEM files of a CA, a node certificate for 127.0.0.1 it signed, and a client certificate
/// it signed.
pub struct Pki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    /// Writes a fresh PKI into `dir`.
    pub fn new(dir: &Path) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        for (name, san) in [("server", "127.0.0.1"), ("client", "fleet-client")] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![san.to_string()])
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
        Pki {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        }
    }

    /// The node's TLS configuration; with `require_client_cert`, a client certificate the CA
    /// signed is required (mutual TLS).
    pub fn server_config(&self, require_client_cert: bool) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.server_cert)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&self.server_key).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(&self.ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(builder.with_single_cert(certs, key).unwrap())
    }
}

/// The hint an error carries, wherever in its chain.
pub fn hint_of(e: &anyhow::Error) -> String {
    e.downcast_ref::<causeway_store::Hinted>()
        .map(|h| h.hint.clone())
        .unwrap_or_else(|| panic!("no hint in {e:#}"))
}
