"""The one `Retry-After` reader (RFC 9110 §10.2.3): delay-seconds are ASCII digits only, or an HTTP-date."""
import math
from datetime import timedelta

import pytest

from app.common import utcnow
from app.retry_after import parse_retry_after


@pytest.mark.parametrize("value, seconds", [
    ("0", 0.0),
    ("120", 120.0),
    ("007", 7.0),
    (" 30", 30.0),  # optional whitespace (SP, HTAB) around a field value is not part of it
    ("30 \t", 30.0),
    ("9" * 20, 1e20),
    ("9" * 400, math.inf),  # past what a float holds: a wait no caller can honour, left to its policy
])
def test_delay_seconds(value, seconds):
    assert parse_retry_after(value) == seconds


@pytest.mark.parametrize("value", [
    None, "", " ", "nan", "NaN", "inf", "-inf", "infinity", "-5", "+5", "1_000", "1e3", "1.5", "0x10",
    "1,000", "1 000", "5s", "5\n", "\u30005",  # an ideographic space is not optional whitespace
    "\u00b2", "\u0663", "\uff15",  # superscript two, Arabic-Indic three, fullwidth five
    "soon", "tomorrow", "Sun, 99 Foo 1994 08:49:37 GMT", "Fri, 31 Dec 99999 23:59:59 GMT",
])
def test_anything_else_is_unreadable(value):
    assert parse_retry_after(value) is None


def _http_date(moment) -> str:
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")


def test_an_http_date_ahead_is_the_time_left_until_it():
    assert parse_retry_after(_http_date(utcnow() + timedelta(seconds=600))) == pytest.approx(600, abs=2)


@pytest.mark.parametrize("value", [
    "Sun, 06 Nov 1994 08:49:37 GMT",  # IMF-fixdate
    "Sunday, 06-Nov-94 08:49:37 GMT",  # obsolete RFC 850 form
    "Sun Nov  6 08:49:37 1994",  # obsolete asctime form (no zone: GMT)
])
def test_an_http_date_in_the_past_means_now(value):
    assert parse_retry_after(value) == 0.0


def test_a_zoneless_asctime_date_is_gmt():
    moment = utcnow() + timedelta(seconds=600)
    asctime = moment.strftime("%a %b ") + f"{moment.day:2d}" + moment.strftime(" %H:%M:%S %Y")
    assert parse_retry_after(asctime) == pytest.approx(600, abs=2)
