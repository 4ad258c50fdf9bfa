// The dashboard's only script: local times, select-all, confirmations, a busy bar while an import's list is sent.
document.addEventListener("DOMContentLoaded", function () {
  var format = new Intl.DateTimeFormat(undefined, {dateStyle: "medium", timeStyle: "short"});
  document.querySelectorAll("time[datetime]").forEach(function (node) {
    var moment = new Date(node.getAttribute("datetime"));
    if (!isNaN(moment)) { node.textContent = format.format(moment); node.title = node.getAttribute("datetime") + " (UTC)"; }
  });
  document.querySelectorAll("[data-select-all]").forEach(function (box) {
    box.addEventListener("change", function () {
      box.form.querySelectorAll("input[name=ids]").forEach(function (item) { item.checked = box.checked; });
    });
  });
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });
  document.querySelectorAll("form[data-progress]").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelector("progress").hidden = false;
      form.querySelector("button[type=submit]").disabled = true;
    });
  });
});
