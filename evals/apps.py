from django.apps import AppConfig


class EvalsConfig(AppConfig):
    """Tooling, not the runtime: the compaction eval and its tau-bench adapter."""

    name = "evals"
