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
  // a form's question, or the question of the button that sent it (one form holds pause, resume and cancel)
  document.querySelectorAll("form").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      var button = event.submitter && event.submitter.hasAttribute("data-confirm") ? event.submitter : null;
      var question = button ? button.getAttribute("data-confirm") : form.getAttribute("data-confirm");
      if (question && !window.confirm(question)) { event.preventDefault(); }
    });
  });
  document.querySelectorAll("form[data-progress]").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelector("progress").hidden = false;
      form.querySelector("button[type=submit]").disabled = true;
    });
  });
});
