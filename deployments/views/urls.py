from . import (
    audit,
    benchmarks,
    diff,
    engine_log,
    exports,
    front_door,
    host_models,
    models,
    operations,
    playground,
    revisions,
    secrets,
)

app_name = "deployments"

urlpatterns = [
    *revisions.urlpatterns,
    *playground.urlpatterns,
    *operations.urlpatterns,
    *models.urlpatterns,
    *host_models.urlpatterns,
    *secrets.urlpatterns,
    *engine_log.urlpatterns,
    *audit.urlpatterns,
    *benchmarks.urlpatterns,
    *diff.urlpatterns,
    *exports.urlpatterns,
    *front_door.urlpatterns,
]
