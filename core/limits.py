"""Bounds every layer agrees on (pure: no Django, so the planner reads them too)."""

from __future__ import annotations

# The most GPUs one host holds (hardware refuses a larger declaration), and the most one plan
# considers, the largest TP x PP world it sizes. The planner judges one host's GPUs; the largest
# single NVLink domain sold (GB200 NVL72, 72 GPUs) and the largest multi-node vLLM worlds run in
# practice (TP 8 x PP 16) fit with room. Past it, every per-GPU loop the planner's rules run
# (layouts, valid TP sizes, pipeline stages) would grow without bound on a typed number, so a
# larger count is bad input, not a plan.
MAX_GPUS = 256
