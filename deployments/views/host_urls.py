"""The host pages' URLs. They keep their `hardware:` names (templates and tests reverse them),
though the views that put hosts beside revisions and operations live in `deployments.views.hosts`;
the agent-token view is `hardware`'s own. (The dashboard's are `dashboard.urls`.)"""

from __future__ import annotations

from django.urls import path

from hardware import address_views, token_views

from . import host_events
from . import hosts as views

app_name = "hardware"

urlpatterns = [
    path("hosts/<slug:name>/", views.host_detail, name="host_detail"),
    path("hosts/<slug:name>/card/", views.host_card, name="host_card"),
    path("hosts/<slug:name>/events/", host_events.host_events, name="host_events"),
    path("hosts/<slug:name>/telemetry/", views.host_telemetry, name="host_telemetry"),
    path("hosts/<slug:name>/probe/", views.host_action, {"action": "probe"}, name="host_probe"),
    path("hosts/<slug:name>/stop/", views.host_action, {"action": "stop"}, name="host_stop"),
    path("hosts/<slug:name>/start/", views.host_action, {"action": "start"}, name="host_start"),
    path("hosts/<slug:name>/install/", views.host_install, name="host_install"),
    path("hosts/<slug:name>/install/read-again/", views.host_install_read_again, name="host_install_read_again"),
    path("hosts/<slug:name>/token/", token_views.host_token, name="host_token"),
    path("hosts/<slug:name>/address/", address_views.host_address, name="host_address"),
    path("operations/<uuid:pk>/widget/", views.operation_widget, name="operation_widget"),
]
