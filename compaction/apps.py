from django.apps import AppConfig


class CompactionConfig(AppConfig):
    name = "compaction"
