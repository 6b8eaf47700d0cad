#!/usr/bin/env python3
"""Switch a host to a revision, benchmark it and fail when it got slower than the revision before.

    CONTROLPANEL_URL=https://panel.lab CONTROLPANEL_TOKEN=cpat_... \
        python examples/switch_and_benchmark.py --host gpu1 --revision 7 --profile quick --max-drop 0.10

The baseline is the newest completed run of the same profile (its name and the numbers given) on
the revision the host served before; when there is none, the script benchmarks that revision first. Exit status: 0 no
regression, 1 output tok/s fell (or TTFT p50 rose) by more than the threshold at some
concurrency, 2 the panel refused a request or the switch or a benchmark failed. Standard library
only, so any CI job can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

PANEL = os.environ.get("CONTROLPANEL_URL", "http://127.0.0.1:8000").rstrip("/")
TOKEN = os.environ.get("CONTROLPANEL_TOKEN", "")


def api(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    if not PANEL.startswith(("http://", "https://")):
        sys.exit(f"CONTROLPANEL_URL must be an http(s) address, not {PANEL!r}")
    request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
        f"{PANEL}/api/v1/{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.load(response)
    except urllib.error.HTTPError as exc:
        print(f"{method} /api/v1/{path}: {exc.code} {json.load(exc).get('detail', '')}", file=sys.stderr)
        sys.exit(2)


def wait(operation: dict[str, Any]) -> dict[str, Any]:
    """Follow an operation until it ends, printing its stage as it changes."""
    stage = None
    while not operation["ended"]:
        if operation["stage"] != stage:
            stage = operation["stage"]
            print(f"  {operation['kind']}: {stage or operation['state']}", flush=True)
        time.sleep(1)
        operation = api("GET", f"operations/{operation['id']}/")
    if operation["state"] != "succeeded":
        print(f"{operation['kind']} {operation['outcome']}: {operation['error']}", file=sys.stderr)
        sys.exit(2)
    return operation


def benchmark(host: str, profile: dict[str, Any]) -> int:
    print(f"benchmarking {host} ({profile})", flush=True)
    return wait(api("POST", f"hosts/{host}/benchmarks/", profile))["benchmark"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--revision", type=int, required=True)
    parser.add_argument("--profile", default="quick", help="a named profile: quick, single-stream, sweep, ...")
    parser.add_argument("--concurrency", help="levels instead of the profile's, e.g. 1,4")
    parser.add_argument("--requests", type=int, help="requests per level instead of the profile's")
    parser.add_argument("--input-tokens", type=int)
    parser.add_argument("--output-tokens", type=int)
    parser.add_argument("--max-drop", type=float, default=0.10, help="worst relative slowdown allowed")
    args = parser.parse_args()

    profile: dict[str, Any] = {"profile": args.profile}
    if args.concurrency:
        profile["concurrency"] = [int(c) for c in args.concurrency.split(",")]
    for key in ("requests", "input_tokens", "output_tokens"):
        if getattr(args, key) is not None:
            profile[key] = getattr(args, key)
    wanted = {"num_requests" if k == "requests" else "name" if k == "profile" else k: v for k, v in profile.items()}

    before = api("GET", f"hosts/{args.host}/")["active_revision"]
    runs = api("GET", f"hosts/{args.host}/benchmarks/")  # newest first
    same = [r for r in runs if r["status"] == "completed" and all(r["profile"].get(k) == v for k, v in wanted.items())]
    baseline = next((r["id"] for r in same if r["revision"] == before), None)
    if baseline is None and before is not None:
        baseline = benchmark(args.host, profile)

    print(f"switching {args.host} from r{before} to r{args.revision}", flush=True)
    wait(api("POST", f"hosts/{args.host}/switch/", {"revision": args.revision}))
    new = benchmark(args.host, profile)
    if baseline is None:
        print("no earlier revision to compare with")
        return 0

    worse = []
    for row in api("GET", f"benchmarks/compare/{baseline}/{new}/")["rows"]:
        change = row["change"]
        if change is None or row["metric"] not in ("output tok/s", "TTFT p50 ms"):
            continue
        slower = -change if row["metric"] == "output tok/s" else change
        print(f"  {row['level']:<16} {row['metric']:<13} {row['a']:>10.1f} -> {row['b']:>10.1f} ({change:+.1%})")
        if slower > args.max_drop:
            worse.append(f"{row['metric']} at {row['level']} {change:+.1%}")
    if worse:
        print(f"r{args.revision} regressed against r{before}: " + "; ".join(worse), file=sys.stderr)
        return 1
    print(f"r{args.revision} is no slower than r{before} (threshold {args.max_drop:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
