// disq dashboard: live Queues page (server-sent events) and small niceties. Plain JS, no
// build step, no library. Text goes into the page with textContent only, never innerHTML.
"use strict";
(function () {
  const prefix = document.body.dataset.prefix || "/dashboard";
  const W = 120, H = 24, KEEP = 300;

  function points(values, h) {
    h = h || H;
    if (!values.length) return "";
    const top = Math.max(...values) || 1;
    const step = W / Math.max(1, values.length - 1);
    return values.map((v, i) =>
      (i * step).toFixed(1) + "," + (h - (v / top) * (h - 2) - 1).toFixed(1)).join(" ");
  }

  function spark(h) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", h === H ? "spark" : "spark small");
    svg.setAttribute("width", W); svg.setAttribute("height", h);
    svg.setAttribute("viewBox", "0 0 " + W + " " + h);
    svg.appendChild(document.createElementNS(ns, "polyline"));
    return svg;
  }

  function age(s) {
    if (s === null || s === undefined) return "-";
    s = Math.max(0, Math.floor(s));
    const p = (n) => String(n).padStart(2, "0");
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + p(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + p(Math.floor(s % 3600 / 60)) + "m";
    return Math.floor(s / 86400) + "d" + p(Math.floor(s % 86400 / 3600)) + "h";
  }

  function setText(row, cls, text) {
    const cell = row.querySelector("." + cls);
    if (cell && cell.textContent !== String(text)) cell.textContent = text;
  }

  function cell(tr, cls, text) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function newQueueRow(tbody, name) {
    const tr = document.createElement("tr");
    tr.className = "queue";
    tr.dataset.queue = name;
    const a = document.createElement("a");
    a.href = prefix + "/queue?name=" + encodeURIComponent(name);
    a.textContent = name;
    cell(tr).appendChild(a);
    cell(tr, "depth num", "0");
    cell(tr).appendChild(spark(H));
    for (const c of ["in num", "out num", "blocked num", "paused", "age", ""]) cell(tr, c, "");
    const empty = tbody.querySelector("tr.empty");
    if (empty) empty.remove();
    tbody.appendChild(tr);
    return tr;
  }

  // A queue's row on one node, placed after the queue's row and its other nodes' rows.
  function newNodeRow(qrow, name, node) {
    const tr = document.createElement("tr");
    tr.className = "pernode";
    tr.dataset.queue = name;
    tr.dataset.node = node;
    cell(tr, "indent", "on " + node);
    cell(tr, "depth num", "0");
    cell(tr).appendChild(spark(SMALL_H));
    for (const c of ["in num", "out num", "blocked num", "paused", "age", ""]) cell(tr, c, "");
    let after = qrow;
    while (after.nextElementSibling && after.nextElementSibling.classList.contains("pernode")) {
      after = after.nextElementSibling;
    }
    after.after(tr);
    return tr;
  }

  function findRow(tbody, attr, name) {
    for (const tr of tbody.querySelectorAll("tr." + attr)) {
      if (tr.dataset[attr] === name) return tr;
    }
    return null;
  }

  // The rows of one queue on each node, by node.
  function nodeRows(qrow) {
    const out = {};
    for (let tr = qrow.nextElementSibling; tr && tr.classList.contains("pernode");
         tr = tr.nextElementSibling) {
      out[tr.dataset.node] = tr;
    }
    return out;
  }

  // series[name] = array of depth values, kept to KEEP points; nSeries by queue + "\0" + node
  const qSeries = {}, tSeries = {}, nSeries = {};
  const SMALL_H = 16;

  function push(store, name, v) {
    const s = store[name] || (store[name] = []);
    s.push(v);
    if (s.length > KEEP) s.splice(0, s.length - KEEP);
    return s;
  }

  function apply(snap) {
    const qbody = document.querySelector("#queues tbody");
    if (!qbody) return;
    const seen = new Set();
    for (const q of snap.queues) {
      const row = findRow(qbody, "queue", q.name) || newQueueRow(qbody, q.name);
      setText(row, "depth", q.depth);
      setText(row, "in", q["in"].toFixed(1));
      setText(row, "out", q.out.toFixed(1));
      setText(row, "blocked", q.blocked);
      setText(row, "paused", q.paused);
      setText(row, "age", age(q.age_s));
      const line = row.querySelector("svg.spark polyline");
      if (line) line.setAttribute("points", points(push(qSeries, q.name, q.depth)));
      row.dataset.samples = String(qSeries[q.name].length);
      seen.add(q.name);
      const old = nodeRows(row);
      for (const [node, r] of Object.entries(q.nodes || {})) {
        const key = q.name + "\0" + node;
        if (!old[node] && !nSeries[key]) nSeries[key] = [0];  // not on that node before
        const nrow = old[node] || newNodeRow(row, q.name, node);
        delete old[node];
        setText(nrow, "depth", r.len);
        setText(nrow, "in", r.rate_in.toFixed(1));
        setText(nrow, "out", r.rate_out.toFixed(1));
        setText(nrow, "blocked", r.blocked);
        setText(nrow, "paused", r.pause);
        setText(nrow, "age", age(r.age_s));
        const nline = nrow.querySelector("svg.spark polyline");
        const series = push(nSeries, key, r.len);
        if (nline) nline.setAttribute("points", points(series, SMALL_H));
        nrow.dataset.samples = String(series.length);
      }
      for (const [node, tr] of Object.entries(old)) {  // the queue went from that node
        delete nSeries[q.name + "\0" + node];
        tr.remove();
      }
    }
    for (const row of qbody.querySelectorAll("tr.queue")) {  // queues gone everywhere
      if (seen.has(row.dataset.queue)) continue;
      for (const tr of Object.values(nodeRows(row))) tr.remove();
      setText(row, "depth", 0);
      setText(row, "in", "0.0");
      setText(row, "out", "0.0");
      setText(row, "blocked", 0);
      setText(row, "age", "-");
      const line = row.querySelector("svg.spark polyline");
      if (line) line.setAttribute("points", points(push(qSeries, row.dataset.queue, 0)));
    }
    const tbody = document.querySelector("#tubes tbody");
    for (const t of (tbody ? snap.tubes : [])) {
      const row = findRow(tbody, "tube", t.name);
      if (!row) continue;
      for (const k of ["ready", "reserved", "delayed", "buried", "waiting"]) setText(row, k, t[k]);
      const line = row.querySelector("svg.spark polyline");
      if (line) line.setAttribute("points", points(push(tSeries, t.name, t.ready)));
    }
    const stamp = document.getElementById("sample-time");
    if (stamp) {
      stamp.textContent = "live · " + new Date(snap.time * 1000).toISOString().slice(11, 19) + " UTC";
      stamp.dataset.time = String(snap.time);
    }
  }

  function live() {
    if (!document.getElementById("queues")) return;
    fetch(prefix + "/api/queues", { credentials: "same-origin" })
      .then((r) => r.ok ? r.json() : null)
      .then((snap) => {
        if (snap && snap.history) {
          for (const [name, s] of Object.entries(snap.history.queues)) qSeries[name] = s.depth.slice(-KEEP);
          for (const [name, s] of Object.entries(snap.history.tubes)) tSeries[name] = s.ready.slice(-KEEP);
          for (const [name, byNode] of Object.entries(snap.history.pernode || {})) {
            for (const [node, s] of Object.entries(byNode)) nSeries[name + "\0" + node] = s.slice(-KEEP);
          }
        }
        const es = new EventSource(prefix + "/stream");
        es.onmessage = (ev) => apply(JSON.parse(ev.data));
      });
  }

  function times() {
    for (const td of document.querySelectorAll("td.time[data-ms]")) {
      const ms = Number(td.dataset.ms);
      if (ms) td.textContent = new Date(ms).toISOString().replace("T", " ").slice(0, 23);
    }
  }

  document.addEventListener("DOMContentLoaded", () => { times(); live(); });
})();
