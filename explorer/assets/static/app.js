// agentenv explorer: form buttons that call the API, and live updates by server-sent events.
// Data is only ever set with textContent; a live update swaps <main> for the same page as the
// server renders it again (escaped by html/template there).
"use strict";

(function () {
  const csrf = document.querySelector('meta[name="csrf"]').content;

  function formBody(form) {
    const out = {};
    for (const el of form.elements) {
      if (!el.name) continue;
      out[el.name] = el.type === "number" ? Number(el.value || 0) : el.value;
    }
    return JSON.stringify(out);
  }

  function summary(data) {
    if (data.error) return "error: " + data.error;
    if (data.receipt) {
      const items = data.receipt.items || [];
      const down = items.filter((i) => i.outcome === "terminated" || i.outcome === "already_gone").length;
      return "torn down: " + down + "/" + items.length + " sandboxes down" + (data.clean ? "" : " (not clean)");
    }
    if (data.actions !== undefined) {
      return "gc: " + (data.actions || []).length + " collected, " + data.kept + " kept" + ((data.errors || []).length ? "; errors: " + data.errors.join("; ") : "");
    }
    if (data.cancelled) return "cancelling: the episodes tear down what they made";
    return "done";
  }

  function bind(root) {
    for (const form of root.querySelectorAll("form[data-api]")) {
      form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
        const out = form.querySelector("[data-result]");
        const button = form.querySelector("button");
        if (button) button.disabled = true;
        if (out) { out.className = "pending"; out.textContent = "working…"; }
        try {
          const resp = await fetch(form.dataset.api, {
            method: "POST",
            headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
            body: formBody(form),
            credentials: "same-origin",
          });
          const data = await resp.json().catch(() => ({ error: resp.status + " " + resp.statusText }));
          if (resp.ok && data.url) { window.location.assign(data.url); return; }
          if (out) { out.className = resp.ok && !data.error ? "ok" : "error"; out.textContent = resp.ok ? summary(data) : "error: " + (data.error || resp.status); }
          refreshSoon();
        } catch (e) {
          if (out) { out.className = "error"; out.textContent = "error: " + e; }
        } finally {
          if (button) button.disabled = false;
        }
      });
    }
  }

  // Live: swap <main> for a fresh render, at most once a second.
  let timer = null;
  let busy = false;
  async function refresh() {
    timer = null;
    if (busy) { refreshSoon(); return; }
    busy = true;
    try {
      const resp = await fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
      if (!resp.ok) return;
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const fresh = doc.getElementById("main");
      const main = document.getElementById("main");
      if (!fresh || !main) return;
      // Keep results of actions shown on the page.
      const kept = [...main.querySelectorAll("[data-result]")].map((e) => [e.className, e.textContent]);
      const node = document.importNode(fresh, true);
      main.replaceWith(node);
      [...node.querySelectorAll("[data-result]")].forEach((e, i) => { if (kept[i]) { e.className = kept[i][0]; e.textContent = kept[i][1]; } });
      bind(node);
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    } finally {
      busy = false;
    }
  }
  function refreshSoon() {
    if (!timer) timer = setTimeout(refresh, 1000);
  }

  bind(document);
  const main = document.getElementById("main");
  if (main && main.dataset.live && window.EventSource) {
    const dot = document.getElementById("livedot");
    const es = new EventSource("/api/v1/events");
    es.onopen = () => { if (dot) dot.classList.add("on"); };
    es.onerror = () => { if (dot) dot.classList.remove("on"); };
    for (const name of ["run", "launch", "step"]) es.addEventListener(name, refreshSoon);
  }
})();
