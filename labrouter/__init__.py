"""The lab router: one OpenAI endpoint for the whole lab, in front of every host's front door.

It runs as its own async process beside the web server (`python manage.py router` or `python -m
labrouter`; the embedded supervisor and docker-compose start it), never inside the
sync web workers: a stream held open for minutes would take a worker each. It serves
`/v1/chat/completions`, `/v1/completions`, `/v1/embeddings` and `/v1/models` on
CONTROLPANEL_ROUTER_BIND and sends each request, by its `model` (a revision's front-door name or
an alias), to a host whose front door serves it:

- health-aware: hosts offline, doors whose last report is older than CONTROLPANEL_ROUTER_STALE_S
  and doors that refused a connection in the last DOWN_FOR_S seconds are skipped; a door with
  the model loaded is preferred, then the one with the fewest of the router's requests;
- failing over to the next door that serves the name when a connection fails before anything
  was sent (refused, or no answer to the connect); once sent, the door's answer is the answer;
- streams pass through as the door writes them, and a client that hangs up closes the door's
  request at once (which closes the engine's);
- `/v1/models` is the union of what the usable doors serve, as the key may use it;
- `/metrics` counts requests by host, name and status, failovers, doors down and the table's age;
  `/prometheus/doors` lists the doors for Prometheus to scrape each (HTTP service discovery).
- no client can stall it: the front door's connection bounds (hostagent/frontdoor/limits.py), from
  CONTROLPANEL_ROUTER_*_TIMEOUT_S and CONTROLPANEL_ROUTER_MAX_CONNECTIONS[_PER_PEER]; `/metrics`
  and `/prometheus/doors` behind CONTROLPANEL_ROUTER_METRICS_TOKEN when it is set.

Inference keys are the front doors' own (hostagent.frontdoor.keys, the table the panel gives
every door): a key not allowed a name is refused here as it would be at the door, and the
request goes on with the client's `Authorization`, so the door meters usage per key as always.

The route table (serving.lab_routes.LabRoutes) comes from the panel's database
(deployments.services.lab_routes), read every CONTROLPANEL_ROUTER_REFRESH_S seconds in a
thread of its own; a failed read keeps the last table.

    app.py      Router: the HTTP routes, keys, the route table and its refresh
    forward.py  one request to a door, with failover; answers and streams passed back
    metrics.py  its Prometheus metrics (GET /metrics; docs/metrics.md)
    run.py      the process: settings read, the table's reader, signals
    apps.py     the Django app, for `manage.py router` (management/commands/router.py)

This package imports nothing itself: it is an installed app, and the panel's web processes load
none of the router's code (nor the front door's it uses). It holds only the exit code the embedded
supervisor reads without loading the router.
"""

CANNOT_LISTEN = 78  # EX_CONFIG: the exit code when its address is taken (the embedded supervisor does not restart it)
