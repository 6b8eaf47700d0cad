"""The dashboard's URLs: the page and the cards (or table rows) it polls."""

from __future__ import annotations

from django.urls import path

from dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("", views.index, name="index"),
    path("hosts/cards/", views.cards, name="cards"),
]
