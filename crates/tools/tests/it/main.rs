//! Integration tests of the tool registry against the imported vLLM reference trace and small
//! stores built with the real writer: schemas, validation, budgets, results and sanitising.

mod fixture;
mod registry;
mod results;
mod text;
