"""Two scheduler processes share one rate budget: the vendor never sees more calls in any window than
its limit, and the work is split between them. The processes run the scheduler's check step
(`run_due`) against a fake Coresignal that answers 429 above the limit."""
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select, update

from app.common import utcnow
from app.extensions import db
from app.models import Subscription
from tests.fake_vendors import FakeCoresignal

CHILD = textwrap.dedent("""
    import sys
    from app import create_app
    from app.worker import checks
    app = create_app({"SQLALCHEMY_DATABASE_URI": sys.argv[1], "SCHEDULER_ENABLED": False, "TESTING": True,
                      "CHECK_BATCH_SIZE": 5, "PROVIDER": "coresignal", "PROVIDER_CORESIGNAL_API_KEY": "test-key",
                      "PROVIDER_CORESIGNAL_URL": sys.argv[2], "PROVIDER_RATE_LIMIT": "20 per 2 seconds"})
    with app.app_context():
        print(sum(summary.checked for summary in checks.run_due()))
""")


def test_two_processes_never_exceed_the_vendor_limit_together(app, alice):
    vendor = FakeCoresignal(limit=(20, 2.0))
    try:
        ids = []
        for number in range(60):
            vendor.person(f"p{number}")
            response = alice.post("/subscriptions", json={"entity_type": "contact", "network_id": f"p{number}"})
            ids.append(response.json["id"])
        db.session.execute(update(Subscription).values(next_check_at=utcnow() - timedelta(minutes=1)))
        db.session.commit()
        root = Path(__file__).resolve().parents[1]
        children = [subprocess.Popen([sys.executable, "-c", CHILD, app.config["SQLALCHEMY_DATABASE_URI"], vendor.url],
                                     cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for _ in range(2)]
        outputs = [child.communicate(timeout=120) for child in children]
        assert all(child.returncode == 0 for child in children), outputs
        checked = [int(out.strip().splitlines()[-1]) for out, _ in outputs]
        assert sum(checked) == 60 and min(checked) > 0, (checked, sorted(set(vendor.statuses)), outputs)  # both took part
        assert set(vendor.statuses) == {200}  # never throttled
        assert vendor.calls_per_window(2.0) <= 20
        db.session.rollback()
        assert db.session.scalar(select(func.count()).where(Subscription.check_count == 1)) == 60
    finally:
        vendor.close()
