"""The code keeps to setup.cfg's [flake8] settings (line length, unused imports, layout): checked with the suite, so a
change that breaks them fails CI like a failing test."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_code_passes_flake8():
    checked = subprocess.run([sys.executable, "-m", "flake8", "app", "tests", "scripts", "migrations", "wsgi.py"],
                             cwd=ROOT, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
