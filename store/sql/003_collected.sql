-- causeway trace store, schema version 3: what `causeway collect` received over OTLP that has no
-- dedicated table. causeway's own metrics and chains are mapped back into nodes, processes,
-- op_counts, op_histograms, drops and chains (docs/collect.md); every other data point and log
-- record (third-party OTLP, causeway.offcpu.time, ...) is kept here, one row each.
-- Applied on top of 001 and 002 to every new file (schema.rs MIGRATIONS).

-- One row per received metric data point (gauge, sum, histogram, exponential histogram, summary).
CREATE TABLE metric_points (
    node          VARCHAR NOT NULL,  -- causeway.node, else host.name, else service.name of the resource
    resource      VARCHAR NOT NULL,  -- resource attributes, JSON object
    scope         VARCHAR NOT NULL DEFAULT '',
    metric        VARCHAR NOT NULL,
    unit          VARCHAR NOT NULL DEFAULT '',
    kind          VARCHAR NOT NULL,  -- gauge, sum, histogram, exponential_histogram, summary
    monotonic     BOOLEAN,           -- sums only
    temporality   VARCHAR NOT NULL DEFAULT '',  -- cumulative, delta ('' for gauges)
    attributes    VARCHAR NOT NULL,  -- data point attributes, JSON object
    start_ns      BIGINT NOT NULL,
    time_ns       BIGINT NOT NULL,
    value         DOUBLE,            -- gauge and sum points
    count         UBIGINT,           -- histogram and summary points
    sum           DOUBLE,
    min           DOUBLE,
    max           DOUBLE,
    bucket_counts UBIGINT[],         -- histogram points (exponential: positive buckets)
    bounds        DOUBLE[],          -- explicit bounds (histogram) or quantiles (summary: q -> value in bucket_values)
    bucket_values DOUBLE[],          -- summary quantile values
    received_ns   BIGINT NOT NULL
);

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
