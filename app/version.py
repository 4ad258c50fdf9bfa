"""The one version string: the installed package's (setup.cfg), also for an editable checkout."""
from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("entity-monitor")
except PackageNotFoundError:  # a checkout run without installing it
    VERSION = "0+unknown"
