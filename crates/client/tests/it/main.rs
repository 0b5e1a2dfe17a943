//! causeway-client's own integration tests, against nodes and receivers started in the test
//! process on 127.0.0.1:0: plain or TLS HTTP/1.1 nodes that answer as the test says (and
//! record what they were sent), and a tonic OTLP/gRPC receiver.

mod common;

mod fleet;
mod otlp_push;
mod token;
