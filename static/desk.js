// Keyboard for the desk: "/" focuses the search box, j and k move between the queue's rows (Enter opens one).
// No inline scripts anywhere: this file is the only script besides the vendored htmx.
(function () {
  "use strict";
  function typing(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "Escape" && typing(event.target)) { event.target.blur(); return; }
    if (typing(event.target)) return;
    if (event.key === "/") {
      var search = document.querySelector("[data-search]");
      if (search) { event.preventDefault(); search.focus(); search.select(); }
      return;
    }
    if (event.key !== "j" && event.key !== "k") return;
    var links = Array.prototype.slice.call(document.querySelectorAll("[data-row-link]"));
    if (!links.length) return;
    event.preventDefault();
    var at = links.indexOf(document.activeElement);
    var next = at === -1 ? 0 : at + (event.key === "j" ? 1 : -1);
    next = Math.max(0, Math.min(links.length - 1, next));
    links[next].focus();
    links[next].scrollIntoView({ block: "nearest" });
  });
  // The queue's collapsed filters say how many are active ("Filters (2 active)"): kept right as they change.
  document.addEventListener("change", function (event) {
    var form = event.target && event.target.closest ? event.target.closest("form.filters") : null;
    var count = form ? form.querySelector(".filter-count") : null;
    if (!count) return;
    var active = form.querySelectorAll(".filter-fields input[type=checkbox]:checked").length;
    ["ticket_class", "status"].forEach(function (name) {
      var field = form.elements[name];
      if (field && field.value) active += 1;
    });
    count.textContent = "(" + active + " active)";
  });
  // The ticket page's live poll is conditional: a 304 (or the browser cache's copy of an answer already
  // shown, the same ETag) leaves the news as they are, so a focused link or a scrolled list is not redrawn.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (!target || target.id !== "live") return;
    var xhr = event.detail.xhr;
    var tag = xhr.getResponseHeader("ETag");
    if (xhr.status === 304 || (tag && target.getAttribute("data-etag") === tag)) {
      event.detail.shouldSwap = false;
      return;
    }
    if (tag) target.setAttribute("data-etag", tag);
  });
})();
