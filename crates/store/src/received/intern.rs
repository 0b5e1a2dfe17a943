//! Interning of the senders' resources and metric descriptions (`otlp_resources`,
//! `otlp_metrics`) and the Arrow batch of `metric_rows` that carries their ids.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use duckdb::arrow::array::{
    ArrayRef, Float64Array, Float64Builder, Int64Array, ListBuilder, StringArray, UInt32Array,
    UInt64Array, UInt64Builder,
};
use duckdb::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::{Connection, params};

use super::MetricPoint;
use crate::error::{DuckContext, Result, StoreError};

fn metric_rows_schema() -> SchemaRef {
    let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
    Arc::new(Schema::new(vec![
        Field::new("resource_id", DataType::UInt32, false),
        Field::new("metric_id", DataType::UInt32, false),
        Field::new("attributes", DataType::Utf8, false),
        Field::new("start_ns", DataType::Int64, false),
        Field::new("time_ns", DataType::Int64, false),
        Field::new("value", DataType::Float64, true),
        Field::new("count", DataType::UInt64, true),
        Field::new("sum", DataType::Float64, true),
        Field::new("min", DataType::Float64, true),
        Field::new("max", DataType::Float64, true),
        Field::new("bucket_counts", list(DataType::UInt64), true),
        Field::new("bounds", list(DataType::Float64), true),
        Field::new("bucket_values", list(DataType::Float64), true),
        Field::new("received_ns", DataType::Int64, false),
    ]))
}

/// The Arrow batch of `metric_rows` for `points`, whose interned ids are in `ids`.
pub(super) fn points_batch(
    points: &[&MetricPoint],
    ids: &[(u32, u32)],
    received_ns: i64,
) -> Result<RecordBatch> {
    let mut counts = ListBuilder::new(UInt64Builder::new());
    let mut bounds = ListBuilder::new(Float64Builder::new());
    let mut values = ListBuilder::new(Float64Builder::new());
    for p in points {
        match &p.bucket_counts {
            Some(b) => {
                counts.values().append_slice(b);
                counts.append(true);
            }
            None => counts.append(false),
        }
        match &p.bounds {
            Some(b) => {
                bounds.values().append_slice(b);
                bounds.append(true);
            }
            None => bounds.append(false),
        }
        match &p.bucket_values {
            Some(b) => {
                values.values().append_slice(b);
                values.append(true);
            }
            None => values.append(false),
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(ids.iter().map(|i| i.0))),
        Arc::new(UInt32Array::from_iter_values(ids.iter().map(|i| i.1))),
        Arc::new(StringArray::from_iter_values(
            points.iter().map(|p| p.attributes.as_str()),
        )),
        Arc::new(Int64Array::from_iter_values(
            points.iter().map(|p| p.start_ns),
        )),
        Arc::new(Int64Array::from_iter_values(
            points.iter().map(|p| p.time_ns),
        )),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.value))),
        Arc::new(UInt64Array::from_iter(points.iter().map(|p| p.count))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.sum))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.min))),
        Arc::new(Float64Array::from_iter(points.iter().map(|p| p.max))),
        Arc::new(counts.finish()),
        Arc::new(bounds.finish()),
        Arc::new(values.finish()),
        Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(
            received_ns,
            points.len(),
        ))),
    ];
    RecordBatch::try_new(metric_rows_schema(), columns).map_err(|e| StoreError::Query {
        message: format!("building the metric_rows batch: {e}"),
        hint: "this is a bug in causeway; please report it".into(),
    })
}

/// What identifies a metric description in `otlp_metrics`.
type MetricKey = (
    Arc<str>,
    Arc<str>,
    Arc<str>,
    &'static str,
    Option<bool>,
    &'static str,
);

fn metric_key(p: &MetricPoint) -> MetricKey {
    (
        p.scope.clone(),
        p.metric.clone(),
        p.unit.clone(),
        p.kind,
        p.monotonic,
        p.temporality,
    )
}

fn static_kind(k: &str) -> &'static str {
    [
        "gauge",
        "sum",
        "histogram",
        "exponential_histogram",
        "summary",
        "delta",
        "cumulative",
    ]
    .into_iter()
    .find(|x| *x == k)
    .unwrap_or("")
}

/// Interned resources and metric descriptions of the file.
#[derive(Debug, Default)]
pub(super) struct Interned {
    resources: HashMap<(String, Arc<str>), u32>,
    metrics: HashMap<MetricKey, u32>,
}

impl Interned {
    pub(super) fn load(conn: &Connection, path: &Path) -> Result<Interned> {
        let mut i = Interned::default();
        let mut st = conn
            .prepare("SELECT resource_id, node, attributes FROM otlp_resources")
            .ctx(path, "reading interned resources")?;
        let rows = st
            .query_map([], crate::row::<(u32, String, String)>)
            .and_then(|rows| rows.collect::<duckdb::Result<Vec<_>>>())
            .ctx(path, "reading interned resources")?;
        for (id, node, attrs) in rows {
            i.resources.insert((node, Arc::from(attrs)), id);
        }
        let mut st = conn
            .prepare("SELECT metric_id, scope, metric, unit, kind, monotonic, temporality FROM otlp_metrics")
            .ctx(path, "reading interned metrics")?;
        let rows = st
            .query_map(
                [],
                crate::row::<(u32, String, String, String, String, Option<bool>, String)>,
            )
            .and_then(|rows| rows.collect::<duckdb::Result<Vec<_>>>())
            .ctx(path, "reading interned metrics")?;
        for (id, scope, metric, unit, kind, mono, temp) in rows {
            i.metrics.insert(
                (
                    Arc::from(scope),
                    Arc::from(metric),
                    Arc::from(unit),
                    static_kind(&kind),
                    mono,
                    static_kind(&temp),
                ),
                id,
            );
        }
        Ok(i)
    }

    /// Ids for every point; new resources and metrics are appended in the caller's transaction.
    pub(super) fn ids(
        &mut self,
        conn: &Connection,
        path: &Path,
        points: &[&MetricPoint],
    ) -> Result<Vec<(u32, u32)>> {
        let mut out = Vec::with_capacity(points.len());
        let mut new_res: Vec<(u32, String, Arc<str>)> = Vec::new();
        let mut new_met: Vec<(u32, MetricKey)> = Vec::new();
        let mut last: Option<(&MetricPoint, (u32, u32))> = None;
        for p in points {
            // Points of one metric come together: reuse the previous point's ids.
            if let Some((q, ids)) = last
                && Arc::ptr_eq(&q.resource, &p.resource)
                && q.node == p.node
                && Arc::ptr_eq(&q.metric, &p.metric)
                && Arc::ptr_eq(&q.scope, &p.scope)
                && Arc::ptr_eq(&q.unit, &p.unit)
                && q.kind == p.kind
                && q.monotonic == p.monotonic
                && q.temporality == p.temporality
            {
                out.push(ids);
                continue;
            }
            let rkey = (p.node.clone(), p.resource.clone());
            let next_r = self.resources.len() as u32 + 1;
            let rid = *self.resources.entry(rkey).or_insert_with(|| {
                new_res.push((next_r, p.node.clone(), p.resource.clone()));
                next_r
            });
            let mkey = metric_key(p);
            let next_m = self.metrics.len() as u32 + 1;
            let mid = *self.metrics.entry(mkey.clone()).or_insert_with(|| {
                new_met.push((next_m, mkey));
                next_m
            });
            out.push((rid, mid));
            last = Some((p, (rid, mid)));
        }
        if !new_res.is_empty() {
            let mut app = conn
                .appender("otlp_resources")
                .ctx(path, "opening the otlp_resources appender")?;
            for (id, node, attrs) in &new_res {
                app.append_row(params![id, node, &**attrs])
                    .ctx(path, "recording a resource")?;
            }
            app.flush().ctx(path, "flushing resources")?;
        }
        if !new_met.is_empty() {
            let mut app = conn
                .appender("otlp_metrics")
                .ctx(path, "opening the otlp_metrics appender")?;
            for (id, (scope, metric, unit, kind, mono, temp)) in &new_met {
                app.append_row(params![id, &**scope, &**metric, &**unit, kind, mono, temp])
                    .ctx(path, "recording a metric")?;
            }
            app.flush().ctx(path, "flushing metrics")?;
        }
        Ok(out)
    }
}
