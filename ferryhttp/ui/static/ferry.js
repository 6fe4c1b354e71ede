// Ferry's overview refreshes itself: every data-refresh milliseconds it
// fetches /ui/live (the at-risk panel, the counts and the event list for
// the same filter and page) and swaps those parts in. It pauses while a
// filter field has focus or holds an edit not yet applied, so nothing moves
// under the operator's hands. The only script the dashboard's
// Content-Security-Policy allows; it needs nothing else.
"use strict";
(function () {
  var every = parseInt(document.body.dataset.refresh || "0", 10);
  var form = document.getElementById("filters");
  var status = document.getElementById("live-status");
  if (!every || !form) {
    return;
  }
  var parts = ["at-risk", "counts", "event-list"];
  var ticks = 0, paused = 0;

  function fields() {
    return new URLSearchParams(new FormData(form)).toString();
  }
  var applied = fields();

  function editing() {
    var el = document.activeElement;
    if (el && form.contains(el) && el.tagName !== "BUTTON" && el.tagName !== "A") {
      return true;
    }
    return fields() !== applied;
  }

  function say(text) {
    if (status) {
      status.textContent = text;
    }
    document.body.dataset.ticks = String(ticks);
    document.body.dataset.paused = String(paused);
  }

  function later() {
    setTimeout(tick, every);
  }

  function tick() {
    ticks++;
    if (editing()) {
      paused++;
      say("live: paused while you edit the filter");
      later();
      return;
    }
    fetch("/ui/live" + location.search, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (res) {
        return res.ok && res.url.indexOf("/ui/live") >= 0 ? res.text() : null;
      })
      .then(function (html) {
        if (html === null) {
          say("live: not updated (signed out?)");
          return;
        }
        var doc = new DOMParser().parseFromString(html, "text/html");
        parts.forEach(function (id) {
          var fresh = doc.getElementById(id), old = document.getElementById(id);
          if (fresh && old) {
            old.replaceWith(document.adoptNode(fresh));
          }
        });
        say("live: updated " + new Date().toLocaleTimeString());
      })
      .catch(function () {
        say("live: the server did not answer");
      })
      .finally(later);
  }

  say("live");
  later();
})();
