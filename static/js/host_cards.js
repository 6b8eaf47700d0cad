// The dashboard's poll names the host cards (or table rows) the page shows, so the panel answers
// with only those that changed (deployments.views.dashboard.py): `have` is their fingerprints
// (data-v), `hosts` which hosts the list holds (data-hosts); without them the answer is every one.
// In the table view a click on a column heading sorts the rows by it (again: the other way);
// the order is kept for this tab and put back when the whole table is sent again.
(function () {
  "use strict";
  var SORT_KEY = "controlpanel.hosts.sort";

  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail.elt;
    if (!elt || elt.id !== "host-cards") { return; }
    var list = elt.querySelector("[data-hosts]");
    if (!list) { return; }
    var have = [];
    list.querySelectorAll("[data-v]").forEach(function (item) { have.push(item.dataset.v); });
    event.detail.parameters.hosts = list.dataset.hosts;
    event.detail.parameters.have = have.join(".");
  });

  function sortValue(row, column) {
    var cell = row.cells[column];
    var text = (cell ? (cell.dataset.sort || cell.textContent) : "").trim();
    return /^-?\d+(\.\d+)?$/.test(text) ? parseFloat(text) : text.toLowerCase();
  }

  function sortTable(saved) {
    var table = document.querySelector("#host-cards table.hosts-table");
    if (!table || !saved) { return; }
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.querySelectorAll("tr[data-host]"));
    rows.sort(function (a, b) {
      var x = sortValue(a, saved.column), y = sortValue(b, saved.column);
      var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
      return saved.descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    table.querySelectorAll("th[data-key]").forEach(function (th) {
      var on = Number(th.dataset.key) === saved.column;
      th.setAttribute("aria-sort", on ? (saved.descending ? "descending" : "ascending") : "none");
    });
  }

  function savedSort() {
    try { return JSON.parse(sessionStorage.getItem(SORT_KEY) || "null"); } catch (e) { return null; }
  }

  document.addEventListener("click", function (event) {
    var th = event.target.closest ? event.target.closest("#host-cards table.hosts-table th[data-key]") : null;
    if (!th) { return; }
    var column = Number(th.dataset.key);
    var current = savedSort();
    var saved = { column: column, descending: !!(current && current.column === column && !current.descending) };
    sessionStorage.setItem(SORT_KEY, JSON.stringify(saved));
    sortTable(saved);
  });

  // "Only hosts that need attention": hosts whose data-attention names a reason (the panel
  // decides it: HostCard.attention); the others are hidden by CSS, so a card or row swapped in
  // later shows or hides by itself. The count follows every swap.
  var ATTENTION_KEY = "controlpanel.hosts.attention";

  function showAttention() {
    var box = document.getElementById("attention-only");
    var list = document.getElementById("host-cards");
    if (!box || !list) { return; }
    list.classList.toggle("attention-only", box.checked);
    var count = document.getElementById("attention-count");
    if (count) { count.textContent = String(list.querySelectorAll("[data-v]:not([data-attention=''])").length); }
  }

  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "attention-only") {
      sessionStorage.setItem(ATTENTION_KEY, event.target.checked ? "1" : "");
      showAttention();
    }
  });

  document.addEventListener("htmx:afterSettle", showAttention);
  document.addEventListener("htmx:oobAfterSwap", showAttention);
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "host-cards") { sortTable(savedSort()); }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("attention-only");
    if (box) { box.checked = sessionStorage.getItem(ATTENTION_KEY) === "1"; }
    showAttention();
    sortTable(savedSort());
  });
})();
