// The live history tail: append each server-rendered event the stream sends. The
// browser's EventSource reconnects by itself and sends Last-Event-ID (the last seq it
// saw), so the server resumes the history exactly where the page left off.
(function () {
  "use strict";
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
  source.addEventListener("end", function () {
    source.close();
    state.textContent = "finished: reload for the final state";
  });
  source.onerror = function () {
    state.textContent = "reconnecting…";
  };
  source.onopen = function () {
    state.textContent = "live";
  };
})();
