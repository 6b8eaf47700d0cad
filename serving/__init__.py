"""How a model is served, as pure logic: no Django, no I/O (docs/architecture.md: the bottom of the panel's layers).

The planner (does a revision fit these GPUs), the engine adapters (a revision as each engine's
argv and env, how each engine reads its own knobs, its health and metrics), the diff between two
revisions, the benchmark maths, model-architecture facts, client exports, and the names of the
tasks a host runs. The panel (deployments, api) and the host agent (hostagent) both read it; it
reads neither.
"""
