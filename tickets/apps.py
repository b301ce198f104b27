from typing import Any

from django.apps import AppConfig


def _forget_tokens(**kwargs: Any) -> None:
    from tickets.accounts import TOKEN_CACHE

    TOKEN_CACHE.clear()


class TicketsConfig(AppConfig):
    name = "tickets"

    def ready(self) -> None:
        """A token, its classes, a user or a user's groups saved or deleted in this process: its cached tokens are
        forgotten at once (tickets.accounts.TokenCache)."""
        from django.contrib.auth.models import User
        from django.db.models.signals import m2m_changed, post_delete, post_save

        from tickets.models import AgentToken

        for model in (AgentToken, User):
            post_save.connect(
                _forget_tokens, sender=model, dispatch_uid=f"forget-tokens-save-{model.__name__}"
            )
            post_delete.connect(
                _forget_tokens, sender=model, dispatch_uid=f"forget-tokens-delete-{model.__name__}"
            )
        m2m_changed.connect(_forget_tokens, sender=User.groups.through, dispatch_uid="forget-tokens-groups")
        # A token narrowed to other classes (or widened) in this process is read afresh at once.
        m2m_changed.connect(
            _forget_tokens, sender=AgentToken.ticket_classes.through, dispatch_uid="forget-tokens-classes"
        )
