-- causeway trace store, schema version 3: what `causeway collect` received over OTLP that has no
-- dedicated table. causeway's own metrics and chains are mapped back into nodes, processes,
-- op_counts, op_histograms, drops and chains (docs/collect.md); every other data point and log
-- record (third-party OTLP, causeway.offcpu.time, ...) is kept here, one row each.
-- Applied on top of 001 and 002 to every new file (schema.rs MIGRATIONS).

-- Senders' resources and metric descriptions, interned: the point rows carry their ids (strings
-- per row were most of the append cost, as for events). Read the points through `metric_points`.
CREATE TABLE otlp_resources (
    resource_id UINTEGER PRIMARY KEY,
    node        VARCHAR NOT NULL,  -- causeway.node, else host.name, else service.name of the resource
    attributes  VARCHAR NOT NULL   -- resource attributes, JSON object
);

CREATE TABLE otlp_metrics (
    metric_id   UINTEGER PRIMARY KEY,
    scope       VARCHAR NOT NULL,
    metric      VARCHAR NOT NULL,
    unit        VARCHAR NOT NULL,
    kind        VARCHAR NOT NULL,  -- gauge, sum, histogram, exponential_histogram, summary
    monotonic   BOOLEAN,           -- sums only
    temporality VARCHAR NOT NULL   -- cumulative, delta ('' for gauges)
);

-- One row per received metric data point (gauge, sum, histogram, exponential histogram, summary).
CREATE TABLE metric_rows (
    resource_id   UINTEGER NOT NULL,
    metric_id     UINTEGER NOT NULL,
    attributes    VARCHAR NOT NULL,  -- data point attributes, JSON object
    start_ns      BIGINT NOT NULL,
    time_ns       BIGINT NOT NULL,
    value         DOUBLE,            -- gauge and sum points
    count         UBIGINT,           -- histogram and summary points
    sum           DOUBLE,
    min           DOUBLE,
    max           DOUBLE,
    bucket_counts UBIGINT[],         -- histogram points (exponential: positive buckets)
    bounds        DOUBLE[],          -- explicit bounds (histogram) or quantiles (summary)
    bucket_values DOUBLE[],          -- summary quantile values
    received_ns   BIGINT NOT NULL
);

CREATE VIEW metric_points AS
SELECT r.node, r.attributes AS resource, m.scope, m.metric, m.unit, m.kind, m.monotonic,
       m.temporality, p.attributes, p.start_ns, p.time_ns, p.value, p.count, p.sum, p.min, p.max,
       p.bucket_counts, p.bounds, p.bucket_values, p.received_ns
FROM metric_rows p
JOIN otlp_resources r ON r.resource_id = p.resource_id
JOIN otlp_metrics m ON m.metric_id = p.metric_id;

-- One row per received log record that is not a causeway chain (those go to `chains`).
CREATE TABLE log_records (
    node            VARCHAR NOT NULL,
    resource        VARCHAR NOT NULL,  -- resource attributes, JSON object
    scope           VARCHAR NOT NULL DEFAULT '',
    time_ns         BIGINT NOT NULL,
    observed_ns     BIGINT NOT NULL,
    severity_number INTEGER NOT NULL,
    severity_text   VARCHAR NOT NULL DEFAULT '',
    event_name      VARCHAR NOT NULL DEFAULT '',
    body            VARCHAR NOT NULL DEFAULT '',  -- strings as is, other values as JSON
    attributes      VARCHAR NOT NULL,  -- JSON object
    trace_id        VARCHAR NOT NULL DEFAULT '',  -- hex
    span_id         VARCHAR NOT NULL DEFAULT '',  -- hex
    received_ns     BIGINT NOT NULL
);
