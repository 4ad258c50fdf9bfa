"""Two scheduler processes share one rate budget and one set of concurrency slots: the vendor never sees more
calls in any window than its limit, nor more calls at once than the declared concurrency, and the work is
split between them. The processes run the scheduler's check step (`run_due`) against a fake Coresignal that
answers 429 above its limit."""
import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select

from app.common import utcnow
from app.extensions import db
from app.models import Subscription
from tests.fake_vendors import FakeCoresignal

CHILD = textwrap.dedent("""
    import json, sys
    from app import create_app
    from app.worker import checks
    app = create_app({"SQLALCHEMY_DATABASE_URI": sys.argv[1], "SCHEDULER_ENABLED": False, "TESTING": True,
                      "PROVIDER": "coresignal", "PROVIDER_CORESIGNAL_API_KEY": "test-key",
                      "PROVIDER_CORESIGNAL_URL": sys.argv[2], **json.loads(sys.argv[3])})
    with app.app_context():
        print(sum(summary.checked for summary in checks.run_due()))
""")


def run_two_checkers(app, alice, vendor, count, config):
    """Subscribe `count` people the vendor knows, make them due, run two checking processes with `config` until
    nothing is due, and return what each checked."""
    for number in range(count):
        vendor.person(f"p{number}")
        created = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"p{number}"})
        assert created.status_code == 201
    db.session.execute(Subscription.__table__.update().values(next_check_at=utcnow() - timedelta(minutes=1)))
    db.session.commit()
    root = Path(__file__).resolve().parents[1]
    children = [subprocess.Popen([sys.executable, "-c", CHILD, app.config["SQLALCHEMY_DATABASE_URI"], vendor.url,
                                  json.dumps(config)],
                                 cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    outputs = [child.communicate(timeout=120) for child in children]
    assert all(child.returncode == 0 for child in children), outputs
    checked = [int(out.strip().splitlines()[-1]) for out, _ in outputs]
    db.session.rollback()
    assert db.session.scalar(select(func.count()).where(Subscription.check_count == 1)) == count, (
        checked, sorted(set(vendor.statuses)), outputs)
    return checked, outputs


def test_two_processes_never_exceed_the_vendor_limit_together(app, alice):
    vendor = FakeCoresignal(limit=(20, 2.0))
    try:
        checked, outputs = run_two_checkers(app, alice, vendor, 60,
                                            {"CHECK_BATCH_SIZE": 5, "PROVIDER_RATE_LIMIT": "20 per 2 seconds"})
        # both took part
        assert sum(checked) == 60 and min(checked) > 0, (checked, sorted(set(vendor.statuses)), outputs)
        assert set(vendor.statuses) == {200}  # never throttled
        assert vendor.calls_per_window(2.0) <= 20
    finally:
        vendor.close()


def test_two_processes_never_have_more_calls_in_flight_than_the_declared_concurrency(app, alice):
    vendor = FakeCoresignal(delay=0.1)  # each answer takes a while, so calls overlap
    try:
        checked, outputs = run_two_checkers(app, alice, vendor, 30, {"CHECK_BATCH_SIZE": 6, "PROVIDER_CONCURRENCY": 2})
        assert sum(checked) == 30 and min(checked) > 0, (checked, outputs)  # both took part
        assert vendor.most_in_flight == 2  # each process has 2 workers: without shared slots, 4
        assert set(vendor.statuses) == {200}
    finally:
        vendor.close()
