"""Benchmark pages: start a run, watch it, results with plots, compare runs."""

from __future__ import annotations

urlpatterns: list = []
