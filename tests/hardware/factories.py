from __future__ import annotations

import factory

from hardware.models import GPU, Host


class HostFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Host

    name = factory.Sequence(lambda n: f"gpu-host-{n}")
    address = "127.0.0.1"


class GPUFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GPU

    host = factory.SubFactory(HostFactory)
    index = factory.Sequence(lambda n: n)
    name = "NVIDIA GeForce RTX 3090"
    memory_bytes = 24576 * 1024**2
    compute_capability = "8.6"
