from .views import audit, benchmarks, models, operations, revisions

app_name = "deployments"

urlpatterns = [
    *revisions.urlpatterns,
    *operations.urlpatterns,
    *models.urlpatterns,
    *audit.urlpatterns,
    *benchmarks.urlpatterns,
]
