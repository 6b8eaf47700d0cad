"""What a host agent does for an operation: the runtime (Supervisor) driven by a revision,
with progress and results written through services.

Runs inside the host's Celery worker. The runtime itself (hardware.runtime) never touches
the ORM; this package is the seam between the two.
"""

from .benchmark import run_benchmark, served_context
from .binaries import install_dir, installed_binary, resolve_binary
from .common import Reporter, engine_state, launch_spec_for, supervisor_for
from .engine import reconcile, run_stop, run_switch
from .install import run_install_operation

__all__ = [
    "Reporter",
    "engine_state",
    "install_dir",
    "installed_binary",
    "launch_spec_for",
    "reconcile",
    "resolve_binary",
    "run_benchmark",
    "run_install_operation",
    "run_stop",
    "run_switch",
    "served_context",
    "supervisor_for",
]
