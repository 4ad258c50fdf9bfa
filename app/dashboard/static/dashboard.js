// The dashboard's only script: local times, select-all, confirmations, a form's text kept across signing in again,
// a busy bar while an import's list is sent.
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
  // A form sent once the session had ended reached the sign-in page (or, sent from a page opened before the browser
  // signed in again, or once the key's rate limit was reached, a page refusing it), and what was typed was lost: a
  // form marked data-keep keeps its fields in this tab when sent; a page that did not do what it asked (marked
  // data-keeps-form, whose value says why) passes them on, given back to the same form (its action) of the same
  // account on the next page, and dropped on any other page (the form was answered). A page refused on its own
  // (data-keeps-only-refused: a GET the key's rate limit refused) passes on only a form refused before it: the form
  // sent just before it was done, its answer leading there. Never sent anywhere. Where the browser refuses this tab's
  // storage, nothing is kept and the rest of the script still runs.
  var account = document.body.getAttribute("data-account");
  var kept = takeKeptForm();
  var refusal = document.querySelector("[data-keeps-form]");
  if (kept && refusal && (kept.why || !refusal.hasAttribute("data-keeps-only-refused"))) {
    keepForm({action: kept.action, account: kept.account, fields: kept.fields, file: kept.file,
              why: refusal.getAttribute("data-keeps-form")});
  } else if (kept && kept.why && kept.account === account) {
    document.querySelectorAll("form[data-keep]").forEach(function (form) {
      if (actionOf(form) !== kept.action) { return; }
      Array.prototype.forEach.call(form.elements, function (field) {
        var key = fieldKey(field);
        if (key && key in kept.fields) { field[field.type === "checkbox" ? "checked" : "value"] = kept.fields[key]; }
      });
      var note = document.createElement("p");
      note.className = "notice error";
      note.setAttribute("role", "alert");
      // a chosen file no page may choose again: the note said all was back, and the form went without it
      note.textContent = kept.why + (kept.file ? " What you typed is back, but not the file you chose: choose it " +
                                     "again, then send." : " What you typed is back: send it again.");
      form.parentNode.insertBefore(note, form);
    });
  }
  document.querySelectorAll("form[data-keep]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (event.defaultPrevented) { return; }
      var fields = {};
      Array.prototype.forEach.call(form.elements, function (field) {
        var key = fieldKey(field);
        if (key) { fields[key] = field.type === "checkbox" ? field.checked : field.value; }
      });
      var file = Array.prototype.some.call(form.elements, function (field) {
        return field.type === "file" && field.files && field.files.length > 0;
      });
      keepForm({action: actionOf(form), account: account, fields: fields, file: file});
    });
  });
  document.querySelectorAll("form[data-progress]").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelector("progress").hidden = false;
      form.querySelector("button[type=submit]").disabled = true;
    });
  });
});

// A field's name in what is kept; a check box by its value too, one of several of a name (the webhook's events, the
// selected subscriptions). None for the CSRF token, which is the page's own, a file, which no script may set, and a
// button, which is no input: the bulk actions' three of one name would all have been given the last one's value.
function fieldKey(field) {
  if (!field.name || field.name === "csrf_token" || field.type === "file" || field.tagName === "BUTTON") {
    return null;
  }
  return field.type === "checkbox" ? field.name + "=" + field.value : field.name;
}

// A form's address: form.action is its field named action where it has one (the bulk actions' buttons)
function actionOf(form) {
  return new URL(form.getAttribute("action") || "", document.baseURI).href;
}

function takeKeptForm() {
  try {
    var text = window.sessionStorage.getItem("kept-form");
    window.sessionStorage.removeItem("kept-form");
    var kept = JSON.parse(text);
    return kept && typeof kept.fields === "object" && kept.fields ? kept : null;
  } catch (error) { return null; }  // storage refused, or not what this script wrote
}

function keepForm(kept) {
  try {
    window.sessionStorage.setItem("kept-form", JSON.stringify(kept));
  } catch (error) { /* refused, or too large: lost, as before */ }
}
