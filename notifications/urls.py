from django.urls import path

from . import views

app_name = "notifications"
urlpatterns = [
    path("", views.index, name="index"),
    path("deliveries/", views.deliveries, name="deliveries"),
    path("channels/new/", views.channel_new, name="channel_new"),
    path("channels/<uuid:pk>/", views.channel_edit, name="channel_edit"),
    path("channels/<uuid:pk>/delete/", views.channel_delete, name="channel_delete"),
    path("channels/<uuid:pk>/test/", views.channel_test, name="channel_test"),
    path("rules/new/", views.rule_new, name="rule_new"),
    path("rules/<uuid:pk>/", views.rule_edit, name="rule_edit"),
    path("rules/<uuid:pk>/delete/", views.rule_delete, name="rule_delete"),
]
