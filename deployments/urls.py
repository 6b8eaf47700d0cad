from .views import audit, benchmarks, diff, exports, host_models, models, operations, revisions

app_name = "deployments"

urlpatterns = [
    *revisions.urlpatterns,
    *operations.urlpatterns,
    *models.urlpatterns,
    *host_models.urlpatterns,
    *audit.urlpatterns,
    *benchmarks.urlpatterns,
    *diff.urlpatterns,
    *exports.urlpatterns,
]
