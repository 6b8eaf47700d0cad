"""Shared helpers for engines' Prometheus /metrics text.

Parsing is done by prometheus_client's own parser
(`prometheus_client.parser.text_string_to_metric_families`), never by regexes. The
helpers here work on *samples* (the exposed names, e.g. `vllm:prompt_tokens_total`),
because the parser strips `_total` from counter *family* names. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Samples:
    """All samples of one scrape, indexed by sample name."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self._by_name: dict[str, list[Sample]] = defaultdict(list)
        for sample in samples:
            self._by_name[sample.name].append(sample)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def get(self, name: str) -> list[Sample]:
        return list(self._by_name.get(name, ()))

    def names(self) -> list[str]:
        return list(self._by_name)

    def first_present(self, *names: str) -> str | None:
        return next((n for n in names if n in self._by_name), None)

    def combined(
        self, name: str, *, how: str = "sum", group_label: str | None = None, dedupe_label: str | None = None
    ) -> float | None:
        """Combine the samples of `name` over label sets.

        `group_label` (e.g. vLLM's `engine`, SGLang's `dp_rank`) names the replicas whose
        values add up (`how="sum"`) or average (`how="mean"`). Within one group, samples
        that differ only by `dedupe_label` (SGLang's `tp_rank`: every tensor-parallel
        rank reports the same scheduler numbers) are collapsed by taking the maximum.
        Returns None when the engine does not expose `name` at all.
        """
        samples = self._by_name.get(name)
        if not samples:
            return None
        groups: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in samples:
            labels = dict(sample.labels)
            if dedupe_label:
                labels.pop(dedupe_label, None)
                labels.pop("pid", None)
            if group_label is None:
                key = tuple(sorted(labels.items()))
            else:
                key = ((group_label, labels.get(group_label, "")),)
            groups[key] = (
                max(groups.get(key, sample.value), sample.value)
                if dedupe_label
                else (groups.get(key, 0.0) + sample.value)
            )
        values = list(groups.values())
        if how == "mean":
            return sum(values) / len(values)
        if how == "max":
            return max(values)
        return sum(values)


def parse_samples(text: str) -> Samples:
    """Parse exposition text into samples (raise MetricsParseError on malformed text)."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, TypeError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}") from exc
    return Samples(
        Sample(name=s.name, labels=dict(s.labels), value=float(s.value)) for family in families for s in family.samples
    )


def raw_values(samples: Samples, prefix: str) -> dict[str, float]:
    """Engine samples (by `prefix`) summed over label sets, without histogram buckets,
    `_created` timestamps and per-label breakdowns' duplicates; for display and diffs."""
    out: dict[str, float] = {}
    for name in samples.names():
        if not name.startswith(prefix) or name.endswith(("_bucket", "_created")):
            continue
        value = samples.combined(name, how="sum")
        if value is not None:
            out[name] = value
    return out


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator/denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator
