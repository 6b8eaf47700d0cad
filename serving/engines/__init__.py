"""Engine adapters (pure): structured config -> launch spec, metrics and log parsing.

Use `serving.engines.registry.get_adapter(name)`; the contract is in `base.py`.
"""
