// Live refresh for pages whose body has data-refresh="SECONDS": the part of
// the page marked id="live" is fetched again and swapped in. Pages read the
// same without this script; it never runs inline (the CSP forbids that).
(function () {
  "use strict";
  var body = document.body;
  var seconds = parseInt(body && body.getAttribute("data-refresh"), 10);
  if (!seconds || seconds < 1) return;
  var status = document.getElementById("live-status");
  function later() { window.setTimeout(tick, seconds * 1000); }
  function busy() {
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
  }
  function tick() {
    if (document.hidden || busy()) { later(); return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok || r.redirected) throw new Error(String(r.status)); return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("live"), old = document.getElementById("live");
        if (fresh && old) old.replaceWith(document.importNode(fresh, true));
        if (status) status.textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
      })
      .catch(function () { if (status) status.textContent = "refresh failed; retrying"; })
      .then(later);
  }
  later();
})();
