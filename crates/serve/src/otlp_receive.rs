//! The OTLP receivers of `causeway collect`: OTLP/HTTP (`POST /v1/metrics`, `POST /v1/logs`,
//! protobuf) next to MCP on the HTTP server, and OTLP/gRPC (the collector Metrics and Logs
//! services) on its own listener. Both decode into rows, hand them to the ingest queue and
//! answer once they are committed: 200 / OK (with a partial success when some points were
//! malformed), 400 / INVALID_ARGUMENT with what was wrong, 413 / INVALID_ARGUMENT for what can
//! never be taken (too large for the body limit or the whole queue), 401 / UNAUTHENTICATED
//! without the token, 503 / UNAVAILABLE (retryable, the OTLP spec's codes) when the queue or
//! the memory budget of requests in flight is full for now.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use causeway_ingest::{DECODE_FACTOR, Decoded, Ingest, MemoryBudget, SubmitError, decode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsService;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsService;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;

use super::http::{Body, bare};

/// The OTLP/HTTP paths.
pub const METRICS_PATH: &str = "/v1/metrics";
/// See [`METRICS_PATH`].
pub const LOGS_PATH: &str = "/v1/logs";

/// google.rpc.Status, the body of an OTLP/HTTP error response.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    /// gRPC status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What was wrong, for people.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// Why a request was not (fully) taken.
#[derive(Debug)]
enum Refusal {
    Invalid(String),
    /// Can never be taken as sent (non-retryable).
    TooLarge(String),
    Busy(String),
    Unavailable(String),
}

/// Decodes are done; queue the rows and wait for the commit. Returns the rejected count and
/// the first rejection's reason.
async fn ingest(ingest: &Ingest, d: Decoded, what: &str) -> Result<(u64, String), Refusal> {
    if d.rows.items() == 0 && d.rejected > 0 {
        ingest.count_invalid();
        return Err(Refusal::Invalid(format!(
            "no usable {what} in the request: {} rejected, first: {}",
            d.rejected, d.error
        )));
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    match ingest.submit(
        d.rows,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    ) {
        Ok(()) => {}
        Err(e @ SubmitError::Busy { .. }) => {
            return Err(Refusal::Busy(format!("{e}; retry with backoff")));
        }
        Err(e @ SubmitError::TooLarge { .. }) => return Err(Refusal::TooLarge(e.to_string())),
        Err(e @ SubmitError::Closed) => return Err(Refusal::Unavailable(e.to_string())),
    }
    match rx.await {
        Ok(Ok(())) => {
            ingest.count_partial(d.rejected);
            Ok((d.rejected, d.error))
        }
        Ok(Err(e)) => Err(Refusal::Unavailable(format!(
            "the cluster store could not write the batch: {e}"
        ))),
        Err(_) => Err(Refusal::Unavailable("the cluster store is closing".into())),
    }
}

fn proto_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    super::api::with_body(status, "application/x-protobuf", body)
}

fn http_error(status: StatusCode, code: tonic::Code, message: String) -> Response<Body> {
    tracing::info!(status = status.as_u16(), %message, "OTLP request refused");
    let mut r = proto_response(
        status,
        RpcStatus {
            code: code as i32,
            message,
        }
        .encode_to_vec(),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
    }
    r
}

fn refusal_response(r: Refusal) -> Response<Body> {
    match r {
        Refusal::Invalid(m) => http_error(StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument, m),
        Refusal::TooLarge(m) => http_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            tonic::Code::InvalidArgument,
            m,
        ),
        Refusal::Busy(m) => {
            http_error(StatusCode::SERVICE_UNAVAILABLE, tonic::Code::Unavailable, m)
        }
        Refusal::Unavailable(m) => {
            http_error(StatusCode::SERVICE_UNAVAILABLE, tonic::Code::Unavailable, m)
        }
    }
}

/// `POST /v1/metrics` and `POST /v1/logs` (token already checked).
pub async fn handle_http(
    req: Request<super::http::InBody>,
    ingest: Arc<Ingest>,
    max_body: usize,
    budget: Arc<MemoryBudget>,
) -> Response<Body> {
    if req.method() != Method::POST {
        return bare(StatusCode::METHOD_NOT_ALLOWED);
    }
    if super::limits::declared_too_large(&req, max_body) {
        ingest.count_invalid();
        return refusal_response(Refusal::TooLarge(format!(
            "the request body is larger than {max_body} bytes; send smaller batches or raise --max-otlp-body"
        )));
    }
    // The memory its decoding takes is reserved before the body is read; an unknown length
    // reserves the largest body.
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(max_body as u64)
        .min(max_body as u64);
    let Some(mut reserved) = budget.try_reserve(declared.max(1) * DECODE_FACTOR) else {
        return refusal_response(Refusal::Busy(format!(
            "requests being decoded hold the collector's memory budget ({} MiB); retry with backoff",
            budget.limit() >> 20
        )));
    };
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if !content_type.starts_with("application/x-protobuf") {
        ingest.count_invalid();
        return http_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            format!(
                "Content-Type '{content_type}' is not supported; send OTLP protobuf (application/x-protobuf), or OTLP/gRPC to --grpc-listen"
            ),
        );
    }
    let gzip = match req
        .headers()
        .get(hyper::header::CONTENT_ENCODING)
        .map(|v| v.as_bytes())
    {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(other) => {
            ingest.count_invalid();
            return http_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                tonic::Code::InvalidArgument,
                format!(
                    "Content-Encoding '{}' is not supported; send gzip or uncompressed bodies",
                    String::from_utf8_lossy(other)
                ),
            );
        }
    };
    let metrics = req.uri().path() == METRICS_PATH;
    let body = match Limited::new(req.into_body(), max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            ingest.count_invalid();
            return http_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                tonic::Code::InvalidArgument,
                format!(
                    "the request body is larger than {max_body} bytes; send smaller batches or raise --max-otlp-body"
                ),
            );
        }
        Err(_) => return bare(StatusCode::REQUEST_TIMEOUT),
    };
    let body = if gzip {
        match gunzip(&body, max_body) {
            Ok(b) => b,
            Err(m) => {
                ingest.count_invalid();
                return http_error(StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument, m);
            }
        }
    } else {
        body
    };
    let inflated = body.len() as u64;
    if inflated > reserved.bytes() / DECODE_FACTOR
        && !reserved.grow((inflated - reserved.bytes() / DECODE_FACTOR) * DECODE_FACTOR)
    {
        return refusal_response(Refusal::Busy(format!(
            "requests being decoded hold the collector's memory budget ({} MiB); retry with backoff",
            budget.limit() >> 20
        )));
    }
    let answer = if metrics {
        match decode_body::<ExportMetricsServiceRequest>(&ingest, body) {
            Ok(msg) => ingest_metrics(&ingest, &msg)
                .await
                .map(|r| r.encode_to_vec()),
            Err(m) => return http_error(StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument, m),
        }
    } else {
        match decode_body::<ExportLogsServiceRequest>(&ingest, body) {
            Ok(msg) => ingest_logs(&ingest, &msg).await.map(|r| r.encode_to_vec()),
            Err(m) => return http_error(StatusCode::BAD_REQUEST, tonic::Code::InvalidArgument, m),
        }
    };
    match answer {
        Ok(body) => proto_response(StatusCode::OK, body),
        Err(r) => refusal_response(r),
    }
}

/// Inflates a gzip body, every member of it (RFC 1952 allows several, concatenated), refusing
/// more than `max` bytes once inflated.
fn gunzip(body: &[u8], max: usize) -> Result<Bytes, String> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(body)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("the body is not valid gzip: {e}"))?;
    if out.len() > max {
        return Err(format!(
            "the body inflates to more than {max} bytes; send smaller batches or raise --max-otlp-body"
        ));
    }
    Ok(Bytes::from(out))
}

/// The request message, or (counted as invalid) why the body is not one.
fn decode_body<T: Message + Default>(ingest: &Ingest, body: Bytes) -> Result<T, String> {
    T::decode(body).map_err(|e| {
        ingest.count_invalid();
        let name = std::any::type_name::<T>().rsplit("::").next().unwrap_or("");
        format!("the body is not an OTLP {name}: {e}")
    })
}

async fn ingest_metrics(
    ing: &Ingest,
    msg: &ExportMetricsServiceRequest,
) -> Result<ExportMetricsServiceResponse, Refusal> {
    let (rejected, error) = ingest(ing, decode::metrics(msg), "data points").await?;
    Ok(ExportMetricsServiceResponse {
        partial_success: (rejected > 0).then_some(ExportMetricsPartialSuccess {
            rejected_data_points: rejected as i64,
            error_message: error,
        }),
    })
}

async fn ingest_logs(
    ing: &Ingest,
    msg: &ExportLogsServiceRequest,
) -> Result<ExportLogsServiceResponse, Refusal> {
    let (rejected, error) = ingest(ing, decode::logs(msg), "log records").await?;
    Ok(ExportLogsServiceResponse {
        partial_success: (rejected > 0).then_some(ExportLogsPartialSuccess {
            rejected_log_records: rejected as i64,
            error_message: error,
        }),
    })
}

/// tonic answers a message it cannot decode with INTERNAL and one over the size limit with
/// OUT_OF_RANGE, which OTLP senders retry forever (OUT_OF_RANGE is retryable by the OTLP spec,
/// and neither request can ever succeed): both become INVALID_ARGUMENT.
pub fn non_retryable_decode_errors<B>(mut resp: hyper::Response<B>) -> hyper::Response<B> {
    let h = resp.headers();
    let code = h.get("grpc-status").and_then(|v| v.to_str().ok());
    let message = h
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let decoding = message.contains("decode") || message.contains("too large");
    if decoding && matches!(code, Some("11") | Some("13")) {
        resp.headers_mut()
            .insert("grpc-status", hyper::header::HeaderValue::from_static("3"));
    }
    resp
}

/// The gRPC Metrics and Logs services over the ingest queue.
#[derive(Debug, Clone)]
pub struct GrpcReceiver {
    /// The queue.
    pub ingest: Arc<Ingest>,
    /// The bearer token every call must carry in `authorization`.
    pub token: Arc<str>,
}

/// The memory a gRPC call reserves before tonic decodes its message (whose size is not known
/// before): the largest message's worth, so the budget bounds how many are decoded at once.
#[derive(Debug, Clone)]
pub struct GrpcAdmission {
    /// The shared budget.
    pub budget: Arc<MemoryBudget>,
    /// The largest message in bytes.
    pub max_message: usize,
}

/// A reservation carried in a call's extensions until the call ends.
#[derive(Debug, Clone)]
struct Held(#[allow(dead_code)] Arc<causeway_ingest::Reservation>);

impl tonic::service::Interceptor for GrpcAdmission {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        match self
            .budget
            .try_reserve(self.max_message as u64 * DECODE_FACTOR)
        {
            Some(r) => {
                req.extensions_mut().insert(Held(Arc::new(r)));
                Ok(req)
            }
            None => Err(tonic::Status::unavailable(format!(
                "requests being decoded hold the collector's memory budget ({} MiB); retry with backoff",
                self.budget.limit() >> 20
            ))),
        }
    }
}

impl GrpcReceiver {
    fn check<T>(&self, req: &tonic::Request<T>) -> Result<(), tonic::Status> {
        let ok = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| super::http::token_ok(t.trim().as_bytes(), self.token.as_bytes()));
        if ok {
            Ok(())
        } else {
            self.ingest.count_unauthorized();
            tracing::info!("gRPC UNAUTHENTICATED: missing or wrong bearer token");
            Err(tonic::Status::unauthenticated(
                "missing or wrong bearer token in the authorization metadata",
            ))
        }
    }
}

fn grpc_status(r: Refusal) -> tonic::Status {
    match r {
        Refusal::Invalid(m) | Refusal::TooLarge(m) => tonic::Status::invalid_argument(m),
        // RESOURCE_EXHAUSTED is retryable for OTLP only with RetryInfo; UNAVAILABLE always is.
        Refusal::Busy(m) => tonic::Status::unavailable(m),
        Refusal::Unavailable(m) => tonic::Status::unavailable(m),
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.check(&request)?;
        ingest_metrics(&self.ingest, request.get_ref())
            .await
            .map(tonic::Response::new)
            .map_err(grpc_status)
    }
}

#[tonic::async_trait]
impl LogsService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.check(&request)?;
        ingest_logs(&self.ingest, request.get_ref())
            .await
            .map(tonic::Response::new)
            .map_err(grpc_status)
    }
}

/// The TLS of the OTLP/gRPC server: the same certificate, key and client CA as the HTTP
/// listener; None without a certificate and key.
pub fn grpc_tls(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
) -> anyhow::Result<Option<tonic::transport::ServerTlsConfig>> {
    use anyhow::Context as _;
    let (Some(cert), Some(key)) = (cert, key) else {
        return Ok(None);
    };
    let read =
        |p: &Path| std::fs::read(p).with_context(|| format!("{}: cannot read (PEM)", p.display()));
    let mut tls = tonic::transport::ServerTlsConfig::new().identity(
        tonic::transport::Identity::from_pem(read(cert)?, read(key)?),
    );
    if let Some(ca) = client_ca {
        tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    Ok(Some(tls))
}

/// Serves OTLP/gRPC (metrics and logs, gzip either way) on `addr` until the task is dropped:
/// each message admitted or refused by `admission` first, decode errors answered as not
/// retryable. `bound` is told the address once it listens.
pub async fn serve_grpc(
    addr: SocketAddr,
    receiver: GrpcReceiver,
    tls: Option<tonic::transport::ServerTlsConfig>,
    admission: GrpcAdmission,
    bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsServiceServer;
    use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::MetricsServiceServer;
    use tonic::codec::CompressionEncoding::Gzip;
    let max_body = admission.max_message;
    let incoming = tonic::transport::server::TcpIncoming::bind(addr)
        .map_err(|e| {
            anyhow::anyhow!(e).context(causeway_store::Hinted::new(
                format!("cannot listen on {addr}"),
                "choose another --grpc-listen address or port",
            ))
        })?
        .with_nodelay(Some(true));
    bound(incoming.local_addr()?);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .context("configuring TLS for OTLP/gRPC")?;
    }
    let metrics = tonic::service::interceptor::InterceptedService::new(
        MetricsServiceServer::new(receiver.clone())
            .max_decoding_message_size(max_body)
            .accept_compressed(Gzip)
            .send_compressed(Gzip),
        admission.clone(),
    );
    let logs = tonic::service::interceptor::InterceptedService::new(
        LogsServiceServer::new(receiver)
            .max_decoding_message_size(max_body)
            .accept_compressed(Gzip)
            .send_compressed(Gzip),
        admission,
    );
    builder
        .layer(tower::util::MapResponseLayer::new(
            non_retryable_decode_errors,
        ))
        .add_service(metrics)
        .add_service(logs)
        .serve_with_incoming(incoming)
        .await
        .context("serving OTLP/gRPC")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn every_gzip_member_is_inflated_up_to_the_limit() {
        // Exporters may send several members back to back (RFC 1952): all are the body.
        let mut body = gzip(b"first half, ");
        body.extend(gzip(b"second half"));
        assert_eq!(
            &gunzip(&body, 1024).unwrap()[..],
            b"first half, second half"
        );
        // Exactly the limit is taken; one byte more is refused with what to do.
        let zeros = gzip(&[0u8; 4096]);
        assert_eq!(gunzip(&zeros, 4096).unwrap().len(), 4096);
        let e = gunzip(&zeros, 4095).unwrap_err();
        assert!(
            e.starts_with("the body inflates to more than 4095 bytes"),
            "{e}"
        );
        assert!(e.contains("--max-otlp-body"), "{e}");
        let e = gunzip(b"not gzip at all", 1024).unwrap_err();
        assert!(e.starts_with("the body is not valid gzip"), "{e}");
        // A member cut short is damage, not a shorter body.
        let cut = &zeros[..zeros.len() - 4];
        assert!(gunzip(cut, 8192).is_err());
    }

    fn grpc_answer(status: &str, message: &str) -> hyper::Response<()> {
        let mut r = hyper::Response::new(());
        r.headers_mut()
            .insert("grpc-status", status.parse().unwrap());
        r.headers_mut()
            .insert("grpc-message", message.parse().unwrap());
        r
    }

    fn status_of(r: &hyper::Response<()>) -> &str {
        r.headers()["grpc-status"].to_str().unwrap()
    }

    #[test]
    fn messages_that_can_never_be_decoded_are_not_retried() {
        // tonic's INTERNAL for an undecodable message, OUT_OF_RANGE for an oversized one.
        let r = non_retryable_decode_errors(grpc_answer("13", "failed to decode Protobuf message"));
        assert_eq!(status_of(&r), "3");
        let r = non_retryable_decode_errors(grpc_answer(
            "11",
            "Error, decoded message length too large: found 9000000 bytes",
        ));
        assert_eq!(status_of(&r), "3");
        // Other failures keep their code: UNAVAILABLE stays retryable, an INTERNAL that is not
        // about decoding stays INTERNAL.
        let r = non_retryable_decode_errors(grpc_answer("14", "too large a queue to decode"));
        assert_eq!(status_of(&r), "14");
        let r = non_retryable_decode_errors(grpc_answer("13", "the store failed"));
        assert_eq!(status_of(&r), "13");
        let ok = non_retryable_decode_errors(hyper::Response::new(()));
        assert!(ok.headers().get("grpc-status").is_none());
    }

    #[tokio::test]
    async fn refusals_map_to_the_otlp_status_codes() {
        use http_body_util::BodyExt as _;
        // (the refusal, made afresh per use; its HTTP status; its gRPC code)
        type Case = (fn() -> Refusal, u16, tonic::Code);
        let cases: [Case; 4] = [
            (
                || Refusal::Invalid("bad".into()),
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                || Refusal::TooLarge("big".into()),
                413,
                tonic::Code::InvalidArgument,
            ),
            (
                || Refusal::Busy("busy".into()),
                503,
                tonic::Code::Unavailable,
            ),
            (
                || Refusal::Unavailable("closing".into()),
                503,
                tonic::Code::Unavailable,
            ),
        ];
        for (refusal, http, grpc) in cases {
            let what = format!("{:?}", refusal());
            let resp = refusal_response(refusal());
            assert_eq!(resp.status().as_u16(), http, "{what}");
            // Only the retryable answers ask to come back, and say when.
            assert_eq!(
                resp.headers().contains_key(hyper::header::RETRY_AFTER),
                http == 503,
                "{what}"
            );
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            let status = RpcStatus::decode(body).unwrap();
            assert_eq!(status.code, grpc as i32, "{what}");
            assert!(what.contains(&status.message), "{what}: {}", status.message);
            assert_eq!(grpc_status(refusal()).code(), grpc, "{what}");
        }
    }
}
