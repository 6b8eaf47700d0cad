"""The embedded default: the whole panel on one machine (its own Redis, the Celery worker, this
host's agent, the lab router and the web server), started and supervised by one process,
`python -m embedded` (what `scripts/run` ends with). panel.py holds the supervisor and says what
it starts and how it stops them.

It stands above the panel's apps: it runs them as processes and reads this machine with the
agent's own code (its probe, its process tree), as the one place where panel and host meet.
"""
