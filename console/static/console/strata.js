// Strata console: forms and buttons talk to the REST API (session auth + CSRF); the API's
// {"error", "detail", "fields"} answers are shown beside the fields. No framework, no CDN.
"use strict";

const csrf = () => document.body.dataset.csrf;
const UNITS = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4, p: 1024 ** 5 };

function parseBytes(text) {
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(?:i?b)?\s*$/i.exec(text);
  if (!m) return NaN;
  return Math.round(parseFloat(m[1]) * UNITS[m[2].toLowerCase()]);
}

async function api(url, method, body) {
  const resp = await fetch(url, {
    method, credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  if (resp.status !== 204) { try { data = await resp.json(); } catch (e) { data = { detail: resp.statusText }; } }
  return { ok: resp.ok, status: resp.status, data };
}

function formBody(form) {
  const body = {};
  const errors = {};
  form.querySelectorAll("[name]").forEach((el) => {
    const kind = el.dataset.kind, v = el.value.trim();
    if (kind === "checkbox") { body[el.name] = el.checked; return; }
    if (v === "") return;
    if (kind === "number") body[el.name] = Number(v);
    else if (kind === "bytes") {
      const n = parseBytes(v);
      if (Number.isNaN(n)) errors[el.name] = "Not a size: use a number with K, M, G or T.";
      else body[el.name] = n;
    } else if (kind === "lines") body[el.name] = v.split(/\n+/).map((s) => s.trim()).filter(Boolean);
    else body[el.name] = v;
  });
  return { body, errors };
}

function showErrors(scope, data) {
  scope.querySelectorAll("[data-error-for]").forEach((e) => { e.textContent = ""; });
  const page = document.querySelector("[data-page-error]");
  page.textContent = "";
  if (!data) return;
  let placed = false;
  for (const [name, msgs] of Object.entries(data.fields || {})) {
    const slot = scope.querySelector(`[data-error-for="${name}"]`);
    if (slot) { slot.textContent = [].concat(msgs).join(" "); placed = true; }
  }
  if (!placed || !data.fields) page.textContent = data.detail || "Request failed.";
}

function urlFor(el) { return el.dataset.url.replace("{key}", encodeURIComponent(el.dataset.key || "")); }

function extraBody(el) {
  const extra = JSON.parse(el.dataset.extra || "{}");
  for (const k of Object.keys(extra)) {
    if (typeof extra[k] === "string") extra[k] = extra[k].replace("{key}", el.dataset.key || "");
  }
  return extra;
}

function humanBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return i === 0 ? `${n.toFixed(0)} B` : `${n.toFixed(1)} ${units[i]}`;
}

// "1.5 GiB of 4.0 GiB, 30.2 MiB/s, ETA 85 s" for a job that moves bytes (as the CLI prints it).
function transferLine(j) {
  if (j.bytes_done === null || j.bytes_done === undefined) return "";
  const parts = [humanBytes(j.bytes_done) + (j.bytes_total === null ? "" : ` of ${humanBytes(j.bytes_total)}`)];
  if (j.rate_bytes_per_s !== null) parts.push(`${(j.rate_bytes_per_s / 1024 ** 2).toFixed(1)} MiB/s`);
  if (j.eta_seconds !== null) parts.push(`ETA ${j.eta_seconds.toFixed(0)} s`);
  return parts.join(", ");
}

function watchJob(job) {
  const box = document.querySelector("[data-job-watch]");
  box.hidden = false;
  const tick = async () => {
    const r = await api(`/api/v1/jobs/${job.id}/`, "GET");
    if (!r.ok) return;
    const j = r.data;
    box.querySelector(".bar > div").style.width = `${j.progress}%`;
    box.querySelector(".pct").textContent = `${Math.round(j.progress)}%`;
    box.querySelector(".xfer").textContent = transferLine(j);
    box.querySelector(".msg").textContent = `${j.kind} ${j.state}: ${j.error || j.message}`;
    box.dataset.state = j.state;
    if (["succeeded", "failed", "cancelled"].includes(j.state)) setTimeout(() => location.reload(), 2000);
    else setTimeout(tick, 500);
  };
  tick();
}

async function submitForm(ev) {
  ev.preventDefault();
  const form = ev.target;
  const { body, errors } = formBody(form);
  if (Object.keys(errors).length) { showErrors(form, { fields: errors, detail: "Check the fields." }); return; }
  const r = await api(urlFor(form), form.dataset.method || "POST", { ...extraBody(form), ...body });
  if (!r.ok) { showErrors(form, r.data); return; }
  if (form.hasAttribute("data-watch-job") && r.status === 202) watchJob(r.data);
  else if (r.data && r.data.show_once) showOnce(form, r.data.show_once);
  else location.reload();
}

// A secret the API answers once (an S3 key's secret): shown until the user says it is saved.
function showOnce(form, values) {
  const box = document.createElement("div");
  box.className = "show-once";
  box.innerHTML = "<p><b>Save this now: it will not be shown again.</b></p>";
  for (const [field, value] of Object.entries(values)) {
    const row = document.createElement("p");
    const code = document.createElement("code");
    code.dataset.field = field;
    code.textContent = value;
    row.append(`${field}: `, code);
    box.appendChild(row);
  }
  const done = document.createElement("button");
  done.textContent = "I have saved it";
  done.addEventListener("click", () => location.reload());
  box.appendChild(done);
  form.replaceWith(box);
}

async function clickAction(ev) {
  const btn = ev.currentTarget;
  if (btn.dataset.confirm && !window.confirm(btn.dataset.confirm.replaceAll("{name}", btn.dataset.name || btn.dataset.key))) return;
  if (btn.hasAttribute("data-confirm-name")) {
    const name = btn.dataset.name || btn.dataset.key;
    const typed = window.prompt(`This cannot be undone. Type "${name}" to confirm.`);
    if (typed !== name) return;
  }
  const r = await api(urlFor(btn), btn.dataset.method || "POST", btn.dataset.method === "DELETE" ? undefined : extraBody(btn));
  if (!r.ok) { showErrors(document, r.data); return; }
  if (r.status === 202 && r.data && r.data.id) watchJob(r.data);
  else location.reload();
}

async function liveJobs(tbody) {
  const r = await api("/api/v1/jobs/?limit=20", "GET");
  if (r.ok) {
    const active = r.data.results.filter((j) => ["pending", "running"].includes(j.state) || tbody.querySelector(`[data-job="${j.id}"]`));
    tbody.innerHTML = active.length ? "" : '<tr class="none"><td colspan="5">Nothing running.</td></tr>';
    for (const j of active) {
      const tr = document.createElement("tr");
      tr.dataset.job = j.id;
      tr.dataset.state = j.state;
      tr.innerHTML = `<td>${j.id}</td><td></td><td></td><td><div class="bar"><div style="width:${j.progress}%"></div></div><span class="pct">${Math.round(j.progress)}%</span> <span class="xfer"></span></td><td class="msg"></td>`;
      tr.querySelector(".xfer").textContent = transferLine(j);
      tr.children[1].textContent = j.kind;
      tr.children[2].textContent = j.target_name;
      tr.children[4].textContent = `${j.state}: ${j.error || j.message}`;
      tbody.appendChild(tr);
    }
  }
  setTimeout(() => liveJobs(tbody), 1000);
}

function drawChart(svg, series) {
  const W = 600, H = 160, P = 24;
  const all = series.flatMap((s) => s.points.map((p) => p[1]));
  const max = Math.max(1, ...all);
  const t0 = Date.now() / 1000 - 3600;
  const x = (t) => P + ((t - t0) / 3600) * (W - 2 * P);
  const y = (v) => H - P - (v / max) * (H - 2 * P);
  let out = `<line x1="${P}" y1="${H - P}" x2="${W - P}" y2="${H - P}" class="axis"/>` +
    `<text x="${P}" y="${P - 6}" class="label">max ${max.toFixed(1)}</text>`;
  series.forEach((s, i) => {
    const pts = s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    out += `<polyline points="${pts}" class="line s${i}"/>` +
      `<text x="${W - P - 120 + i * 60}" y="${P - 6}" class="label s${i}">${s.name}</text>`;
  });
  svg.innerHTML = out;
}

async function charts() {
  const svgs = document.querySelectorAll("svg[data-series]");
  if (!svgs.length) return;
  const r = await api("/api/v1/metrics/series/?minutes=60", "GET");
  if (r.ok) svgs.forEach((svg) => drawChart(svg, r.data[svg.dataset.series] || []));
  setTimeout(charts, 15000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form[data-api-form]").forEach((f) => f.addEventListener("submit", submitForm));
  document.querySelectorAll("[data-api-action]").forEach((b) => b.addEventListener("click", clickAction));
  const live = document.querySelector("[data-live-jobs]");
  if (live) liveJobs(live);
  charts();
});
