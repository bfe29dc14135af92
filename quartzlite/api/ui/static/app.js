// quartzlite dashboard behaviour. Needs htmx.min.js (vendored htmx.org 2.0.11, see VENDORED.md)
// loaded before this file. CSP-safe: no eval, no inline handlers, every listener is attached here.
(function () {
  "use strict";

  // ---- (a) <time datetime="ISO UTC"> -> the viewer's local time ------------------------------
  var MARK = "data-localized";
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  var zoneFormat = null;
  try {
    zoneFormat = new Intl.DateTimeFormat(undefined, { timeZoneName: "short", numberingSystem: "latn" });
  } catch (e) { /* very old browser: no zone name */ }

  function zoneName(d) {
    if (!zoneFormat || !zoneFormat.formatToParts) { return ""; }
    var parts = zoneFormat.formatToParts(d);
    for (var i = 0; i < parts.length; i++) {
      if (parts[i].type === "timeZoneName") { return parts[i].value; }
    }
    return "";
  }

  // "2026-11-24 14:03:05" in the local zone (getters are local) or in UTC.
  function stamp(d, utc) {
    var g = utc
      ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
      : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
    return g[0] + "-" + pad(g[1]) + "-" + pad(g[2]) + " " + pad(g[3]) + ":" + pad(g[4]) + ":" + pad(g[5]);
  }

  function localizeTimes(root) {
    var els = (root || document).querySelectorAll("time[datetime]:not([" + MARK + "])");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var iso = (el.getAttribute("datetime") || "").trim();
      el.setAttribute(MARK, "");  // mark first: never looked at twice, even if unparsable
      if (!/^\d{4}-\d\d-\d\d[T ]\d\d:\d\d/.test(iso)) { continue; }  // dates, durations: leave
      // The server sends UTC; an instant without an offset would be read as local time.
      if (!/(Z|[+-]\d\d:?\d\d)$/i.test(iso)) { iso += "Z"; }
      // Python writes microseconds; Date is only specified for milliseconds.
      var d = new Date(iso.replace(" ", "T").replace(/(\.\d{3})\d+/, "$1"));
      if (isNaN(d.getTime())) { continue; }
      var zone = zoneName(d);
      el.textContent = stamp(d, false) + (zone ? " " + zone : "");
      el.setAttribute("title", stamp(d, true) + " UTC");
    }
  }

  // ---- (b) CSRF token on every htmx request ----------------------------------------------------
  // Attached to document right away so that requests fired while htmx initialises carry it too.
  document.addEventListener("htmx:configRequest", function (evt) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    var token = meta && meta.getAttribute("content");
    if (token) { evt.detail.headers["X-CSRF-Token"] = token; }
  });

  // ---- (c) "/" focuses #search unless the user is typing -----------------------------------------
  document.addEventListener("keydown", function (evt) {
    if (evt.key !== "/" || evt.ctrlKey || evt.metaKey || evt.altKey || evt.defaultPrevented) { return; }
    var t = evt.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) { return; }
    var search = document.getElementById("search");
    if (!search) { return; }
    evt.preventDefault();
    search.focus();
    if (typeof search.select === "function") { search.select(); }
  });

  // ---- (d) <form data-confirm="text">: ask before submitting ---------------------------------------
  // Capture phase on document, so it runs before htmx's own submit listener on the form.
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    var sub = evt.submitter;
    var text = (sub && sub.getAttribute("data-confirm")) ||
      (form && form.getAttribute && form.getAttribute("data-confirm"));
    if (text && !window.confirm(text)) {
      evt.preventDefault();
      evt.stopPropagation();
    }
  }, true);

  // ---- (e) a polling region holds still while the reader has something open in it ----------
  // The history's output tails are <details>: a refresh would close the one being read, and
  // a refresh while a control inside the region has focus would move the keyboard user.
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var region = evt.detail && evt.detail.elt;
    if (!region || !region.getAttribute || !region.getAttribute("hx-trigger")) { return; }
    if (!/every /.test(region.getAttribute("hx-trigger"))) { return; }
    var active = document.activeElement;
    if (region.querySelector("details[open]") ||
        (active && active !== document.body && region.contains(active))) {
      evt.preventDefault();
    }
  });

  // ---- (f) a rejected field, once edited, stops showing the old rejection -------------------
  // (the server checks it again at the next save; the schedule preview checks as you type)
  document.addEventListener("input", function (evt) {
    var field = evt.target;
    if (!field || !field.getAttribute || field.getAttribute("aria-invalid") !== "true") { return; }
    field.removeAttribute("aria-invalid");
    var error = document.getElementById("error-" + field.id);
    if (error) { error.textContent = ""; error.removeAttribute("role"); }
  });

  // ---- start -------------------------------------------------------------------------------
  function start() {
    localizeTimes(document);
    // After every htmx swap (the self-refreshing regions), convert the new <time> elements.
    document.body.addEventListener("htmx:afterSettle", function () { localizeTimes(document); });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
