from __future__ import annotations

from django.urls import path

from . import views

app_name = "tuning"

urlpatterns = [
    path("hosts/<slug:name>/tuning/", views.tuning_list, name="list"),
    path("hosts/<slug:name>/tuning/new/", views.tuning_new, name="new"),
    path("tuning/<int:pk>/", views.tuning_detail, name="detail"),
    path("tuning/<int:pk>/status/", views.tuning_status, name="status"),
    path("tuning/<int:pk>/cancel/", views.tuning_cancel_view, name="cancel"),
    path("tuning/<int:pk>/propose/", views.tuning_propose_view, name="propose"),
]
