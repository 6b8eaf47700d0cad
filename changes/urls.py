from django.urls import path

from . import views

app_name = "changes"
urlpatterns = [
    path("changes/", views.change_list_view, name="list"),
    path("changes/<int:pk>/", views.change_detail, name="detail"),
    path("changes/<int:pk>/decide/", views.change_decide_view, name="decide"),
    path("hosts/<slug:host>/review/", views.host_review, name="host_review"),
]
