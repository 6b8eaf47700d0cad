from django.contrib import admin

from .models import GPU, GpuType, Host, HostTag


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = ("short_name", "memory_bytes", "compute_capability", "pcie_p2p", "nvlink")


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0


class HostTagInline(admin.TabularInline):
    model = HostTag
    extra = 1
    verbose_name = "tag (group)"


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("name", "address", "queue", "last_heartbeat", "is_demo")
    # The address is set on the host page (or `manage.py host address`), through the one loopback
    # rule and audited (hardware.services.host_address_set), never here.
    readonly_fields = ("address", "engine_state", "last_heartbeat", "last_probe_at")
    inlines = [GPUInline, HostTagInline]
