"""Views, one module per area; each module exports its own `urlpatterns`, which `urls.py` gathers
(the host pages' in `host_urls.py`)."""
