"""Which Celery task on a host's queue carries out each kind of operation, by name (pure).

The panel sends by name (`app.send_task`, deployments.services.dispatch), so it never imports
the agent's code; the agent (hostagent.tasks) registers its tasks under these names. A
message carries only the operation's id: the agent asks the panel what the operation needs.
"""

from __future__ import annotations

OPERATION_TASKS: dict[str, str] = {
    "switch": "agent.switch",
    "launch": "agent.launch",  # a start of the active revision: carried out as a switch with nothing to roll back to
    "rollback": "agent.rollback",  # back to the previous revision (a benchmark gate's verdict): a switch to it
    "stop": "agent.stop",
    "probe": "agent.probe",
    "benchmark": "agent.benchmark",
    "install": "agent.install",
    "download": "agent.download",
    "model_delete": "agent.model_delete",
}

# The stage an install reports while it compiles, as "compiling: 42 % (step 3/3: ...)"; its progress
# is then the compile's share done, read from the build's own output (hostagent.install_progress),
# and the panel's operation page estimates the time left from it (deployments.selectors.installs).
COMPILING_STAGE = "compiling"
