from .views import audit, benchmarks, diff, exports, models, operations, revisions

app_name = "deployments"

urlpatterns = [
    *revisions.urlpatterns,
    *operations.urlpatterns,
    *models.urlpatterns,
    *audit.urlpatterns,
    *benchmarks.urlpatterns,
    *diff.urlpatterns,
    *exports.urlpatterns,
]
