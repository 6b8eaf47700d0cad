"""The panel's shared base, below every other app (as NetBox's `core`): the audit trail
(`AuditEvent` and `audit_record`) and the limits every layer agrees on (`core.limits`, `core.hub_paths`).

It imports nothing of `hardware` or `deployments`; both build on it. Roles are
`controlpanel/roles.py`. This package's `__init__` loads no Django, so the pure domain core
may read `core.limits` and `core.hub_paths`.
"""
