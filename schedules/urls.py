from __future__ import annotations

from django.urls import path

from . import views

app_name = "schedules"

urlpatterns = [
    path("schedule/", views.schedule_list, name="list"),
    path("schedule/<int:pk>/cancel/", views.schedule_cancel, name="cancel"),
    path("hosts/<slug:host>/maintenance-window/", views.window, name="window"),
]
