// The dashboard's poll names the host cards the page shows, so the panel answers with only the
// cards that changed (deployments/views/host_cards.py): `have` is their fingerprints (data-v),
// `hosts` which hosts the list holds (data-hosts); without them the answer is every card.
(function () {
  "use strict";
  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || elt.id !== "host-cards") { return; }
    var list = elt.querySelector(".cards[data-hosts]");
    if (!list) { return; }
    var have = [];
    list.querySelectorAll("article[data-v]").forEach(function (card) { have.push(card.dataset.v); });
    event.detail.parameters.hosts = list.dataset.hosts;
    event.detail.parameters.have = have.join(".");
  });
})();
