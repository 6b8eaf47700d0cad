"""The dashboard: every host as a card or a table row, sent only when it changed.

Its URLs are `dashboard:` (urls.py), its templates `templates/dashboard/`, its view views.py and
its reads selectors.py (every card's fingerprint in one query). It reads hosts, their revisions,
operations and front doors from `deployments` and `hardware` and writes nothing.
"""
