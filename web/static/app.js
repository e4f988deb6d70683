// The web room's live parts: the page listens to /events (Server-Sent
// Events) and, on each change, fetches itself again and swaps its live
// regions ([data-region]) in place. Without JavaScript the pages read the
// same; they just do not update themselves. A request page also gets the
// answer as it is written ("text" events) into #live-text, until the
// request ends and the page shows the stored result instead.
(function () {
  "use strict";
  var live = document.body.dataset.live;
  if (!live || !window.EventSource || !window.fetch) {
    return;
  }
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-region]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          var active = document.activeElement;
          if (!fresh || (active && el.contains(active) && active.tagName === "INPUT" && active.value)) {
            return; // leave what someone is typing alone
          }
          el.replaceWith(fresh);
        });
        showText();
        schedule();
      })
      .catch(function () {})
      .finally(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  // A finished task line stays a few seconds, then the strip is refreshed.
  var timer = null;
  function schedule() {
    if (timer === null && document.querySelector("[data-expires]")) {
      timer = setTimeout(function () { timer = null; refresh(); }, 10500);
    }
  }
  var text = "";
  function showText() {
    var el = document.getElementById("live-text");
    if (el) {
      el.textContent = text;
      el.parentNode.hidden = text === "";
    }
  }
  var url = "/events?room=" + encodeURIComponent(live);
  if (document.body.dataset.request) {
    url += "&request=" + encodeURIComponent(document.body.dataset.request);
  }
  var es = new EventSource(url);
  es.addEventListener("change", refresh);
  es.addEventListener("text", function (ev) {
    try { text = JSON.parse(ev.data); } catch (e) { return; }
    showText();
  });
  showText();
  es.addEventListener("open", function () { document.body.dataset.connected = "1"; });
  schedule();
})();
