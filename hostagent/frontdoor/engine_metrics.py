"""The loaded engines' own `/metrics` (llama.cpp's `llamacpp:*`, vLLM's `vllm:*`, ...), on the
front door's `GET /metrics` with `host`, `model` and `alias` labels (docs/front-door.md#metrics).

Only engines already loaded are asked, all at once, each with a short deadline (SCRAPE_TIMEOUT_S):
nothing is loaded or woken for a scrape and no request slot is taken (the engine's `/metrics` is
not an inference request). An engine that is slow, refuses, answers an error or something that is
not Prometheus text has its series left out of that scrape; `frontdoor_engine_scrape_up` says 0 for
it and `frontdoor_engine_scrape_failures_total` counts why.

The engine's text is relabelled line by line, never re-rendered, so its names, types and help stay
exactly as the engine wrote them (a Prometheus scraping the engine itself would store the same):
each family's lines from every engine are gathered under one HELP and TYPE, and every sample gains
`host` (the host's name in the panel), `model` (the served model: `<served name>-r<number>`) and
`alias` (its aliases joined by ","; the model's name when it has none). An engine label of the same
name is kept as `exported_<name>`, as Prometheus itself does. Pure text work: no prometheus_client.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from .metrics import Metrics
from .table import ServedModel

__all__ = ["SCRAPE_TIMEOUT_S", "EngineScraper", "ScrapeError", "relabel"]

SCRAPE_TIMEOUT_S = 2.0  # one engine's whole answer; the engines are asked side by side
MAX_BYTES = 8 << 20  # an engine's /metrics text beyond this is left out (reason "too_large")
OFF_STATUSES = (404, 501)  # no /metrics: llama-server without --metrics answers 501
OWN_PREFIX = "frontdoor_"  # the door's own families; an engine's of that name is left out
DOOR_LABELS = ("host", "model", "alias")
SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count", "_info", "_gsum", "_gcount")

_SAMPLE = re.compile(
    r"([a-zA-Z_:][a-zA-Z0-9_:]*)"  # name
    r"(?:\{((?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?"  # {labels}, quoted values may hold } and ,
    r"[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*"  # value, and a timestamp (dropped: the door's scrape is now)
)
_LABEL = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*(\"(?:[^\"\\]|\\.)*\")\s*(,|$)")


class ScrapeError(ValueError):
    """An engine's answer that is not Prometheus text; `reason` is the failure counter's label."""

    def __init__(self, message: str, reason: str = "parse") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _Family:
    help: str | None = None
    type: str | None = None
    lines: list[str] = field(default_factory=list)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") + '"'


def _labels(block: str, own: str) -> str:
    """The engine's label block with the door's labels first; an engine label the door sets is
    renamed `exported_<name>`."""
    if not block.strip():
        return own
    pairs: list[str] = []
    at = 0
    while at < len(block):
        match = _LABEL.match(block, at)
        if match is None:
            if block[at:].strip():
                raise ScrapeError(f"bad labels {{{block[:80]}}}")
            break
        name = match.group(1)
        pairs.append(f"{'exported_' + name if name in DOOR_LABELS else name}={match.group(2)}")
        at = match.end()
    return own + "," + ",".join(pairs) if pairs else own


def _family_of(name: str, current: str | None) -> str:
    if current is not None and (name == current or (name.startswith(current) and name[len(current) :] in SUFFIXES)):
        return current
    return name


def relabel(text: str, labels: dict[str, str], families: dict[str, _Family]) -> None:
    """Add `text`'s samples to `families` (by family name, in order of first sight), each with
    `labels` first. Raises ScrapeError, leaving `families` as it was, when a line is not
    Prometheus text."""
    own = ",".join(f"{name}={_quote(value)}" for name, value in labels.items())
    found: dict[str, _Family] = {}
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                current = parts[2]
                family = found.setdefault(current, _Family())
                rest = parts[3] if len(parts) == 4 else ""
                if parts[1] == "HELP":
                    family.help = rest
                else:
                    family.type = rest.strip()
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ScrapeError(f"not a sample: {line[:80]!r}")
        name, block, value = match.groups()
        try:
            float(value)
        except ValueError:
            raise ScrapeError(f"not a number: {value[:40]!r}") from None
        current = _family_of(name, current)
        found.setdefault(current, _Family()).lines.append(f"{name}{{{_labels(block or '', own)}}} {value}")
    for name, got in found.items():
        if name.startswith(OWN_PREFIX) or not got.lines:
            continue
        family = families.setdefault(name, _Family(help=got.help, type=got.type))
        family.lines.extend(got.lines)


def render(families: dict[str, _Family]) -> bytes:
    out: list[str] = []
    for name, family in families.items():
        if family.help is not None:
            out.append(f"# HELP {name} {family.help}")
        if family.type is not None:
            out.append(f"# TYPE {name} {family.type}")
        out.extend(family.lines)
    return ("\n".join(out) + "\n").encode() if out else b""


class EngineScraper:
    """Asks the loaded engines for their `/metrics`; `open()` before, `close()` after."""

    def __init__(self, metrics: Metrics, host: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
        self.metrics = metrics
        self.host = host
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def scrape(self, models: Sequence[ServedModel]) -> bytes:
        """The engines' series of `models` (the loaded ones), relabelled and merged: b"" for none."""
        self.metrics.engine_up.clear()
        self.metrics.engine_scrape_seconds.clear()
        texts = await asyncio.gather(*(self._one(model) for model in models))
        families: dict[str, _Family] = {}
        for model, text in zip(models, texts, strict=True):
            up = 0
            if text is not None:
                try:
                    relabel(text, self.labels(model), families)
                    up = 1
                except ScrapeError as bad:
                    self.metrics.engine_scrape_failures.labels(model.name, bad.reason).inc()
            self.metrics.engine_up.labels(model.name).set(up)
        return render(families)

    def labels(self, model: ServedModel) -> dict[str, str]:
        return {"host": self.host, "model": model.name, "alias": ",".join(model.aliases) or model.name}

    async def _one(self, model: ServedModel) -> str | None:
        """The engine's text, or None (counted) when it did not give it in time."""
        assert self._session is not None, "EngineScraper.open() first"
        headers = {"Accept": "text/plain"}
        if model.api_key:
            headers["Authorization"] = f"Bearer {model.api_key}"  # llama-server's --api-key guards /metrics
        started = time.monotonic()
        reason = None
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with self._session.get(model.url("/metrics"), headers=headers, timeout=timeout) as answer:
                if answer.status in OFF_STATUSES:
                    reason = "off"
                elif answer.status != 200:
                    reason = "status"
                else:
                    body = bytearray()
                    async for chunk in answer.content.iter_any():
                        body += chunk
                        if len(body) > MAX_BYTES:
                            reason = "too_large"
                            break
                    else:
                        return body.decode("utf-8", "replace")
        except TimeoutError:
            reason = "timeout"
        except aiohttp.ClientError:
            reason = "refused"
        finally:
            self.metrics.engine_scrape_seconds.labels(model.name).set(time.monotonic() - started)
        self.metrics.engine_scrape_failures.labels(model.name, reason).inc()
        return None
