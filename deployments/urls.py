from django.urls import path

from . import views

app_name = "deployments"

urlpatterns = [
    path("models/", views.model_list, name="model_list"),
    path("audit/", views.audit_log, name="audit_log"),
    path("hosts/<slug:host>/revisions/", views.revision_list, name="revision_list"),
    path("hosts/<slug:host>/revisions/<int:number>/", views.revision_detail, name="revision_detail"),
    path("hosts/<slug:host>/revisions/<int:number>/comment/", views.revision_comment, name="revision_comment"),
    path("operations/<uuid:pk>/", views.operation_detail, name="operation_detail"),
    path("operations/<uuid:pk>/status/", views.operation_status, name="operation_status"),
]
