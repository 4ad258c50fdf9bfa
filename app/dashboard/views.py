"""The dashboard's pages. Each view reads or changes through app/services and renders a template; a
refused change comes back as a notice on the page it was made from."""
import json
import re
from datetime import timedelta
from urllib.parse import parse_qsl, urlencode

from flask import current_app, g, redirect, request, url_for

from app.api.http import load, parse_json_text
from app.api.limits import (bulk_limit, class_size, default_limit, limit_unauthenticated, read_limit,
                            spend_as_key, write_limit)
from app.common import utcnow
from app.dashboard import (LOGIN_CSRF_COOKIE, SESSION_COOKIE, account_id, back_to, bp, check_login_csrf,
                           delete_cookie, new_login_csrf, notify, read_cookie, render, safe_next, set_cookie, stream)
from app.dashboard.presenters import (change_rows, events_chart, import_results_href, import_steps, parse_body,
                                      refusal_in_form_words)
from app.errors import InvalidState, NotFound, ServiceError, Unauthorized, ValidationFailed, cut_echo
from app.schemas.account import ApiKeyCreateSchema
from app.schemas.base import MAX_OFFSET
from app.schemas.subscriptions import (BulkIdsSchema, BulkStatusSchema, MetadataPatchSchema, SubscriptionCreateSchema,
                                       SubscriptionListQuerySchema)
from app.schemas.webhooks import RecoverSchema, WebhookConfigureSchema, WebhookUpdateSchema
from app.services import (dashboard_sessions, events, importer, keys, outbox, overview, subscriptions,
                          webhooks)
from app.services.transport import transport_for

PAGE_SIZE = 50
IMPORT_ROWS_LISTED = 1_000  # past this row an import's page lists only the rows not created (its CSV has all)
create_schema = SubscriptionCreateSchema()
list_query_schema = SubscriptionListQuerySchema()
metadata_schema = MetadataPatchSchema()
bulk_ids_schema = BulkIdsSchema()
bulk_status_schema = BulkStatusSchema()
configure_schema = WebhookConfigureSchema()
update_schema = WebhookUpdateSchema()
recover_schema = RecoverSchema()
key_create_schema = ApiKeyCreateSchema()


def _page_number() -> int:
    """The `page` asked for; page 1 for what is not a whole number from 1 (`²`, which str.isdigit takes and int()
    does not, was a 500). A number past the last page any database can skip to (an offset past PostgreSQL's bigint was
    a 500), however many digits it has, is that page: past every list's end, told as any page past a list's last is,
    without its number (macros.past_the_end). It named that page, 42,949,673, and 11 digits showed page 1 (walk)."""
    value, furthest = request.args.get("page", "1"), MAX_OFFSET // PAGE_SIZE + 1
    digits = value.lstrip("0") if re.fullmatch(r"[0-9]+", value) else ""
    if len(digits) > len(str(furthest)):  # (not read as a number: int() refuses over 4,300 digits)
        return furthest
    return min(int(digits), furthest) if digits else 1


def _page_count(total: int) -> int:
    return max(1, -(-total // PAGE_SIZE))


SUBSCRIPTION_FILTERS = ("search", "status", "entity_type")
SUBSCRIPTIONS_VIEW = (*SUBSCRIPTION_FILTERS, "page")
DELIVERIES_VIEW = ("status", "page")


def _list_view(names, query=None) -> dict:
    """The filters, search and page of the list the form was sent from (its hidden `list_query`, macros.list_view),
    or of the list's `query` given, to come back to that view: a bulk action or a recovery came back to page 1 of the
    whole list (walk). Only the list's own `names` are read, and url_for writes them into the address again: it cannot
    lead off this site. A value holding NUL is left out: the list refuses it (400), and the way back led there."""
    shown = dict(parse_qsl(request.form.get("list_query", "") if query is None else query))
    return {name: shown[name] for name in names if shown.get(name) and "\x00" not in shown[name]}


def _attempt(change, endpoint, typed=None, form=None, **values):
    """Run a change, which returns what to tell on success; its refusal becomes an error notice (an id of
    another account stays the 404 page) with what the form had `typed`. Then back to the page it came from (at the
    `form` named, which shows the notice beside it, when given)."""
    try:
        notify("success", change(), form=form)
    except webhooks.ConfigurationMissing:  # a NotFound of this account's own, not of an id in the URL
        notify("error", NO_WEBHOOK_YET, form=form)
    except NotFound:
        raise
    except ServiceError as error:
        notify("error", _in_dashboard_words(error), typed, form)
    return back_to(endpoint, **values, **({"_anchor": form} if form else {}))


NO_WEBHOOK_YET = "Set up your webhook first (Webhook page): there is nowhere to send to yet."


def _in_dashboard_words(error: ServiceError) -> str:
    """The service's message, but where it tells an API client which call to make first, and with the fields it
    names as the forms label them (`custom_metadata.foo.value`: Metadata key 'foo')."""
    if isinstance(error, InvalidState) and (error.details or {}).get("is_active") is False:
        return "Deliveries are switched off: turn them on on the Webhook page first."
    if isinstance(error, webhooks.ConfigurationMissing):  # (its message names the API's call: walk)
        return NO_WEBHOOK_YET
    return refusal_in_form_words(error)


# --- signing in and out -------------------------------------------------------------------------

@bp.route("/login", methods=["GET", "POST"])
def login():
    if request.method == "GET":
        return _login_page(signed_out=request.args.get("signed_out") == "1")
    check_login_csrf()
    g.pop("signing_in_key", None)  # a caller's app context (a test's) keeps `g` across requests: not an earlier key's
    try:
        key, g.tier = keys.authenticate(request.form.get("api_key", "").strip())
    except Unauthorized as error:
        limit_unauthenticated()  # the same per-address budget as API calls without a valid key
        message = "Paste an API key to sign in." if error.message == keys.MISSING_MESSAGE else error.message
        return _login_page(error=message, status=401)
    # a request of the key's, as its pages are: a sign-in spent nothing, so a key signed in without end, each time a
    # session row kept 12 hours (300 in a row took 300 rows past the 100 requests of starter's default class)
    g.signing_in_key = key.id
    spend_as_key(key.id, "default")
    token, _row = dashboard_sessions.open_session(key)
    response = redirect(safe_next(request.args.get("next")))
    set_cookie(response, SESSION_COOKIE, token, max_age=int(dashboard_sessions.LIFETIME.total_seconds()))
    delete_cookie(response, LOGIN_CSRF_COOKIE)
    return response


def _login_page(status=200, **context):
    token = new_login_csrf()
    response = render("login.html", code=status, login_csrf=token, **context)
    set_cookie(response, LOGIN_CSRF_COOKIE, token)
    return response


@bp.post("/logout")
def logout():
    dashboard_sessions.close(read_cookie(SESSION_COOKIE))
    response = back_to("dashboard.login", signed_out="1")
    delete_cookie(response, SESSION_COOKIE)
    return response


# --- overview -----------------------------------------------------------------------------------

@bp.get("/")
@default_limit
def overview_page():
    summary = overview.summary(g.account)
    return render("overview.html", summary=summary, chart=events_chart(summary["events_per_day"]))


# --- subscriptions ------------------------------------------------------------------------------

@bp.get("/subscriptions")
@read_limit
def subscriptions_page():
    filters = {name: request.args[name] for name in SUBSCRIPTION_FILTERS if request.args.get(name)}
    page_number = _page_number()
    try:
        query = load(list_query_schema, {**filters, "limit": str(PAGE_SIZE),
                                         "offset": str((page_number - 1) * PAGE_SIZE)})
    except ServiceError as error:
        notify("error", _in_dashboard_words(error))
        return back_to("dashboard.subscriptions_page")
    rows, total = subscriptions.list_page(account_id(), **query)
    return render("subscriptions.html", rows=rows, total=total, filters=filters, page=page_number,
                  pages=_page_count(total), opened_from=opened_from(urlencode(list(request.args.items(multi=True)))))


@bp.post("/subscriptions")
@write_limit
def add_subscription():
    """One profile by URL (or by id with its type), read like one row of an import."""
    row = {"url": request.form.get("url", "").strip(), "entity_type": request.form.get("entity_type", "")}
    try:
        try:
            item = importer.item_for_row(row, importer.Plan("url", "entity_type"))
        except ValidationFailed as error:  # told in this form's words, not an import's cells and columns
            raise ValidationFailed(error.field, ADD_ONE_WORDS.get(error.field, error.message)) from error
        subscription = subscriptions.create(account_id(), load(create_schema, item))
    except ServiceError as error:
        notify("error", _in_dashboard_words(error), typed=row)
        return _back_to_the_list()
    notify("success", f"Subscribed to {row['url']}.")
    return back_to("dashboard.subscription_page", subscription_id=subscription.id,
                   **opened_from(request.form.get("list_query", "")))


ADD_ONE_WORDS = {"url": "Enter a profile URL, or an id with its type.",
                 "entity_type": "An id alone needs its type: choose contact or company under Type."}


@bp.post("/subscriptions/bulk")
@bulk_limit
def bulk_action():
    ids, action = request.form.getlist("ids"), request.form.get("action")
    if not ids or action not in ("pause", "resume", "cancel"):
        notify("error", "Select at least one subscription, then pause, resume or cancel.")
        return _back_to_the_list()
    try:
        if action == "cancel":
            body = load(bulk_ids_schema, {"subscription_ids": ids})
            done, errors = subscriptions.bulk_cancel(account_id(), body["subscription_ids"])
        else:
            body = load(bulk_status_schema, {"subscription_ids": ids,
                                             "status": "paused" if action == "pause" else "active"})
            done, errors = subscriptions.bulk_set_status(account_id(), body["subscription_ids"], body["status"])
    except ServiceError as error:
        notify("error", _in_dashboard_words(error))
        return _back_to_the_list()
    problems = "; ".join(error["error"] for error in errors)
    notify("error" if errors else "success", f"{action.capitalize()}: {len(done):,} done. {problems}".strip())
    return _back_to_the_list()


def _back_to_the_list():
    """The Subscriptions page at the view (search, filters, page) its form was sent from: the bulk actions, a refused
    add and a refused import came back to page 1 of the whole list (walk)."""
    return back_to("dashboard.subscriptions_page", **_list_view(SUBSCRIPTIONS_VIEW))


@bp.post("/subscriptions/import")
@bulk_limit
def import_subscriptions():
    """The result page streams: each chunk's rows and the progress show as soon as the chunk is done."""
    upload = request.files.get("file")
    chosen = bool(upload and upload.filename)
    pasted = {"rows": request.form.get("rows", "")}  # shown again with a refusal (up to TYPED_KEPT_CHARACTERS)
    if chosen and pasted["rows"].strip():  # the pasted rows were ignored
        notify("error", "Paste a list or choose a file, not both: import them one after the other.", typed=pasted)
        return _back_to_the_list()
    try:
        if chosen:
            header, rows, form = importer.rows_of_upload(upload.read())
        else:
            header, rows, form = importer.rows_from_text(pasted["rows"])
        plan = importer.Plan.for_header(header)
    except ServiceError as error:
        notify("error", error.message, typed=pasted)
        return _back_to_the_list()
    calls, allowed = -(-len(rows) // importer.CHUNK_SIZE), class_size("bulk")
    if calls > allowed and current_app.config.get("RATELIMIT_ENABLED", True):  # no window would ever have room for it
        notify("error", f"{len(rows):,} rows take {calls:,} bulk calls, and this key may make {allowed:,} in "
                        f"{current_app.config['RATELIMIT_WINDOW_SECONDS'] / 60:g} minutes: import at most "
                        f"{allowed * importer.CHUNK_SIZE:,} rows at a time here, or the whole file with "
                        "entity-monitor subscriptions import.", typed=pasted)
        return _back_to_the_list()
    if calls > 1:  # one bulk call of the key's a chunk, as the same rows sent through the API would take
        spend_as_key(g.dashboard_session.api_key_id, "bulk", cost=calls - 1)  # (the first was spent coming in)
    report = importer.ImportReport(total=len(rows))
    chunks = importer.import_chunks(account_id(), rows, plan, lambda raw: load(create_schema, raw), report)
    return stream("import_result.html", report=report, steps=import_steps(chunks, IMPORT_ROWS_LISTED),
                  listed=IMPORT_ROWS_LISTED, results_href=lambda: import_results_href(header, report, form),
                  list_href=url_for("dashboard.subscriptions_page", **_list_view(SUBSCRIPTIONS_VIEW)))


@bp.get("/subscriptions/<dashboard_subscription:subscription_id>")
@read_limit
def subscription_page(subscription_id):
    """Its state, metadata and timeline, paged as the other lists (`?page=`, newest first): it stopped at the newest
    50 events, the older ones out of reach (walk)."""
    subscription = subscriptions.get(account_id(), subscription_id)
    page_number = _page_number()
    rows, total = events.list_page(account_id(), PAGE_SIZE, (page_number - 1) * PAGE_SIZE,
                                   subscription_id=subscription.id)
    timeline = [{"event": row, "changes": change_rows(parse_body(row))} for row in rows]
    return render("subscription.html", subscription=subscription, timeline=timeline, total=total, page=page_number,
                  pages=_page_count(total), opened_from=opened_from(),
                  list_href=url_for("dashboard.subscriptions_page", **_list_view(SUBSCRIPTIONS_VIEW, _list_arg())),
                  metadata=json.dumps(subscription.custom_metadata or {}, indent=2, ensure_ascii=False))


def opened_from(query=None) -> dict:
    """The list view a subscription's page was opened from (its `list`: the list's query, or `query`), kept by its
    links and forms for its *← Subscriptions*, which led to page 1 of the whole list (walk). Only the view's own search,
    filters and page: anything else of the list's address, or a crafted `list`, was carried whole into every link."""
    view = _list_view(SUBSCRIPTIONS_VIEW, _list_arg() if query is None else query)
    return {"list": urlencode(view)} if view else {}


def _list_arg() -> str:
    return request.args.get("list", "")


@bp.post("/subscriptions/<dashboard_subscription:subscription_id>/<any(pause, resume, cancel):action>")
@write_limit
def change_subscription(subscription_id, action):
    def change():
        if action == "cancel":
            subscriptions.cancel(account_id(), subscription_id)
        else:
            subscriptions.set_status(account_id(), subscription_id, "paused" if action == "pause" else "active")
        return {"pause": "Paused.", "resume": "Resumed.", "cancel": "Cancelled."}[action]
    return _attempt(change, "dashboard.subscription_page", subscription_id=subscription_id, **opened_from())


@bp.post("/subscriptions/<dashboard_subscription:subscription_id>/metadata")
@write_limit
def edit_metadata(subscription_id):
    typed = request.form.get("custom_metadata", "")

    def change():
        try:
            value = parse_json_text(typed.strip() or "{}")  # an empty or blank box clears it
        except ValueError:
            raise ValidationFailed("custom_metadata",
                                   'Custom metadata must be a JSON object, e.g. {"owner": "sam"}.')
        body = load(metadata_schema, {"custom_metadata": value})
        subscriptions.update_metadata(account_id(), subscription_id, body["custom_metadata"], _shown_metadata())
        return "Custom metadata saved."
    return _attempt(change, "dashboard.subscription_page", typed={"custom_metadata": typed},
                    subscription_id=subscription_id, **opened_from())


def _shown_metadata():
    """The object the editor was opened with (its page's hidden copy); None when the form sent none."""
    try:
        shown = parse_json_text(request.form["shown_metadata"])
    except (KeyError, ValueError, ServiceError):
        return None
    return shown if isinstance(shown, dict) else None


# --- events and deliveries ----------------------------------------------------------------------

@bp.get("/events")
@default_limit
def events_page():
    refused = _unknown_filter({"type": events.EVENT_TYPES, "status": events.DELIVERY_STATUSES})
    if refused:
        notify("error", refused)
        return back_to("dashboard.events_page")
    event_type, status = request.args.get("type") or None, request.args.get("status") or None
    page_number = _page_number()
    rows, total = events.list_page(account_id(), PAGE_SIZE, (page_number - 1) * PAGE_SIZE, event_type,
                                   delivery_status=status)
    entities = subscriptions.network_ids(account_id(), (row.subscription_id for row in rows))
    return render("events.html", rows=rows, total=total, page=page_number, pages=_page_count(total), entities=entities,
                  event_type=event_type, status=status, event_types=events.EVENT_TYPES,
                  statuses=events.DELIVERY_STATUSES)


def _unknown_filter(allowed: dict):
    """Why a filter of the query is refused (a value it does not know), or None. Ignored, it showed the whole list
    under the filter's name, which the API refuses with a 400 (walk)."""
    for name, values in allowed.items():
        value = request.args.get(name)
        if value and value not in values:
            return f"Unknown {name} '{cut_echo(value)}': choose one of {', '.join(values)}."
    return None


@bp.get("/events/<event_id>")
@default_limit
def event_page(event_id):
    event = events.get(account_id(), event_id)
    return render("event.html", event=event, payload=event.body, attempts=events.attempts_of(event.id))


@bp.post("/events/<event_id>/redeliver")
@default_limit
def redeliver(event_id):
    def change():
        outbox.redeliver(account_id(), event_id)
        return "Queued for delivery: the attempt appears below within a few seconds."
    return _attempt(change, "dashboard.event_page", event_id=event_id)


@bp.get("/deliveries")
@default_limit
def deliveries_page():
    refused = _unknown_filter({"status": ("succeeded", "failed")})
    if refused:
        notify("error", refused)
        return back_to("dashboard.deliveries_page")
    status = request.args.get("status") or None
    page_number = _page_number()
    rows, total = outbox.attempts_page(account_id(), PAGE_SIZE, (page_number - 1) * PAGE_SIZE, status=status)
    return render("deliveries.html", rows=rows, total=total, page=page_number, status=status,
                  pages=_page_count(total))


@bp.post("/deliveries/recover")
@default_limit
def recover():
    def change():
        # a form sends text: Unix seconds come as digits, which the API takes as a JSON number
        form = {name: int(value) if re.fullmatch(r"[0-9]{1,12}", value) else value
                for name, value in ((name, request.form.get(name, "")) for name in ("since", "until")) if value}
        body = load(recover_schema, {**form, "include_pending": request.form.get("include_pending") == "on"})
        queued = outbox.recover(account_id(), body["since"], body.get("until"), body["include_pending"])["queued"]
        days = current_app.config["WEBHOOK_RECOVER_MAX_DAYS"]
        clamped = body["since"] < utcnow() - timedelta(days=days)  # (said: the window was cut silently, walk)
        return f"{queued:,} events queued for delivery" + (f" (from {days} days ago: no further back)." if clamped
                                                           else ".")
    typed = {name: request.form.get(name, "") for name in ("since", "until")}  # refused, shown again (walk: emptied)
    typed["include_pending"] = "on" if request.form.get("include_pending") == "on" else ""
    return _attempt(change, "dashboard.deliveries_page", typed=typed, form="recover", **_list_view(DELIVERIES_VIEW))


# --- webhook settings ---------------------------------------------------------------------------

def _webhook_page(status=200, **context):
    return render("webhook.html", code=status, config=webhooks.get_or_none(account_id()),
                  event_types=events.EVENT_TYPES, families=webhooks.EVENT_FAMILIES,
                  choices=webhooks.INITIAL_WEBHOOK_CHOICES, rotation_mark=webhooks.rotation_mark,
                  test_mark=outbox.test_mark, **context)


@bp.get("/webhook")
@default_limit
def webhook_page():
    return _webhook_page()


@bp.post("/webhook")
@default_limit
def save_webhook():
    form = {"endpoint_url": request.form.get("endpoint_url", "").strip(),
            "events": request.form.getlist("events"),
            "initial_webhook": request.form.get("initial_webhook", "latest"),
            "is_active": request.form.get("is_active") == "on"}
    config = webhooks.get_or_none(account_id())
    if not form["events"] and config is not None and not form["is_active"]:
        form["events"] = config.events  # deliveries off: the events are kept for when they are on again
    try:
        if not form["events"]:  # read as every event, it sent everything to who cleared the boxes to send less
            raise ValidationFailed("events", "Choose the events to send (all, a family or single types); to send "
                                             "none, turn deliveries off.")
        if config is None:
            config, _created = webhooks.configure(account_id(), load(configure_schema, {
                name: value for name, value in form.items() if name != "is_active"}))
            return _webhook_page(secret=config.secret, status=201)
        webhooks.update_config(account_id(), load(update_schema, form))
    except ServiceError as error:
        return _webhook_page(error=_in_dashboard_words(error), form=form, status=error.status)
    notify("success", "Webhook settings saved.")
    return back_to("dashboard.webhook_page")


@bp.post("/webhook/test")
@default_limit
def send_test():
    try:
        result = outbox.send_test(account_id(), transport_for(current_app._get_current_object()),
                                  request.form.get("newest_test"))
    except ServiceError as error:
        return _webhook_page(error=_in_dashboard_words(error), status=error.status)
    if result is None:  # this form sent again (a reload of its result): it sent a second test event (walk)
        notify("error", "A test event was sent since this form was shown (was the page reloaded?); no other was sent. "
                        "Its answer is under Events (type test). Send test again below if you need another.")
        return back_to("dashboard.webhook_page")
    return _webhook_page(test_result=result)


@bp.post("/webhook/rotate")
@default_limit
def rotate_secret():
    try:
        rotated = webhooks.rotate_secret(account_id(), request.form.get("rotated_at"))
    except ServiceError as error:
        return _webhook_page(error=_in_dashboard_words(error), status=error.status)
    if rotated is None:  # this form sent again: a second rotation would end the old secret's overlap
        notify("error", "The secret was rotated since this form was shown (was the page reloaded?); nothing changed. "
                        "Its new secret was shown once then. Rotate again below only if you need another one.")
        return back_to("dashboard.webhook_page")
    return _webhook_page(secret=rotated["secret"], rotated=True)


# --- API keys -----------------------------------------------------------------------------------

def _keys_page(status=200, **context):
    return render("keys.html", code=status, keys=keys.list_keys(account_id()),
                  current_key_id=g.dashboard_session.api_key_id, **context)


@bp.get("/keys")
@default_limit
def keys_page():
    return _keys_page()


@bp.post("/keys")
@default_limit
def create_key():
    shown_newest, name = request.form.get("newest_key"), request.form.get("name", "").strip()
    listed = keys.list_keys(account_id())
    if shown_newest is not None and name in {key.name for key in _made_since(listed, shown_newest)}:
        # the form sent again (a reload of the new key's page re-posts it): a second key nobody asked for (walk). A
        # key of another name made meanwhile is someone else's: this one is made too (dashboard walk)
        return _keys_page(error="A key of this name was created since this form was shown (was the page reloaded?); "
                                "no other was created. Its value was shown once then. Create another below if you "
                                "need one.", typed_name=name, status=409)
    try:
        body = load(key_create_schema, {"name": name})
        key, plaintext = keys.create_key(account_id(), body["name"])
    except ServiceError as error:
        return _keys_page(error=_in_dashboard_words(error), typed_name=name, status=error.status)
    return _keys_page(created=key, plaintext=plaintext, status=201)


def _made_since(listed: list, shown_newest: str) -> list:
    """The keys made since the form was shown, when its newest was `shown_newest` ("" for none; one revoked since:
    every key, to be safe)."""
    ids = [key.id for key in listed]
    return listed[ids.index(shown_newest) + 1:] if shown_newest in ids else listed


@bp.post("/keys/<key_id>/revoke")
@default_limit
def revoke_key(key_id):
    def change():
        keys.delete_key(account_id(), key_id)
        return "Key revoked."
    try:
        return _attempt(change, "dashboard.keys_page")
    except NotFound:  # revoked meanwhile (another tab), or another account's: the same page, telling nothing more
        return render("error.html", code=404, title="Not found", back=url_for("dashboard.keys_page"),
                      back_label="Back to the API keys", message="That key is not there: it was revoked already (in "
                      "another tab, perhaps), or it is not this account's. Nothing changed.")
