// Live refresh for pages whose body has data-refresh="SECONDS": the part of
// the page marked id="live" is fetched again and swapped in. Pages read the
// same without this script; it never runs inline (the CSP forbids that).
(function () {
  "use strict";
  var body = document.body;
  var seconds = parseInt(body && body.getAttribute("data-refresh"), 10);
  if (!seconds || seconds < 1) return;
  var status = document.getElementById("live-status");
  var note = document.getElementById("stale");
  // read is when the page last read the server, shown when it no longer can.
  var read = new Date();
  function clock(d) { return d.toISOString().slice(11, 19) + " UTC"; }
  function later() { window.setTimeout(tick, seconds * 1000); }
  // stale greys the live part and says, at the top, that it is not current:
  // an operator must not read old numbers as live ones.
  function stale(why) {
    var live = document.getElementById("live");
    if (live) live.classList.add("stale");
    if (note) {
      note.textContent = "This page is not current: " + why + "; it shows what was read at " + clock(read) + ".";
      note.hidden = false;
    }
    if (status) status.textContent = "refresh failed; retrying";
  }
  function busy() {
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
  }
  function tick() {
    if (document.hidden || busy()) { later(); return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        // A redirect is to the sign-in form: the session has ended.
        if (r.redirected) throw new Error("the session has ended, reload to sign in again");
        if (!r.ok) throw new Error("the server answered " + r.status);
        return r.text();
      })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("live"), old = document.getElementById("live");
        if (fresh && old) old.replaceWith(document.importNode(fresh, true));
        read = new Date();
        if (note) note.hidden = true;
        if (status) status.textContent = "updated " + clock(read);
      }, function (e) {
        stale(e instanceof TypeError ? "the server cannot be reached" : e.message);
      })
      .then(later);
  }
  later();
})();
