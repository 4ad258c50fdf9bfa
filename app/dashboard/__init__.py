"""The team's dashboard: HTML pages at `/`, another thin HTTP layer over app/services.

A browser signs in with an API key once; from then on it holds only a server-side session's random token in
an HttpOnly, SameSite=Strict cookie. Every POST carries the session's CSRF token (the sign-in form a
double-submit one)."""
import hmac
import secrets
from datetime import timedelta
from urllib.parse import quote, unquote, urlsplit

from flask import (Blueprint, Response, abort, current_app, g, make_response, redirect, render_template,
                   request, stream_template, url_for)
from jinja2 import pass_context
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from app.api.errors import unexpected_error
from app.api.limits import spend_as_key
from app.common import isoformat, utcnow
from app.errors import ServiceError
from app.database import read_in_a_new_snapshot
from app.extensions import view_rate_class
from app.services import accounts, dashboard_sessions

SESSION_COOKIE = "em_session"
LOGIN_CSRF_COOKIE = "em_login_csrf"
PUBLIC_ENDPOINTS = ("dashboard.login", "dashboard.static")

bp = Blueprint("dashboard", __name__, template_folder="templates", static_folder="static",
               static_url_path="/assets")


@bp.before_request
def require_session():
    if request.method in ("GET", "HEAD") and request.endpoint not in PUBLIC_ENDPOINTS:  # one snapshot, as the API's
        read_in_a_new_snapshot()
    g.dashboard_session = dashboard_sessions.find(read_cookie(SESSION_COOKIE))
    if request.endpoint in PUBLIC_ENDPOINTS:
        return None
    if g.dashboard_session is None:  # a form: back to the page it was sent from, a list's view with it (its URL led
        # to page 1 of the whole list, where the selection of a bulk action kept for it was not)
        sent_from = request.method == "POST" and request.referrer and _page_sent_from()
        return redirect(url_for("dashboard.login", next=sent_from or _this_page()))
    if request.method == "POST" and not _same_token(request.form.get("csrf_token"), g.dashboard_session.csrf_token):
        if request.endpoint == "dashboard.logout" and _sent_from_this_origin():  # from a tab opened before a newer
            return None  # sign-in: it must still sign out, but no other origin of the site may (review)
        return _form_of_an_older_session()
    g.account = accounts.get_account(g.dashboard_session.account_id)
    rate_class = view_rate_class(current_app.view_functions.get(request.endpoint), request.method)
    if rate_class:  # as the API view doing the same would be: the key's limits are not escaped through here
        g.tier = g.account.tier
        spend_as_key(g.dashboard_session.api_key_id, rate_class)
    return None


def _form_of_an_older_session():
    """A form sent with a token this session never gave: its page was opened before the browser signed in again
    (another tab), or the token is missing. Nothing is done; the page keeps what the form had typed for its page
    (`data-keeps-form`, dashboard.js) and links back to it, from this site's Referer. It was a dead end: reloading
    sent the stale token again, and what was typed was lost (dashboard walk)."""
    message = ("This form's security token is not this session's (its page was opened before you last signed in, in "
               "another tab perhaps), so nothing changed. Open the page again: what you typed is back in it.")
    return _error_page_without_notice(403, message, back=_page_sent_from(),
                                      keeps_form="This page was opened before you last signed in, so nothing was done.")


def _page_sent_from() -> str:
    """The page of this site the form was sent from, by its Referer (its host is not compared: behind a proxy the app
    may see another)."""
    referrer = urlsplit(request.referrer or "")
    return safe_next(referrer.path + (f"?{referrer.query}" if referrer.query else ""))


def _sent_from_this_origin() -> bool:
    """The browser says the form came from a page of this origin (Fetch Metadata; `Origin` where it is not sent)."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("Origin")
    return origin is not None and urlsplit(origin).netloc == request.host


def page_for_a_browser(error):
    """The Not found (or Method not allowed) page for a browser's address outside the API that matches no route, with
    the pages' security headers and the 405's `Allow`, as the dashboard's own pages and the API's answer carry."""
    response = http_error(error)
    response.headers.update(SECURITY_HEADERS)
    if error.code == 405:
        response.headers["Allow"] = ", ".join(error.valid_methods or ())
    return response


# The pages load their one script and style sheet from here and post their forms here, nothing else: an injected
# script, style or form target is refused by the browser, and no other site may frame a page (clickjacking).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers without CSP 2
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # a link out (a profile) does not carry the page's filters to the network
}


@bp.after_request
def add_security_headers(response):
    response.headers.update(SECURITY_HEADERS)
    return response


@bp.before_app_request
def page_of_a_form_url():
    """A GET of a URL only a form posts to (a result page such as an import's or a new secret's, opened again or
    bookmarked): 303 to the nearest dashboard page above it, the one holding that form, not a 405 in JSON."""
    if request.method not in ("GET", "HEAD") or not isinstance(request.routing_exception, MethodNotAllowed):
        return None
    urls = current_app.url_map.bind_to_environ(request.environ)
    if not _dashboard_route(urls, request.path, "POST"):
        return None
    path = request.path
    while path != "/":
        path = path.rsplit("/", 1)[0] or "/"
        page = _dashboard_route(urls, path, "GET")
        if page:
            endpoint, arguments = page
            # built again (the path is decoded text), with the list view a subscription's form URL carries: dropped,
            # the page's form was not the one whose text was kept (its URL differs), so the text was lost
            return redirect(url_for(endpoint, **arguments, **views.opened_from()), 303)
    return None


def _dashboard_route(urls, path: str, method: str):
    """(endpoint, arguments) of the dashboard's route for this path and method; None for any other."""
    try:
        endpoint, arguments = urls.match(path, method=method)
    except HTTPException:
        return None
    return (endpoint, arguments) if endpoint.startswith(f"{bp.name}.") else None


def _cookie_name(name: str) -> str:
    """Over https a cookie's name has the `__Host-` prefix: a browser then takes it only from a secure answer that
    names no Domain, so a sibling subdomain cannot plant a session (of an account of its own) for this site
    (security walk). Plain http (development) cannot have it."""
    return f"__Host-{name}" if request.is_secure else name


def read_cookie(name: str):
    return request.cookies.get(_cookie_name(name))


def set_cookie(response, name: str, value: str, **options) -> None:
    response.set_cookie(_cookie_name(name), value, httponly=True, secure=request.is_secure, samesite="Strict",
                        **options)


def delete_cookie(response, name: str) -> None:
    """(A browser refuses a `__Host-` cookie without Secure, its removal too.)"""
    response.delete_cookie(_cookie_name(name), httponly=True, secure=request.is_secure, samesite="Strict")


def _same_token(sent, expected) -> bool:
    return bool(sent) and bool(expected) and hmac.compare_digest(sent.encode(), expected.encode())


def check_login_csrf():
    if not _same_token(request.form.get("csrf_token"), read_cookie(LOGIN_CSRF_COOKIE)):
        abort(403, "The sign-in form has expired. Reload the page and try again.")


def new_login_csrf() -> str:
    return secrets.token_urlsafe(32)


def safe_next(target) -> str:
    """Only a path of this site: `next` must never send a signed-in browser elsewhere (nor hold a control
    character, which no Location header may carry: a 500 at sign-in)."""
    target = target or ""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//") \
            or any(ord(character) < 0x20 or ord(character) == 0x7f for character in target):
        return url_for("dashboard.overview_page")
    return target


def account_id() -> str:
    return g.dashboard_session.account_id


def render(template, code=200, **context):
    """A page with the session's pending notice; never cached (pages can show a secret once). The notice is cleared
    once the page is rendered: the write ends the page's read transaction, and the rows the template reads would
    have been loaded again outside its snapshot, one query each (or failed, deleted in between)."""
    row = g.get("dashboard_session")
    notice = row.notice if row and dashboard_sessions.notice_is_for(row.notice, request.path) else None
    page = render_template(template, notice=notice, **context)
    if notice:
        dashboard_sessions.pop_notice(row)
    response = make_response(page, code)
    response.headers["Cache-Control"] = "no-store"
    return response


def stream(template, **context):
    """A page sent as it renders, so a long import shows its progress; never cached, and a proxy is asked
    not to buffer it."""
    response = Response(stream_template(template, notice=None, **context))
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def notify(kind: str, message: str, typed=None, form=None) -> None:
    """A notice for the page `back_to` sends the browser to next (with what a refused form had typed)."""
    g.notice = {"kind": kind, "message": message, "typed": typed, "form": form}


def back_to(endpoint, **values):
    """A redirect to a dashboard page, with the notice `notify` made for it: shown on that page alone. It went to
    whichever page of the session rendered next, another tab's or another subscription's, whose metadata editor
    then held the text typed for the first (dashboard walk)."""
    target = url_for(endpoint, **values)
    notice = g.pop("notice", None)
    if notice:
        dashboard_sessions.set_notice(g.dashboard_session, **notice, path=urlsplit(target).path)
    return redirect(target)


@bp.app_template_global()
@pass_context
def typed(context, name: str, default: str = "") -> str:
    """What the refused form had typed in its field `name` (the notice keeps it), shown again to be corrected."""
    notice = context.get("notice") or {}
    return (notice.get("typed") or {}).get(name, default)


@bp.app_template_global()
def csrf_token() -> str:
    return g.dashboard_session.csrf_token if g.get("dashboard_session") else ""


@bp.errorhandler(ServiceError)
def service_error(error):
    context = _too_many(error) if error.status == 429 else {"message": error.message}
    response = render("error.html", code=error.status, title=_title_for(error.status), **context)
    for name, value in (getattr(error, "headers", None) or {}).items():
        response.headers[name] = value
    return response


def _too_many(error) -> dict:
    """The 429 page, saying when to retry: "Retry later." alone left the team guessing, reloading pages that spent
    nothing back. A key's refused form keeps what it had typed, given back on its page opened again
    (`data-keeps-form`, dashboard.js), with when it can be sent: a pasted list, a new subscription or a webhook URL was
    lost, where a refusal of the form itself shows it again (dashboard walk)."""
    seconds = (error.details or {}).get("retry_after", 60)
    minutes = -(-seconds // 60)
    after = f"{minutes} minute{'' if minutes == 1 else 's'}"
    if request.endpoint == "dashboard.login" and not g.get("signing_in_key"):  # by address, not a key (walk)
        return {"message": f"Too many sign-ins without a valid key from this address. Try again in {after}."}
    again = f"{_minute_from(utcnow() + timedelta(seconds=seconds)):%H:%M} UTC"
    return {"message": f"{error.message} This key can be used again in {after}.",
            "back": _page_sent_from() if request.method == "POST" else _this_page(),
            "keeps_form": f"This key's rate limit was reached, so nothing was done: send it again from {again}.",
            # a page refused on its own: the form sent just before was done (its answer led here), so only a form
            # kept from an earlier refusal is passed on
            "keeps_only_refused": request.method != "POST"}


def _this_page() -> str:
    """This request's address as sent: `request.full_path` is the decoded path (`/events/evt_a%3Fb` as
    `/events/evt_a?b`, another address)."""
    query = request.query_string.decode(errors="replace")
    return quote(request.path) + (f"?{query}" if query else "")


def _minute_from(moment):
    """The first whole minute at or after `moment`: cut down to its minute, a form sent again then was refused again."""
    whole = moment.replace(second=0, microsecond=0)
    return whole if whole == moment else whole + timedelta(minutes=1)


@bp.errorhandler(HTTPException)
def http_error(error):
    message = _too_large() if error.code == 413 else error.description
    return render("error.html", code=error.code, title=_title_for(error.code), message=message)


@bp.errorhandler(Exception)
def unexpected_error_page(error):
    """An error no other handler knows, as a page (it was the API's JSON): the page is rendered without the session's
    notice, whose write would fail again when the database is what failed."""
    status, _code, message, headers = unexpected_error(error)
    return _error_page_without_notice(status, message, headers)


def _error_page_without_notice(status: int, message: str, headers=None, **context):
    """The error page, never cached, rendered without reading or clearing the session's notice (`render` does both),
    which belongs to the page it was made for."""
    page = render_template("error.html", notice=None, code=status, title=_title_for(status), message=message, **context)
    response = make_response(page, status)
    response.headers.update({"Cache-Control": "no-store", **(headers or {})})
    return response


def _too_large() -> str:
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    size = f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit:,} bytes"
    rows = round(limit / 58, -3)  # a CRM export's row with its URL: about 58 bytes
    return (f"This upload is over the {size} the dashboard takes (a CRM export of about {rows:,.0f} rows). Split the "
            "file, or import it whole from the command line: entity-monitor subscriptions import FILE --account "
            "ACCOUNT_ID.")


def _title_for(status) -> str:
    return {403: "Not allowed", 404: "Not found", 409: "Not possible now", 413: "Too large",
            429: "Too many attempts", 503: "Try again in a moment"}.get(status, "Something went wrong")


@bp.app_template_filter("when")
def when(moment):
    """A <time> the page's script shows in the browser's zone; the UTC value stays in its tooltip."""
    if moment is None:
        return Markup('<span class="muted">never</span>')
    stamp = isoformat(moment)
    return Markup(f'<time datetime="{stamp}" title="{stamp}">{moment:%Y-%m-%d %H:%M} UTC</time>')


@bp.app_template_filter("thousands")
def thousands(number):
    return "—" if number is None else f"{number:,}"


@bp.app_template_filter("readable")
def readable(network_id):
    """A stored id as people write it: its letters beyond ASCII, stored percent-encoded (`ren%c3%a9e`), shown as
    themselves (`renée`: dashboard walk)."""
    return unquote(network_id) if network_id else network_id


from app.dashboard import views  # noqa: E402 - registers the routes on `bp`
