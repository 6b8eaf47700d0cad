"""Views, one module per area; each module exports its own `urlpatterns`."""
