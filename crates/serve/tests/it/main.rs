//! causeway-serve's own integration tests: a real server started in-process on 127.0.0.1:0
//! over a real store (a demo scenario written by the store's writer, or a cluster store fed
//! through the OTLP routes), spoken to in plain HTTP/1.1 so that every byte on the wire is the
//! server's.

mod common;

mod api;
mod limits;
mod otlp;
mod page;
