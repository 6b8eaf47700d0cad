from django.urls import path

from . import views

app_name = "hardware"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("hosts/cards/", views.host_cards_partial, name="host_cards"),
    path("hosts/<slug:name>/", views.host_detail, name="host_detail"),
]
