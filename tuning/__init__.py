"""Tuning runs: a host's best settings found by measuring, proposed as a reviewed revision.

- `models.py`: TuningRun (the host, its base revision, the space, objective, limits, profile,
  budget, state) and TuningTrial (one candidate: its revision derived from the base, its state,
  figures per round, planned against measured memory, why the planner or a limit ruled it out).
- `services.py`: start (a change request first on a protected host), each step as an operation
  (switch with its preflight, health gate and rollback; benchmark), cancel, the sweep that
  resumes a run after a restart, and propose (a switch, or a change request where review is on).
- `selectors.py`: what the tuning page, the API and the CLI read.
- `receivers.py`: the run's next step when one of its operations ends.

The search itself is pure: serving/tuning/. docs/tuning.md is the manual.
"""
