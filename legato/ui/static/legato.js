// The live run page: append each server-rendered history event the stream sends, and
// swap in the header, graph, timeline and attempts the server re-renders after them.
// The browser's EventSource reconnects by itself and sends Last-Event-ID (the last seq
// it saw), so the server resumes the history exactly where the page left off.
(function () {
  "use strict";

  // A link to an attempt's traceback opens the folded row it points at.
  function openTarget() {
    var target = window.location.hash && document.getElementById(window.location.hash.slice(1));
    var folded = target && target.querySelector("details");
    if (folded) {
      folded.open = true;
    }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();

  var list = document.getElementById("history");
  if (!list || list.dataset.live !== "yes" || !window.EventSource) {
    return;
  }
  var state = document.getElementById("live-state");
  var source = new EventSource(list.dataset.events + "?after=" + list.dataset.after);
  source.addEventListener("history", function (message) {
    if (list.querySelector('[data-seq="' + message.lastEventId + '"]')) {
      return;
    }
    // The fragment is rendered (and HTML-escaped) by the server's own template.
    list.insertAdjacentHTML("beforeend", message.data);
  });
  source.addEventListener("run", function (message) {
    // {element id: its new inner HTML}, rendered (and escaped) by the server.
    var parts = JSON.parse(message.data);
    Object.keys(parts).forEach(function (id) {
      var element = document.getElementById(id);
      if (element) {
        element.innerHTML = parts[id];
      }
    });
  });
  source.addEventListener("end", function () {
    source.close();
    state.textContent = "finished";
    var actions = document.querySelector(".actions");  // a finished run takes none
    if (actions) {
      actions.remove();
    }
  });
  source.onerror = function () {
    state.textContent = "reconnecting…";
  };
  source.onopen = function () {
    state.textContent = "live";
  };
})();
