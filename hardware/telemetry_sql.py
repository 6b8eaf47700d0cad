"""GPU samples into the database in one statement per report, the GPU matched by the database.

An agent's telemetry report names GPUs by index; `GpuSample` rows need the GPU's id. Looking
the ids up, building a model object per sample and letting `bulk_create` compile its INSERT
cost about as much CPU as the rest of the request (bench/bench_ingest.py). Here the values go
in as plain columns and the join to the host's own GPUs happens inside one
`INSERT ... SELECT`: samples for an index the host does not have are left out by the join.

PostgreSQL gets the rows as one JSON parameter (`jsonb_array_elements`): the statement's text is
the same for every report and the database parses the values (quoting one array parameter per
column cost the web server more). Other databases (SQLite, the embedded default) get a `VALUES`
list. Values must be checked numbers already (hardware.services.telemetry_record does that).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from .models import GPU, GpuSample

# (GpuSample column, PostgreSQL type), in the order a row holds them after the GPU index.
COLUMNS = (
    ("ts", "timestamptz"),
    ("util_pct", "float8"),
    ("mem_used_bytes", "bigint"),
    ("power_w", "float8"),
    ("temp_c", "float8"),
    ("sm_clock_mhz", "float8"),
    ("mem_clock_mhz", "float8"),
    ("energy_mj", "bigint"),
)
SQLITE_ROWS = 3000  # (1 + 8 columns) x 3000 parameters stays under SQLite's 32,766

Row = tuple[int, datetime, float | None, int | None, float | None, float | None, float | None, float | None, int | None]


def insert_gpu_samples(*, host_id: int, rows: Sequence[Row]) -> int:
    """Insert `rows` (GPU index, then COLUMNS' values) for the host's GPUs; returns how many
    were stored (rows for an index the host has no GPU at are dropped)."""
    if not rows:
        return 0
    q = connection.ops.quote_name
    sample, gpu = q(GpuSample._meta.db_table), q(GPU._meta.db_table)
    names = ", ".join(q(name) for name, _ in COLUMNS)
    if connection.vendor == "postgresql":
        picked = ", ".join(
            f"(e->>{i + 1})::{kind}" if kind != "timestamptz" else f"to_timestamp((e->>{i + 1})::float8)"
            for i, (_, kind) in enumerate(COLUMNS)
        )
        sql = (
            f"INSERT INTO {sample} ({q('gpu_id')}, {q('resolution_s')}, {names}) "  # noqa: S608 - names from the models
            f"SELECT g.{q('id')}, 0, {picked} FROM jsonb_array_elements(%s::jsonb) AS e "
            f"JOIN {gpu} g ON g.{q('host_id')} = %s AND g.{q('index')} = (e->>0)::integer"
        )
        payload = json.dumps([[r[0], r[1].timestamp(), *r[2:]] for r in rows])
        with connection.cursor() as cursor:
            cursor.execute(sql, [payload, host_id])
            return int(cursor.rowcount)
    adapt = connection.ops.adapt_datetimefield_value
    picked = ", ".join(f"v.column{i + 2}" for i in range(len(COLUMNS)))
    stored = 0
    chunks = transaction.atomic() if len(rows) > SQLITE_ROWS else contextlib.nullcontext()
    with chunks, connection.cursor() as cursor:
        for start in range(0, len(rows), SQLITE_ROWS):
            chunk = rows[start : start + SQLITE_ROWS]
            values = ", ".join(["(" + ", ".join(["%s"] * (1 + len(COLUMNS))) + ")"] * len(chunk))
            sql = (
                f"INSERT INTO {sample} ({q('gpu_id')}, {q('resolution_s')}, {names}) "  # noqa: S608 - model names
                f"SELECT g.{q('id')}, 0, {picked} FROM (VALUES {values}) AS v "
                f"JOIN {gpu} g ON g.{q('host_id')} = %s AND g.{q('index')} = v.column1"
            )
            params: list[Any] = []
            for index, ts, *rest in chunk:
                params.extend((index, adapt(ts), *rest))
            cursor.execute(sql, [*params, host_id])
            stored += int(cursor.rowcount)
    return stored
