"""How diff cells read: counts, bytes, parameters, relative changes. Unknown is "unknown"."""

from __future__ import annotations

import json
import math
from typing import Any

UNKNOWN = "unknown"
ABSENT = "–"
GB = 1000**3


def number(value: object) -> float | None:
    """A finite number, or None (bools, text and NaN are not numbers here)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return None


def count(value: object) -> str:
    """262144 -> "262,144"."""
    n = number(value)
    if n is None:
        return UNKNOWN
    return f"{n:,.0f}" if n.is_integer() else f"{n:,.2f}"


def size_bytes(value: object) -> str:
    """Binary units, as engines print them: 8192 -> "8 KiB", 2.25 GiB -> "2.25 GiB"."""
    n = number(value)
    if n is None:
        return UNKNOWN
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{_trim(n / scale)} {unit}"
    return f"{n:.0f} B"


def exact_bytes(value: object) -> str:
    """51832042176 -> "51,832,042,176 bytes": the exact figure behind a size_bytes()."""
    n = number(value)
    return UNKNOWN if n is None else f"{n:,.0f} bytes"


def disk_gb(value: object) -> str:
    """Weights on disk in decimal GB, as model cards state them: "~19.5 GB"."""
    n = number(value)
    if n is None:
        return UNKNOWN
    return f"~{_trim(n / GB, 1)} GB"


def params(value: object) -> str:
    """35_000_000_000 -> "35B", 270_000_000 -> "270M"."""
    n = number(value)
    if n is None:
        return UNKNOWN
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{_trim(n / scale, 1)}{unit}"
    return f"{n:.0f}"


def measure(value: object, digits: int = 1) -> str:
    n = number(value)
    if n is None:
        return UNKNOWN
    if n != 0 and abs(n) < 1:
        return f"{n:.3g}"
    return f"{n:,.{digits}f}"


def fixed(value: object, digits: int = 3) -> str:
    n = number(value)
    return UNKNOWN if n is None else f"{n:,.{digits}f}"


def _trim(value: float, digits: int = 2) -> str:
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def relative(old: object, new: object) -> str:
    """How new compares to old: "x3.2" when it at least doubled, "+45%" / "-75%" otherwise."""
    a, b = number(old), number(new)
    if a is None or b is None or a == b:
        return ""
    if a == 0:
        return "from 0"
    ratio = b / a
    if ratio >= 2:
        return f"x{ratio:.1f}"
    return f"{(ratio - 1) * 100:+.0f}%"


def value(raw: object) -> str:
    """A knob or env value as a person would type it."""
    if raw is None:
        return ABSENT
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw))
    if isinstance(raw, dict | list | tuple):
        return json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return str(raw)


def normalised(raw: object) -> Any:
    """What two values are compared by: "65536" == 65536, "true" == True, dict key order ignored."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        try:
            return normalised(json.loads(text)) if text[:1] in "[{" else float(text)
        except ValueError:
            return text
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, dict):
        return json.dumps({k: normalised(v) for k, v in raw.items()}, sort_keys=True)
    if isinstance(raw, list | tuple):
        return json.dumps([normalised(v) for v in raw])
    return raw
