// Copy buttons on a revision's exports page (templates/deployments/revision_exports.html):
// <button data-copy="ID"> copies the text of the element with that id. The Clipboard API where the
// browser offers it (https, or the panel on localhost); else the selection and execCommand("copy");
// if neither works the text is left selected, and the button says to press Ctrl+C.
// A static file, as the Content-Security-Policy allows no inline script or onclick.
(function () {
  "use strict";
  function say(button, text) {
    var label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    button.textContent = text;
    window.setTimeout(function () { button.textContent = label; }, 2000);
  }
  function select(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  function fallback(button, element) {
    select(element);
    var copied = false;
    try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
    say(button, copied ? "Copied" : "Selected: press Ctrl+C");
  }
  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element ? event.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var element = document.getElementById(button.dataset.copy);
    if (!element) { return; }
    var text = element.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { say(button, "Copied"); },
                                              function () { fallback(button, element); });
    } else {
      fallback(button, element);
    }
  });
})();
