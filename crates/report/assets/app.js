// causeway report page: renders the JSON data block (crates/report/src/data.rs) with DOM calls and
// uPlot, never innerHTML (trace strings are data); on the live page, polls for fresh data.
// Every chart carries data-* attributes with what it plots, for people and for the tests.
(function () {
  "use strict";

  var charts = [];
  var updates = 0;

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      for (var k in attrs) {
        if (k === "text") e.textContent = attrs[k];
        else if (k === "cls") e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      }
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function dur(ns) {
    var a = Math.abs(ns);
    if (a >= 60e9) return (ns / 60e9).toFixed(1) + " min";
    if (a >= 1e9) return (ns / 1e9).toFixed(2) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(2) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(1) + " \u00b5s";
    return Math.round(ns) + " ns";
  }

  function num(n) {
    return Number(n).toLocaleString("en-US");
  }

  function sum(a) {
    var s = 0;
    for (var i = 0; i < a.length; i++) s += a[i] || 0;
    return s;
  }

  function stamp(ns) {
    return new Date(ns / 1e6).toISOString().replace("T", " ").replace("Z", " UTC");
  }

  function table(caption, head, rows, numeric) {
    var t = el("table");
    if (caption) t.appendChild(el("caption", { text: caption }));
    var tr = el("tr");
    head.forEach(function (h, i) {
      tr.appendChild(el("th", { scope: "col", text: h, cls: numeric && numeric[i] ? "num" : "" }));
    });
    t.appendChild(el("thead", null, [tr]));
    var body = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (c, i) {
        var td = el("td", { cls: numeric && numeric[i] ? "num" : "" });
        if (c instanceof Node) td.appendChild(c);
        else td.textContent = c === null || c === undefined ? "" : String(c);
        row.appendChild(td);
      });
      body.appendChild(row);
    });
    t.appendChild(body);
    return t;
  }

  function section(id, title) {
    var s = el("section", { id: id, "aria-labelledby": id + "-h" });
    s.appendChild(el("h2", { id: id + "-h", text: title }));
    return s;
  }

  // ---- the verdict -------------------------------------------------------------------------
  function findings(d) {
    var s = section("findings", "Verdict: findings, worst first");
    if (!d.findings.length) {
      s.appendChild(el("p", { text: "No detector matched in this window: the time budgets below say where the time went." }));
    }
    var list = el("ol", { cls: "findings" });
    d.findings.forEach(function (c, i) {
      var ev = d.evidence[i] || { columns: [], rows: [] };
      var li = el("li", {
        cls: "finding sev-" + c.severity,
        "data-id": c.id,
        "data-detector": c.detector,
        "data-severity": c.severity,
        "data-time-lost-ns": String(c.time_lost_ns),
        "data-evidence-rows": String(ev.rows.length),
      });
      li.appendChild(el("p", null, [
        el("span", { cls: "badge sev-" + c.severity, text: c.severity }),
        el("span", { cls: "summary", text: "#" + (i + 1) + " " + c.summary }),
      ]));
      li.appendChild(el("p", null, [
        el("strong", { text: "Time lost: " }), dur(c.time_lost_ns),
        c.node ? " \u00b7 node " + c.node : "", " \u00b7 " + c.detector,
      ]));
      li.appendChild(el("p", null, [el("strong", { text: "Root cause: " }), c.root_cause]));
      if (d.costs && d.costs[i]) {
        li.appendChild(el("p", { cls: "cost" }, [el("strong", { text: "Cost: " }), d.costs[i]]));
      }
      if (d.per_steps && d.per_steps[i]) {
        li.appendChild(el("p", { cls: "cost" }, [el("strong", { text: "Per step: " }), d.per_steps[i]]));
      }
      if (c.recommendations.length) {
        li.appendChild(el("p", null, [el("strong", { text: "Fix:" })]));
        li.appendChild(el("ul", null, c.recommendations.map(function (r) { return el("li", { text: r }); })));
      }
      var more = el("details");
      more.appendChild(el("summary", { text: "Explanation, timeline and evidence" }));
      more.appendChild(el("p", { text: c.explanation }));
      if (c.timeline.length) {
        more.appendChild(table("From cause to effect", ["layer", "op", "what happened", "duration"],
          c.timeline.map(function (t) { return [t.layer, t.op, t.detail, dur(t.duration_ns)]; }), [0, 0, 0, 1]));
      }
      if (c.evidence_sql) more.appendChild(el("pre", { text: c.evidence_sql }));
      if (ev.error) more.appendChild(el("p", { cls: "muted", text: "evidence query failed: " + ev.error }));
      if (ev.rows.length) {
        more.appendChild(table("Evidence rows" + (ev.truncated ? " (first " + ev.rows.length + ")" : ""),
          ev.columns, ev.rows.map(function (r) { return r.map(function (v) { return v === null ? "" : String(v); }); })));
      }
      li.appendChild(more);
      list.appendChild(li);
    });
    s.appendChild(list);
    d.notes.forEach(function (n) { s.appendChild(el("p", { cls: "muted", text: n })); });
    return s;
  }

  // ---- time budgets --------------------------------------------------------------------------
  var PALETTE = {
    launch: "#1f6feb", copy_h2d: "#8250df", copy_d2h: "#a371f7", copy_d2d: "#6639ba", copy_other: "#c297ff",
    sync: "#cf222e", alloc: "#bf8700", free: "#d4a72c", collective: "#1a7f37", other: "#57606a",
    on_cpu: "#8fd19e", preempted: "#fa4549", blocked_net: "#54aeff", blocked_io: "#0969da",
    blocked_other: "#afb8c1", unknown: "#e1e4e8",
  };
  var OUTSIDE = [["on_cpu_ns", "on_cpu", "host work (on CPU)"], ["preempted_ns", "preempted", "preempted"],
    ["blocked_net_ns", "blocked_net", "blocked on sockets"], ["blocked_io_ns", "blocked_io", "blocked on block I/O"],
    ["blocked_other_ns", "blocked_other", "blocked otherwise"], ["unknown_ns", "unknown", "off CPU, state unknown"]];

  function segments(b) {
    var segs = b.inside.map(function (i) {
      var k = i.class || "other";
      return { key: k, label: "in " + k.replace("_", " ") + " calls", ns: i.on_cpu_ns + i.preempted_ns + i.blocked_ns + i.unknown_ns };
    });
    OUTSIDE.forEach(function (o) { segs.push({ key: o[1], label: o[2], ns: b.outside[o[0]] }); });
    return segs.filter(function (s) { return s.ns > 0; });
  }

  // GPU time measured on the device's own timeline (imported profiler traces), beside the
  // host-side estimate; absent when no device has a timeline.
  function devices(d) {
    var measured = (d.devices || []).filter(function (v) { return v.device !== null && v.device !== undefined; });
    if (!measured.length) return null;
    var s = section("devices", "GPU time, measured on the device's own timeline");
    measured.forEach(function (v) {
      var idle = Math.max(0, v.window_ns - v.busy_ns);
      var who = "device " + v.device + " of pid " + v.pid + (v.rank === undefined || v.rank === null ? "" : " (rank " + v.rank + ")");
      var est = v.estimate_known
        ? "host-side estimate " + v.gpu_idle_estimated_pct.toFixed(1) + "%"
        : "host-side estimate between " + v.gpu_idle_estimated_pct.toFixed(1) + "% and " + v.gpu_idle_estimated_max_pct.toFixed(1) + "% (the host cannot tell more)";
      var box = el("div", { cls: "device", "data-pid": String(v.pid), "data-device": String(v.device), "data-busy-ns": String(v.busy_ns), "data-idle-ns": String(idle) });
      box.appendChild(el("div", { cls: "label" }, [
        el("strong", { text: who }), " \u00b7 busy " + dur(v.busy_ns) + " of " + dur(v.window_ns) +
        " \u00b7 idle " + v.gpu_idle_measured_pct.toFixed(1) + "% measured \u00b7 " + est,
      ]));
      var rows = (v.idle || []).map(function (r) {
        var what = r.waiting_for === "host" ? "waiting for the host: " + r.reason + (r.detail ? " (" + r.detail + ")" : "") : r.reason;
        return el("tr", null, [el("td", { text: what }), el("td", { cls: "num", text: dur(r.ns) }), el("td", { cls: "num", text: String(r.gaps) })]);
      });
      if (rows.length) {
        box.appendChild(el("table", { cls: "idle-reasons" }, [
          el("thead", null, [el("tr", null, [el("th", { text: "idle, by reason" }), el("th", { text: "time" }), el("th", { text: "stretches" })])]),
          el("tbody", null, rows),
        ]));
      }
      s.appendChild(box);
    });
    return s;
  }

  // Training steps: step time over the run, and the slowest steps' budgets side by side (each
  // bar sums to its step's time); absent when the trace has no steps.
  var STEP_COLORS = {
    input: "#bf8700", sync: "#cf222e", collective: "#1a7f37", copy: "#8250df", alloc: "#d4a72c",
    launch: "#1f6feb", preempted: "#fa4549", blocked: "#afb8c1", host: "#8fd19e",
  };
  var STEP_BUCKETS = ["input", "sync", "collective", "copy", "alloc", "launch", "preempted", "blocked", "host"];

  function stepsSection(d) {
    var series = (d.steps && d.steps.series) || [];
    if (!series.length) return null;
    var s = section("steps", "Training steps: step time over the run, the slowest steps' budgets");
    series.forEach(function (v, k) {
      var box = el("div", {
        cls: "steps", "data-pid": String(v.pid), "data-tid": String(v.tid), "data-source": v.source,
        "data-count": String(v.count), "data-p50-ns": String(v.p50_ns), "data-max-ns": String(v.max_ns),
      });
      box.appendChild(el("div", { cls: "label" }, [
        el("strong", { text: v.comm + " (pid " + v.pid + ", tid " + v.tid + (v.rank === undefined || v.rank === null ? "" : ", rank " + v.rank) + ")" }),
        " \u00b7 " + v.count + " " + v.source + " steps \u00b7 p50 " + dur(v.p50_ns) + " \u00b7 p90 " + dur(v.p90_ns) +
        " \u00b7 max " + dur(v.max_ns) + " \u00b7 noise " + dur(v.noise_ns) +
        (v.periodic ? " \u00b7 every " + v.periodic.every + "th step slow: " + v.periodic.what : ""),
      ]));
      var chart = el("div", { cls: "chart", id: "steps-chart-" + k, role: "img", "aria-label": "Step time of each step" });
      box.appendChild(chart);
      s.appendChild(box);
      var xs = v.steps.map(function (x) { return x.step; });
      var ys = v.steps.map(function (x) { return x.duration_ns; });
      var series = [
        { label: "step" },
        { label: "step time", stroke: "#1f6feb", width: 1.5, points: { show: xs.length <= 200 }, value: function (u, x) { return x === null ? "" : dur(x); } },
      ];
      var data = [xs, ys];
      if (v.steps.length && v.steps[0].gpu_busy_ns !== undefined) {
        series.push({ label: "GPU busy", stroke: "#1a7f37", width: 1, value: function (u, x) { return x === null ? "" : dur(x); } });
        data.push(v.steps.map(function (x) { return x.gpu_busy_ns; }));
      }
      charts.push(new uPlot({
        width: width(s), height: 200, scales: { x: { time: false } }, series: series,
        axes: [{ label: "step" }, { label: "time", values: function (u, vals) { return vals.map(dur); } }],
      }, data, chart));
      var slow = el("div", { cls: "slowest" });
      v.slowest.forEach(function (x) {
        var one = el("div", { cls: "budget step", "data-step": String(x.step), "data-duration-ns": String(x.duration_ns) });
        one.appendChild(el("div", { cls: "label" }, [
          el("strong", { text: "step " + x.step }), " \u00b7 " + dur(x.duration_ns) +
          (x.over_median_ns >= 0 ? " (" + dur(x.over_median_ns) + " over the median)" : "") +
          (x.finding ? " \u00b7 " + x.finding.detector + " " + x.finding.severity + ": " + x.finding.summary : ""),
        ]));
        var bar = el("div", { cls: "bar", role: "img", "aria-label": "step " + x.step + " budget" });
        STEP_BUCKETS.forEach(function (b) {
          var ns = x.budget[b + "_ns"];
          if (!ns) return;
          var seg = el("div", { cls: "seg", title: b + ": " + dur(ns), "data-key": b, "data-ns": String(ns) });
          seg.style.width = (x.duration_ns > 0 ? 100 * ns / x.duration_ns : 0) + "%";
          seg.style.background = STEP_COLORS[b];
          bar.appendChild(seg);
        });
        one.appendChild(bar);
        slow.appendChild(one);
      });
      box.appendChild(slow);
    });
    var legend = el("ul", { cls: "legend", "aria-label": "legend of step budgets" });
    STEP_BUCKETS.forEach(function (b) {
      var sw = el("span", { cls: "swatch" });
      sw.style.background = STEP_COLORS[b];
      legend.appendChild(el("li", null, [sw, b]));
    });
    s.appendChild(legend);
    return s;
  }

  function budgets(d) {
    var s = section("budgets", "Where the time went: budget of every GPU-feeding thread");
    if (!d.budgets.length) {
      s.appendChild(el("p", { text: "No thread made GPU calls in this window." }));
      return s;
    }
    var keys = {};
    d.budgets.forEach(function (b) {
      var segs = segments(b);
      segs.forEach(function (g) { keys[g.key] = g.label; });
      var who = (b.tid === undefined || b.tid === null ? "process " : "thread ") + b.comm + " (pid " + b.pid +
        (b.tid === undefined || b.tid === null ? "" : ", tid " + b.tid) + (b.node ? ", " + b.node : "") + ")";
      var total = sum(segs.map(function (g) { return g.ns; }));
      var box = el("div", {
        cls: "budget", "data-pid": String(b.pid), "data-tid": b.tid === undefined || b.tid === null ? "" : String(b.tid),
        "data-span-ns": String(b.span_ns), "data-bucket-sum-ns": String(total),
        "data-gpu-idle-ns": String(b.gpu_idle_estimate_ns),
      });
      box.appendChild(el("div", { cls: "label" }, [
        el("strong", { text: who }), " \u00b7 span " + dur(b.span_ns) +
        " \u00b7 GPU idle (host-side estimate) " + dur(b.gpu_idle_estimate_ns) +
        (b.stalls.length ? " \u00b7 " + b.stalls.length + " stall(s), longest " + dur(b.stalls[0].duration_ns) : ""),
      ]));
      var bar = el("div", { cls: "bar", role: "img", "aria-label": who + ": " + segs.map(function (g) { return g.label + " " + dur(g.ns); }).join(", ") });
      segs.forEach(function (g) {
        var seg = el("div", { cls: "seg", title: g.label + ": " + dur(g.ns), "data-key": g.key, "data-ns": String(g.ns) });
        seg.style.width = (total > 0 ? (100 * g.ns / total) : 0) + "%";
        seg.style.background = PALETTE[g.key] || "#888";
        bar.appendChild(seg);
      });
      box.appendChild(bar);
      (b.coverage || []).forEach(function (c) { box.appendChild(el("p", { cls: "muted", text: c })); });
      s.appendChild(box);
    });
    var legend = el("ul", { cls: "legend", "aria-label": "legend" });
    Object.keys(keys).forEach(function (k) {
      var sw = el("span", { cls: "swatch" });
      sw.style.background = PALETTE[k] || "#888";
      legend.appendChild(el("li", null, [sw, keys[k]]));
    });
    s.insertBefore(legend, s.children[1]);
    return s;
  }

  // ---- timeline ------------------------------------------------------------------------------
  function width(box) {
    return Math.max(320, Math.min(1300, (box.clientWidth || document.body.clientWidth || 1000) - 20));
  }

  function timeline(d, s) {
    var tl = d.timeline;
    var box = el("div", {
      cls: "chart", id: "timeline-chart", role: "img",
      "aria-label": "Timeline: GPU calls, off-CPU, sync and I/O time per " + dur(tl.bucket_ns) + "; drag to zoom, double-click to reset",
    });
    s.appendChild(box);
    var data = [tl.t, tl.gpu_calls, tl.off_cpu_ns, tl.sync_ns, tl.io_ns];
    var marks = tl.marks;
    var u = new uPlot({
      width: width(s), height: 300,
      scales: { x: { time: false }, calls: {}, ns: {} },
      cursor: { drag: { x: true, y: false } },
      series: [
        { label: "seconds", value: function (u, v) { return v === null ? "" : v.toFixed(3) + " s"; } },
        { label: "GPU calls / " + dur(tl.bucket_ns), stroke: "#1f6feb", scale: "calls", width: 1.5 },
        { label: "off-CPU", stroke: "#fa4549", scale: "ns", value: function (u, v) { return v === null ? "" : dur(v); } },
        { label: "sync waits", stroke: "#8250df", scale: "ns", value: function (u, v) { return v === null ? "" : dur(v); } },
        { label: "block I/O", stroke: "#1a7f37", scale: "ns", value: function (u, v) { return v === null ? "" : dur(v); } },
      ],
      axes: [
        { label: "seconds into the window" },
        { scale: "calls", label: "GPU calls" },
        { scale: "ns", side: 1, label: "time per bucket", values: function (u, vals) { return vals.map(dur); } },
      ],
      hooks: {
        // The visible range, for people reading the DOM and for the drag-zoom test.
        setScale: [function (u, key) {
          if (key !== "x") return;
          box.setAttribute("data-x-min", String(u.scales.x.min));
          box.setAttribute("data-x-max", String(u.scales.x.max));
        }],
        draw: [function (u) {
          var ctx = u.ctx;
          ctx.save();
          marks.forEach(function (m) {
            var x = Math.round(u.valToPos(m.t, "x", true));
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
            ctx.strokeStyle = m.kind === "finding" ? "#b3261e" : "#8a5300";
            ctx.lineWidth = m.kind === "finding" ? 2 : 1;
            ctx.setLineDash(m.kind === "finding" ? [] : [4, 3]);
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
          });
          ctx.restore();
        }],
      },
    }, data, box);
    charts.push(u);
    box.setAttribute("data-points", String(u.data[0].length));
    box.setAttribute("data-gpu-calls", String(sum(u.data[1])));
    box.setAttribute("data-off-cpu-ns", String(sum(u.data[2])));
    box.setAttribute("data-sync-ns", String(sum(u.data[3])));
    box.setAttribute("data-io-ns", String(sum(u.data[4])));
    box.setAttribute("data-marks", String(marks.length));
    if (marks.length) {
      s.appendChild(el("ul", { cls: "marks", "aria-label": "marked on the timeline" }, marks.map(function (m) {
        return el("li", { "data-kind": m.kind, "data-id": m.id, text: "+" + m.t.toFixed(3) + " s: " + m.label + (m.kind === "finding" ? " (" + m.id + ")" : " (" + m.id + ")") });
      })));
    }
  }

  // ---- latency -------------------------------------------------------------------------------
  function histogram(h, box) {
    var c = el("div", {
      cls: "chart hist", role: "img", "data-op": h.op, "data-source": h.source, "data-from": h.from,
      "aria-label": h.op + " latency histogram, " + (h.from === "exact" ? "exact stored durations" : "estimated from kernel log2 histograms"),
    });
    c.appendChild(el("h3", { text: h.source + " " + h.op }));
    c.appendChild(el("p", { cls: "muted", text: h.from === "exact" ? "exact: every stored call, log2 buckets" : "estimated: kernel log2 histograms (no stored calls)" }));
    box.appendChild(c);
    var u = new uPlot({
      width: 300, height: 170, legend: { show: false },
      scales: { x: { time: false, distr: 3, log: 10, range: function (u, min, max) { return [Math.max(1, min / 2), max * 2]; } }, y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
      series: [{ label: "upper bound" }, { label: "calls", stroke: "#1f6feb", fill: "#1f6feb66", paths: uPlot.paths.bars({ size: [0.7, 40] }) }],
      // Ticks at powers of ten only: the log scale's own ticks would overlap.
      axes: [{
        splits: function (u, i, min, max) {
          var out = [];
          for (var p = Math.ceil(Math.log10(Math.max(1, min))); p <= Math.floor(Math.log10(max)); p++) out.push(Math.pow(10, p));
          return out;
        },
        values: function (u, vals) { return vals.map(function (v) { return v == null ? "" : dur(v); }); },
      }, { size: 50 }],
    }, [h.upper_ns, h.counts], c);
    charts.push(u);
    c.setAttribute("data-buckets", String(u.data[0].length));
    c.setAttribute("data-total", String(sum(u.data[1])));
  }

  function latency(d) {
    var s = section("latency", "Latency per op");
    s.appendChild(table("Per-op statistics (stats): percentiles exact over stored calls unless marked",
      ["source", "op", "calls", "stored", "p50", "p95", "p99", "max", "total", "percentiles"],
      d.stats.ops.map(function (o) {
        return [o.source, o.op, num(o.counted_calls || o.count), num(o.count), dur(o.p50_ns), dur(o.p95_ns), dur(o.p99_ns), dur(o.max_ns), dur(o.total_ns), o.percentiles.replace("_", " ")];
      }), [0, 0, 1, 1, 1, 1, 1, 1, 1, 0]));
    var box = el("div", { cls: "charts", id: "histograms" });
    s.appendChild(box);
    d.histograms.forEach(function (h) { histogram(h, box); });
    if (d.histograms_left_out) s.appendChild(el("p", { cls: "muted", text: d.histograms_left_out + " more op(s) with less total time are not drawn." }));
    return s;
  }

  // ---- kernels and stacks --------------------------------------------------------------------
  function hotspots(d) {
    var s = section("hotspots", "Top kernels and stacks");
    var k = d.stats.kernels || [];
    if (k.length) {
      s.appendChild(table("Kernels whose launches cost the most host time", ["kernel", "module", "launches", "p50", "p99", "total"],
        k.map(function (x) { return [x.kernel, x.module, num(x.launches), dur(x.p50_ns), dur(x.p99_ns), dur(x.total_ns)]; }), [0, 0, 1, 1, 1, 1]));
    } else {
      s.appendChild(el("p", { cls: "muted", text: "No named kernel launches in this window." }));
    }
    var st = d.stacks;
    s.appendChild(el("h3", { text: "Top call stacks by total time (" + st.stacks.length + " of " + st.total_stacks + "; " + num(st.calls_without_stack) + " calls without a stack)" }));
    var list = el("ol", { id: "stacks" });
    st.stacks.forEach(function (x) {
      var det = el("details");
      det.appendChild(el("summary", { text: x.ops.join(", ") + ": " + num(x.calls) + " calls, " + dur(x.total_ns) + " total, p50 " + dur(x.p50_ns) }));
      det.appendChild(el("pre", { text: x.frames.map(function (f) { return f.symbol + "  (" + f.module + ")"; }).join("\n") + (x.more_frames ? "\n... " + x.more_frames + " more frames" : "") }));
      list.appendChild(el("li", { "data-calls": String(x.calls) }, [det]));
    });
    s.appendChild(list);
    return s;
  }

  // ---- facts and nodes -----------------------------------------------------------------------
  function facts(d) {
    var s = section("facts", "The trace");
    var f = d.facts, st = d.stats;
    s.appendChild(table(null, ["fact", "value"], [
      ["events in the window", num(st.events)],
      ["window", stamp(d.window.from_ns) + " .. " + stamp(d.window.until_ns) + " (" + dur(d.window.until_ns - d.window.from_ns) + ")"],
      ["events in the trace", num(f.events)],
      ["nodes", f.nodes.map(function (n) { return n.node + " (" + n.origin + ")"; }).join(", ")],
      ["processes", num(f.processes_total)],
      ["recording sessions", num(f.sessions)],
      ["events lost (drops)", (st.drops.total ? num(st.drops.total) + " (" + Object.keys(st.drops).filter(function (k) { return k !== "total"; }).map(function (k) { return k + " " + num(st.drops[k]); }).join(", ") + ")" : "none")],
      ["off-CPU", num(st.off_cpu.switches) + " switches, " + dur(st.off_cpu.total_ns) + " (" + dur(st.off_cpu.preempted_ns) + " preempted, " + dur(st.off_cpu.blocked_ns) + " blocked)"],
      ["estimated probe overhead", st.overhead ? st.overhead.estimated_pct.toFixed(2) + "% of traced CPU time (budget " + st.overhead.budget_pct + "%, worst window " + st.overhead.peak_pct.toFixed(2) + "%)" : "not measured (no overhead controller in this recording)"],
      ["probe modes", st.ops.filter(function (o) { return o.probe_modes; }).map(function (o) { return o.op + ": " + o.probe_modes.join(" \u2192 "); }).join("; ") || "full for every op"],
    ]));
    s.appendChild(table("Busiest processes", ["node", "pid", "name", "events"],
      f.processes.map(function (p) { return [p.node, String(p.pid), p.comm, num(p.events)]; }), [0, 1, 0, 1]));
    (st.notes || []).forEach(function (n) { s.appendChild(el("p", { cls: "muted", text: n })); });
    return s;
  }

  function nodes(d) {
    if (d.nodes.length < 2 && !d.per_process.some(function (p) { return p.warnings.length; })) return null;
    var s = section("nodes", "Nodes and stragglers");
    if (d.nodes.length > 1) {
      var sync = d.nodes.map(function (n) { return n.sync_ns; }).sort(function (a, b) { return a - b; });
      var median = sync[Math.floor((sync.length - 1) / 2)];
      var rows = table("Per node in the window (sync time against the median node: a straggler's peers wait for it)",
        ["node", "events", "GPU calls", "GPU call time", "sync time", "vs median", "off-CPU", "drops", "findings"],
        d.nodes.map(function (n) {
          return [n.node, num(n.events), num(n.gpu_calls), dur(n.gpu_ns), dur(n.sync_ns), median > 0 ? (n.sync_ns / median).toFixed(2) + "x" : "-", dur(n.off_cpu_ns), num(n.drops), num(n.findings)];
        }), [0, 1, 1, 1, 1, 1, 1, 1, 1]);
      rows.id = "node-rows";
      s.appendChild(rows);
    }
    var warn = [];
    d.per_process.forEach(function (p) { p.warnings.forEach(function (w) { warn.push((p.node ? p.node + " " : "") + p.comm + " (" + p.pid + "): " + w); }); });
    if (warn.length) s.appendChild(el("ul", { "aria-label": "imbalance warnings" }, warn.map(function (w) { return el("li", { text: w }); })));
    if (d.per_process.length > 1) {
      var procs = [];
      d.per_process.forEach(function (p) {
        p.ops.slice(0, 6).forEach(function (o) { procs.push([p.node, String(p.pid), p.comm, o.op, num(o.count), dur(o.p50_ns), dur(o.p99_ns)]); });
      });
      s.appendChild(table("Per process: p50/p99 of GPU ops", ["node", "pid", "name", "op", "calls", "p50", "p99"], procs, [0, 1, 0, 0, 1, 1, 1]));
    }
    return s;
  }

  // ---- the page ------------------------------------------------------------------------------
  function render(d) {
    charts.forEach(function (u) { u.destroy(); });
    charts = [];
    var app = document.getElementById("app");
    while (app.firstChild) app.removeChild(app.firstChild);
    var nodesLine = d.stats.nodes.length ? " \u00b7 node " + d.stats.nodes.join(", ") : "";
    var filter = d.query.pid ? " \u00b7 pid " + d.query.pid : "";
    app.appendChild(el("p", { id: "summary" }, [
      num(d.stats.events) + " events from " + stamp(d.window.from_ns) + " over " + dur(d.window.until_ns - d.window.from_ns) +
      nodesLine + filter + " \u00b7 " + d.findings.length + " finding(s) \u00b7 causeway " + d.version + ", built in " + d.build_ms.toFixed(0) + " ms",
    ]));
    app.appendChild(findings(d));
    app.appendChild(budgets(d));
    var dev = devices(d);
    if (dev) app.appendChild(dev);
    var st = stepsSection(d);
    if (st) app.appendChild(st);
    var t = section("timeline", "Timeline (drag to zoom, double-click to reset; red lines: findings, dashed: stalls)");
    app.appendChild(t);
    timeline(d, t);
    app.appendChild(latency(d));
    app.appendChild(hotspots(d));
    var n = nodes(d);
    if (n) app.appendChild(n);
    app.appendChild(facts(d));
    updates += 1;
    document.body.setAttribute("data-updates", String(updates));
    document.body.setAttribute("data-generated-ns", String(d.generated_ns));
    document.body.setAttribute("data-ready", "1");
  }

  function setStatus(text) {
    document.getElementById("status").textContent = text;
  }

  var data = JSON.parse(document.getElementById("causeway-data").textContent);
  render(data);
  var body = document.body;
  if (body.getAttribute("data-mode") === "live") {
    var every = Math.max(500, Number(body.getAttribute("data-poll-ms")) || 5000);
    var path = body.getAttribute("data-live-path") + location.search;
    // The next poll waits for this one, and longer when the server took long to build the
    // data (a large live trace), so a page left open never keeps the server busy.
    var next = function (buildMs) {
      setTimeout(poll, Math.max(every, 4 * (buildMs || 0)));
    };
    var poll = function () {
      var took = 0;
      fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(function (d) {
          render(d);
          took = d.build_ms;
          setStatus("live: updated " + new Date().toLocaleTimeString() + ", refreshing every " + (Math.max(every, 4 * took) / 1000).toFixed(1) + " s");
        })
        .catch(function (e) { setStatus("live: refresh failed (" + e.message + "), retrying"); })
        .then(function () { next(took); });
    };
    setStatus("live: refreshing every " + (every / 1000) + " s");
    next(data.build_ms);
  } else {
    setStatus("report written " + stamp(data.generated_ns) + "; self-contained, opened without network access");
  }
})();
