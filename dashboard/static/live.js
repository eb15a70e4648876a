// Live updates for the Fleet dashboard: progressive enhancement only.
// Without JavaScript every page works (a Refresh link; pages with a rollout
// or a command in progress refresh themselves through <noscript>).
// With it, the page follows /live (server-sent events) and reloads its
// live region when its data changed, and every few seconds while something
// is in progress.
(function () {
  "use strict";
  var body = document.body;
  var kind = body.getAttribute("data-live-page");
  if (!kind || !window.fetch || !window.DOMParser) { return; }
  var status = document.getElementById("live-status");
  // The "not found" page of one object: it is loaded again, whole, once
  // the object exists (applied a moment before the dashboard's cache had
  // it).
  var missing = body.hasAttribute("data-live-missing");
  var busy = false, again = false;
  function say(text) { if (status) { status.textContent = text; } }
  function reload() {
    if (busy) { again = true; return; }
    var live = document.getElementById("live");
    // Never pull the page from under the user's focus.
    if (live && live.contains(document.activeElement) && document.activeElement !== live) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.redirected || !r.ok) { throw new Error("status " + r.status); }
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        var cur = document.getElementById("live");
        if (fresh && cur) { cur.innerHTML = fresh.innerHTML; }
        var auto = doc.body.getAttribute("data-auto-refresh");
        if (auto) { body.setAttribute("data-auto-refresh", auto); } else { body.removeAttribute("data-auto-refresh"); }
        say("Updated " + new Date().toLocaleTimeString());
      })
      .catch(function () { say("Live update failed; use Refresh this page"); })
      .then(function () { busy = false; if (again) { again = false; setTimeout(reload, 500); } });
  }
  function appeared() {
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { if (r.ok && !r.redirected) { window.location.reload(); } })
      .catch(function () {});
  }
  if (window.EventSource) {
    var q = "page=" + encodeURIComponent(kind) + "&key=" + encodeURIComponent(body.getAttribute("data-live-key") || "");
    var es = new EventSource("/live?" + q);
    es.addEventListener("change", missing ? appeared : reload);
    // Once the stream is open no change is missed; one between the
    // page's answer and now is caught by asking once more.
    es.onopen = function () { say("Live updates on"); if (missing) { appeared(); } };
    es.onerror = function () { say("Live updates reconnecting…"); };
  }
  setInterval(function () { if (body.getAttribute("data-auto-refresh")) { reload(); } }, 3000);
})();
