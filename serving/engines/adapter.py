"""The base every engine adapter builds on: the checks every config goes through (knobs.py),
the hand-run forms of a launch (scripts.py) and the contract with the behaviour it gives
(base.py). An adapter adds its knob table, its own rules, its launch and its parsers."""

from __future__ import annotations

from serving.engines.base import EngineAdapter
from serving.engines.knobs import CheckedAdapter
from serving.engines.scripts import PipInstallMixin, ScriptsMixin


class Adapter(CheckedAdapter, ScriptsMixin, EngineAdapter):
    """An engine adapter: checked configs, start script and systemd unit, install_steps."""


class PipAdapter(PipInstallMixin, Adapter):
    """An adapter for an engine pip installs from the package named like the engine."""
