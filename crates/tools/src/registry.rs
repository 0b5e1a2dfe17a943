//! The registry: every tool's name, description, annotations, input and output schemas (from
//! schemars), argument validation against the input schema (jsonschema) before any handler
//! runs, and dispatch to the handler with a structured result plus a compact text rendering.

use std::sync::OnceLock;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::Context;
use crate::demo::DemoParams;
use crate::error::ToolError;
use crate::params::{
    ChainsParams, DescribeParams, DiffParams, ListTracesParams, NoParams, SqlParams, StacksParams,
    StatsParams, StepsParams,
};
use crate::print::Audience;
use crate::{
    budget, check, demo, diff, fleet, print, report, results, sql, stacks, stats, steps, traces,
};

/// Behaviour hints sent with a tool (MCP `annotations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Annotations {
    /// Never changes anything.
    pub read_only: bool,
    /// Calling again with the same arguments has no further effect.
    pub idempotent: bool,
    /// Reaches outside this machine's trace files.
    pub open_world: bool,
}

const READ_ONLY: Annotations = Annotations {
    read_only: true,
    idempotent: true,
    open_world: false,
};

/// `query_fleet` reads other machines: open world, and not idempotent (their traces grow).
const FLEET: Annotations = Annotations {
    read_only: true,
    idempotent: false,
    open_world: true,
};

/// One tool as agents see it.
#[derive(Debug)]
pub struct ToolSpec {
    /// Name used in `tools/call`.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// What it does, for the agent choosing a tool.
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// JSON Schema of the structured result.
    pub output_schema: Value,
    /// Hints.
    pub annotations: Annotations,
    /// Other names an argument is accepted under (`alias -> field`): the reference tool's
    /// spellings, so prompts and agent configs written for it work unchanged. Not in the schema
    /// (tools/list has a token budget); applied before validation.
    pub aliases: &'static [(&'static str, &'static str)],
    validator: jsonschema::Validator,
    run: Run,
}

/// A tool's handler and renderer, behind one signature: validated arguments in, result out.
type Run = fn(&Context, Value, Audience) -> Result<ToolOutput, ToolError>;

/// Parses the arguments, runs the handler and renders its result for the agent.
fn invoke<P: DeserializeOwned, R: Serialize>(
    ctx: &Context,
    args: Value,
    aud: Audience,
    handler: fn(&Context, &P) -> Result<R, ToolError>,
    render: fn(&R, Audience) -> String,
) -> Result<ToolOutput, ToolError> {
    let r = handler(ctx, &parse(args)?)?;
    out(&r, render(&r, aud))
}

/// A successful call: the structured result (matches the output schema) and its text form.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// `structuredContent`.
    pub structured: Value,
    /// Compact text for the model.
    pub text: String,
}

/// A schema without `$schema`/`title` noise and with subschemas inlined (fewer tokens, and
/// clients that do not resolve `$ref` still see every field).
pub fn schema_of<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true);
    let mut v = serde_json::to_value(settings.into_generator().into_root_schema_for::<T>())
        .unwrap_or_else(|_| serde_json::json!({"type": "object"}));
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    v
}

/// Output schemas keep structure and types only: field meanings are in the input schemas,
/// the descriptions and the schema resource, and tools/list has a 3,000-token budget. Fields
/// are not marked required (results always carry them; the list is long and says nothing new).
fn compact(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for k in ["description", "format", "minimum", "required"] {
                o.remove(k);
            }
            // Under "properties" the keys are field names (a field may be called "description").
            if let Some(Value::Object(props)) = o.get_mut("properties") {
                props.values_mut().for_each(compact);
            }
            // `"items": true` allows anything, as no "items" does; so does additionalProperties.
            for k in ["items", "additionalProperties"] {
                if o.get(k) == Some(&Value::Bool(true)) {
                    o.remove(k);
                }
            }
            for (k, x) in o.iter_mut() {
                if k != "properties" {
                    compact(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(compact),
        _ => {}
    }
}

/// Output schemas type each top-level field and stop there: what lies inside a list or an
/// object is in the tool's docs (docs/mcp.md) and the results themselves. Every tool's full
/// nested shape cost more than the whole tools/list budget allows once there were eleven tools.
fn top_level_only(v: &mut Value) {
    if let Some(Value::Object(props)) = v.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(o) = p {
                for k in [
                    "properties",
                    "items",
                    "additionalProperties",
                    "maxItems",
                    "minItems",
                ] {
                    o.remove(k);
                }
            }
        }
    }
}

/// A nested object schema is recognisable by its "properties": its `"type": "object"` is left
/// out of output schemas (the root keeps it, as MCP requires).
fn untype_nested_objects(v: &mut Value, root: bool) {
    match v {
        Value::Object(o) => {
            if !root
                && o.contains_key("properties")
                && o.get("type") == Some(&Value::String("object".into()))
            {
                o.remove("type");
            }
            if let Some(Value::Object(props)) = o.get_mut("properties") {
                props
                    .values_mut()
                    .for_each(|p| untype_nested_objects(p, false));
            }
            for (k, x) in o.iter_mut() {
                if k != "properties" {
                    untype_nested_objects(x, false);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| untype_nested_objects(x, false)),
        _ => {}
    }
}

fn spec<P: JsonSchema, R: JsonSchema>(
    name: &'static str,
    title: &'static str,
    description: &'static str,
    run: Run,
) -> ToolSpec {
    let mut input_schema = schema_of::<P>();
    if let Some(o) = input_schema.as_object_mut() {
        o.remove("description");
        for p in o
            .get_mut("properties")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flatten()
        {
            if let Some(p) = p.1.as_object_mut() {
                p.remove("format");
                // An optional field is simply left out; `call` drops null arguments before
                // validating, so `["string", "null"]` says nothing more than `"string"`.
                if let Some(Value::Array(types)) = p.get("type")
                    && let [t, Value::String(n)] = types.as_slice()
                    && n == "null"
                {
                    let t = t.clone();
                    p.insert("type".into(), t);
                }
                // Unsigned ids: the type check already refuses negatives.
                if p.get("minimum") == Some(&Value::from(0)) {
                    p.remove("minimum");
                }
            }
        }
    }
    let validator = jsonschema::validator_for(&input_schema)
        .unwrap_or_else(|e| panic!("input schema of {name} does not compile: {e}"));
    ToolSpec {
        name,
        title,
        description,
        input_schema,
        output_schema: {
            let mut o = schema_of::<R>();
            compact(&mut o);
            untype_nested_objects(&mut o, true);
            top_level_only(&mut o);
            o
        },
        annotations: READ_ONLY,
        aliases: &[],
        validator,
        run,
    }
}

/// Pairs of (field, alias).
type Aliases = Vec<(&'static str, &'static str)>;

/// The reference tool's names for a window's process and for "how many".
const WINDOW_ALIASES: &[(&str, &str)] = &[("pids", "pid"), ("top_n", "limit")];

/// Every tool, in the order `tools/list` shows them.
pub fn tool_specs() -> &'static [ToolSpec] {
    static SPECS: OnceLock<Vec<ToolSpec>> = OnceLock::new();
    SPECS.get_or_init(|| {
        vec![
            ToolSpec {
                aliases: &[("pids", "pid")],
                ..spec::<StatsParams, results::TraceStatsOut>(
                    "get_trace_stats",
                    "Trace statistics",
                    "Start here. Per-op counts, exact p50/p95/p99/max (ns), off-CPU time, drops. Windows: since 5m, or from/until as ns, RFC 3339, +30s (after start), -5m (before end).",
                    |c, a, w| invoke(c, a, w, stats::get_trace_stats, print::stats),
                )
            },
            ToolSpec {
                aliases: WINDOW_ALIASES,
                ..spec::<ChainsParams, results::ChainsOut>(
                    "get_causal_chains",
                    "Causal chains",
                    "Ranked findings (cause -> effect, severity, timeline, fixes, evidence SQL), budgets, GPU idle.",
                    |c, a, w| invoke(c, a, w, stats::get_causal_chains, print::chains),
                )
            },
            ToolSpec {
                aliases: WINDOW_ALIASES,
                ..spec::<StacksParams, stacks::StacksResult>(
                    "get_stacks",
                    "Top call stacks",
                    "Costliest call stacks for an op, pid and window, frames resolved.",
                    |c, a, w| invoke(c, a, w, stacks::get_stacks, print::stacks),
                )
            },
            ToolSpec {
                aliases: &[("pids", "pid")],
                ..spec::<StepsParams, results::StepsOut>(
                    "get_steps",
                    "Training steps",
                    "Step times (p50/p90/p99/max), where each step's time went, slowest steps with their finding, every-Nth slow steps.",
                    |c, a, w| invoke(c, a, w, steps::get_steps, print::steps),
                )
            },
            spec::<DiffParams, results::DiffOut>(
                "compare_traces",
                "Compare two runs",
                "Why one run's step is slower than another's: the step-time difference by budget bucket, the ops that changed, noise.",
                |c, a, w| invoke(c, a, w, diff::compare_traces, print::diff),
            ),
            ToolSpec {
                aliases: &[("query", "sql"), ("top_n", "limit")],
                ..spec::<SqlParams, sql::SqlOut>(
                    "run_sql",
                    "Read-only SQL",
                    "One read-only DuckDB query over the trace (guarded, capped). Tables, units, op meanings: resource causeway://schema.",
                    |c, a, w| invoke(c, a, w, sql::run_sql, print::sql),
                )
            },
            spec::<DescribeParams, traces::TraceDescription>(
                "describe_trace",
                "Describe a trace",
                "One trace: span, nodes, busiest processes, events per source, drops, chains, stacks.",
                |c, a, w| invoke(c, a, w, traces::describe_trace, print::describe),
            ),
            spec::<ListTracesParams, traces::TracesResult>(
                "list_traces",
                "List traces",
                "Traces this server can open; pass a name as `trace` to other tools.",
                |c, a, w| invoke(c, a, w, traces::list_traces, print::traces),
            ),
            spec::<NoParams, check::CheckReport>(
                "get_check",
                "Tracing readiness",
                "Can this machine trace GPU work? Kernel, BTF, privileges, driver, CUDA/NCCL libraries; fixes.",
                |c, a, w| invoke(c, a, w, |c, _: &NoParams| check::get_check(c), print::check),
            ),
            spec::<DemoParams, results::DemoOut>(
                "run_demo",
                "Run a demo scenario",
                "Synthetic scenario trace (no GPU) showing what each finding looks like.",
                |c, a, w| invoke(c, a, w, |_, p| demo::run_demo(p), print::demo),
            ),
            spec::<NoParams, report::TestReportResult>(
                "get_test_report",
                "Self-test report",
                "Latest `causeway selftest` report of this installation, if any.",
                |c, a, w| invoke(c, a, w, |c, _: &NoParams| report::get_test_report(c), print::test_report),
            ),
            ToolSpec {
                annotations: FLEET,
                aliases: &[("query", "sql"), ("top_n", "limit")],
                ..spec::<fleet::FleetParams, fleet::FleetOut>(
                    "query_fleet",
                    "Ask every node",
                    "Ask every serving node at once: sql, stats (outlier nodes), chains (ranked together), overview; rows gain a node column.",
                    |c, a, w| invoke(c, a, w, fleet::query_fleet, print::fleet),
                )
            },
        ]
    })
}

/// The tools a server with context `ctx` lists: `query_fleet` only when a fleet is configured
/// (it would only fail otherwise, and tools/list has a token budget).
pub fn listed(ctx: &Context) -> impl Iterator<Item = &'static ToolSpec> + '_ {
    tool_specs()
        .iter()
        .filter(move |s| s.name != "query_fleet" || ctx.fleet().is_some())
}

/// The spec of one tool.
pub fn find(name: &str) -> Result<&'static ToolSpec, ToolError> {
    tool_specs()
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| ToolError::UnknownTool(causeway_store::sanitize::sanitize_with(name, 80)))
}

/// Checks arguments against a tool's input schema; the error names the field and the rule.
pub fn validate(spec: &ToolSpec, args: &Value) -> Result<(), ToolError> {
    let Some(e) = spec.validator.iter_errors(args).next() else {
        return Ok(());
    };
    let field = e.instance_path().as_str().to_string();
    Err(ToolError::InvalidArgument {
        field: if field.is_empty() {
            "(arguments)".into()
        } else {
            field
        },
        rule: causeway_store::sanitize::sanitize_with(&e.to_string(), 300),
        hint: format!(
            "fix the argument and call {} again; its input schema in tools/list lists every field",
            spec.name
        ),
    })
}

fn parse<P: DeserializeOwned>(args: Value) -> Result<P, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::InvalidArgument {
        field: "(arguments)".into(),
        rule: e.to_string(),
        hint: "send arguments that match the tool's input schema".into(),
    })
}

/// The one way out of a tool: structured and text results pass the sanitiser's final pass, so a
/// traced string that some handler forgot to clean still cannot reach an agent.
fn out<R: Serialize>(r: &R, text: String) -> Result<ToolOutput, ToolError> {
    let mut structured = serde_json::to_value(r).map_err(|e| {
        ToolError::failed(
            format!("result not serialisable: {e}"),
            "report this as a bug",
        )
    })?;
    causeway_store::sanitize::sanitize_json(&mut structured);
    // Structured content and text share one response budget.
    let share = budget::text_share(structured.to_string().len());
    Ok(ToolOutput {
        structured,
        text: budget::cap_text_to(causeway_store::sanitize::sanitize_text(&text), share),
    })
}

/// Validates `args` (absent = `{}`) and runs the tool. Errors are sanitised like results (they
/// quote SQL, names and DuckDB's messages).
pub fn call(ctx: &Context, name: &str, args: Value) -> Result<ToolOutput, ToolError> {
    call_for(ctx, name, args, Audience::Agent)
}

/// [`call`] with the text rendered for `aud` (the CLI's twins of a tool pass `Person`).
pub fn call_for(
    ctx: &Context,
    name: &str,
    args: Value,
    aud: Audience,
) -> Result<ToolOutput, ToolError> {
    call_unsanitised_errors(ctx, name, args, aud).map_err(ToolError::sanitised)
}

/// [`call`], stopped (its queries interrupted) when `control` is cancelled: the servers
/// cancel it when the client disconnects or cancels the request.
pub fn call_controlled(
    ctx: &Context,
    name: &str,
    args: Value,
    control: std::sync::Arc<causeway_store::QueryControl>,
) -> Result<ToolOutput, ToolError> {
    crate::context::with_control(control, || call(ctx, name, args))
}

fn call_unsanitised_errors(
    ctx: &Context,
    name: &str,
    args: Value,
    aud: Audience,
) -> Result<ToolOutput, ToolError> {
    let spec = find(name)?;
    let args = match args {
        Value::Null => Value::Object(Default::default()),
        // null means "not given" for every optional argument (their schemas omit "null").
        Value::Object(mut o) => {
            o.retain(|_, v| !v.is_null());
            Value::Object(o)
        }
        other => other,
    };
    let (args, renamed) = apply_aliases(spec, args)?;
    // An error names the argument as the caller spelled it.
    validate(spec, &args).map_err(|e| match e {
        ToolError::InvalidArgument { field, rule, hint } => {
            let field = renamed
                .iter()
                .find(|(f, _)| field.strip_prefix('/') == Some(f))
                .map_or(field, |(_, alias)| format!("/{alias}"));
            ToolError::InvalidArgument { field, rule, hint }
        }
        other => other,
    })?;
    (spec.run)(ctx, args, aud)
}

/// Renames arguments given under an alias to the field's own name. `pids` (the reference tool
/// takes a list) is accepted with one pid: causeway's filters take one process.
fn apply_aliases(spec: &ToolSpec, args: Value) -> Result<(Value, Aliases), ToolError> {
    let mut renamed = Vec::new();
    let Value::Object(mut o) = args else {
        return Ok((args, renamed));
    };
    for &(alias, field) in spec.aliases {
        let Some(mut v) = o.remove(alias) else {
            continue;
        };
        if o.contains_key(field) {
            return Err(ToolError::InvalidArgument {
                field: format!("/{alias}"),
                rule: format!("{alias} is another name for {field}, and both were given"),
                hint: format!("pass only {field}"),
            });
        }
        if alias == "pids" {
            v = match v {
                Value::Array(mut a) if a.len() == 1 => a.remove(0),
                Value::Array(a) if a.len() > 1 => {
                    return Err(ToolError::InvalidArgument {
                        field: "/pids".into(),
                        rule: format!("{} pids given; this tool filters one process", a.len()),
                        hint: format!(
                            "call {} once per pid, or run_sql with WHERE pid IN (...)",
                            spec.name
                        ),
                    });
                }
                Value::Array(_) => continue,
                other => other,
            };
        }
        o.insert(field.to_string(), v);
        renamed.push((field, alias));
    }
    Ok((Value::Object(o), renamed))
}
