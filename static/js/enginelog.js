// Engine logs follow as they grow: a log that was scrolled to its end stays at its end when
// htmx appends lines (templates/deployments/_engine_log_more.html); one scrolled up stays put.
(function () {
  "use strict";
  var atEnd = new WeakMap();
  function stuck(el) { return el.scrollHeight - el.scrollTop - el.clientHeight < 24; }
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = document.getElementById("engine-log-lines");
    if (target) { atEnd.set(target, stuck(target)); }
  });
  document.addEventListener("htmx:oobAfterSwap", function () {
    var target = document.getElementById("engine-log-lines");
    if (target && atEnd.get(target) !== false) { target.scrollTop = target.scrollHeight; }
  });
  document.addEventListener("htmx:load", function (event) {
    var el = event.detail && event.detail.elt;
    var log = el && el.querySelector ? el.querySelector("#engine-log-lines") : null;
    if (log) { log.scrollTop = log.scrollHeight; }
  });
})();
