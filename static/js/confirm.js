// In-page confirmations: no native confirm() anywhere.
// - htmx's hx-confirm="Question?" asks in the page's own dialog (the htmx:confirm event);
// - a plain form with data-confirm="Question?" asks the same way before it submits.
(function () {
  "use strict";
  function ask(question, onYes, danger) {
    var box = document.getElementById("confirm-dialog");
    if (!box || typeof box.showModal !== "function") { onYes(); return; }  // no dialog support: the server still checks
    box.querySelector(".confirm-question").textContent = question;
    var yes = box.querySelector(".confirm-yes");
    yes.className = "confirm-yes" + (danger ? " danger" : "");
    box.returnValue = "";
    box.onclose = function () { if (box.returnValue === "yes") { onYes(); } };
    box.showModal();
    box.querySelector(".confirm-no").focus();
  }
  document.addEventListener("htmx:confirm", function (event) {
    if (!event.detail || !event.detail.question) { return; }  // htmx fires it for every request
    event.preventDefault();
    var elt = event.detail.elt;
    ask(event.detail.question, function () { event.detail.issueRequest(true); },
        elt && elt.querySelector && elt.querySelector("button.danger"));
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm || form.dataset.confirmed === "yes") { return; }
    event.preventDefault();
    event.stopImmediatePropagation();
    ask(form.dataset.confirm, function () {
      form.dataset.confirmed = "yes";
      if (typeof form.requestSubmit === "function") { form.requestSubmit(); } else { form.submit(); }
      form.dataset.confirmed = "";
    }, form.querySelector("button.danger"));
  }, true);
})();
