from django.apps import AppConfig


class DeskConfig(AppConfig):
    """The interfaces: the agents' API, the supervisors' pages, import and the commands."""

    name = "desk"
