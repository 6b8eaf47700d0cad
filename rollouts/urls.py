from __future__ import annotations

from django.urls import path

from . import views

app_name = "rollouts"

urlpatterns = [
    path("rollouts/", views.rollout_list, name="list"),
    path("rollouts/new/", views.rollout_new, name="new"),
    path("rollouts/<int:pk>/", views.rollout_detail, name="detail"),
    path("rollouts/<int:pk>/status/", views.rollout_status, name="status"),
    path("rollouts/<int:pk>/pause/", views.rollout_action, {"action": "pause"}, name="pause"),
    path("rollouts/<int:pk>/resume/", views.rollout_action, {"action": "resume"}, name="resume"),
    path("rollouts/<int:pk>/cancel/", views.rollout_action, {"action": "cancel"}, name="cancel"),
    path("hosts/<slug:name>/tags/", views.host_tags, name="host_tags"),
]
