//! Integration tests of the tool registry against the imported vLLM reference trace and small
//! stores built with the real writer: schemas, validation, budgets, results and sanitising, and
//! the printer's renderings for people and agents.

mod fixture;
mod placement;
mod registry;
mod report;
mod results;
mod text;
