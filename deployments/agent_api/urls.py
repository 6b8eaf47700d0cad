from django.urls import path

from . import views

app_name = "agent_api"

urlpatterns = [
    path("hello", views.hello, name="hello"),
    path("register", views.register, name="register"),
    path("probe", views.probe, name="probe"),
    path("heartbeat", views.heartbeat, name="heartbeat"),
    path("telemetry", views.telemetry, name="telemetry"),
    path("events", views.event, name="event"),
    path("engine-log", views.engine_log, name="engine_log"),
    path("revisions/<int:revision_id>/launch", views.launch, name="launch"),
    path("serving", views.serving, name="serving"),
    path("serving/report", views.serving_report, name="serving_report"),
    path("operations", views.operations, name="operations"),
    path("operations/<uuid:op_id>/begin", views.begin, name="begin"),
    path("operations/<uuid:op_id>/progress", views.progress, name="progress"),
    path("operations/<uuid:op_id>/finish", views.finish, name="finish"),
]
