"""One delivery attempt of a notification: claimed (so two workers never send it at once), sent to its
channel, and recorded as a Delivery row; then the notification is delivered, due again after a back-off, or
given up after the last attempt.

Webhooks are POSTed with the ledger's signature scheme (ledger.signature: `t=<unix>,v1=<hex HMAC-SHA256 of
"t.body">`) in `X-Sundry-Signature`, the event's id in `X-Sundry-Event-Id`, a short timeout per attempt, and
redirects are never followed (a 3xx is a failed attempt). Neither the secret nor the signature is logged or
kept in a Delivery row.
"""

from __future__ import annotations

import http.client
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.notifications import (
    ChannelKind,
    NotificationStatus,
    backoff_seconds,
    encode,
    message_body,
    truncate,
)
from ledger.signature import signature_header
from notify.models import Delivery, Notification

logger = logging.getLogger(__name__)

# A claimed attempt holds the notification this long past its timeout; a worker killed mid-send so leaves
# it due again (at least once: receivers dedupe on X-Sundry-Event-Id).
LEASE_GRACE_SECONDS = 30
USER_AGENT = "SundryDesk-Notify/1"


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    status_code: int | None = None
    error: str = ""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is the answer: urllib raises it as an HTTPError instead of following it."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirects())


def send_webhook(notification: Notification, *, timeout: float) -> Outcome:
    channel = notification.channel
    body = encode(
        message_body(
            text=notification.text, event=notification.event, link=notification.event.get("url") or ""
        )
    )
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "User-Agent": USER_AGENT,
        "X-Sundry-Event-Id": str(notification.event_id),
        "X-Sundry-Signature": signature_header(secret=channel.secret, timestamp=int(time.time()), body=body),
    }
    request = urllib.request.Request(channel.url, data=body, headers=headers, method="POST")
    try:
        with _opener().open(request, timeout=timeout) as response:
            response.read(4096)
            code = response.status
    except urllib.error.HTTPError as exc:
        code = exc.code
        if 300 <= code < 400:
            where = exc.headers.get("Location", "") if exc.headers else ""
            return Outcome(
                False, code, truncate(f"redirect not followed: {code} to {where or '(no Location)'}")
            )
        try:
            answer = exc.read(300).decode("utf-8", "replace")
        except Exception:
            answer = ""
        return Outcome(False, code, truncate(f"HTTP {code}: {answer}".rstrip(": ")))
    except TimeoutError:
        return Outcome(False, None, f"no answer within {timeout:g}s (timed out)")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return Outcome(False, None, f"no answer within {timeout:g}s (timed out)")
        return Outcome(False, None, truncate(f"could not connect: {reason}"))
    except (OSError, http.client.HTTPException, ValueError) as exc:  # reset, a malformed answer, a bad URL
        return Outcome(False, None, truncate(f"{type(exc).__name__}: {exc}"))
    if 200 <= code < 300:
        return Outcome(True, code)
    return Outcome(False, code, f"HTTP {code}")


def send_email(notification: Notification) -> Outcome:
    channel = notification.channel
    link = notification.event.get("url") or ""
    lines = [notification.text, ""]
    if link:
        lines += [link, ""]
    lines.append(f"Event {notification.event_id} ({notification.kind}) on {notification.ticket_ref}.")
    try:
        sent = send_mail(
            subject=truncate(f"[Sundry Desk] {notification.text}", 150).replace("\n", " "),
            message="\n".join(lines),
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=channel.recipient_list(),
            fail_silently=False,
        )
    except Exception as exc:
        return Outcome(False, None, truncate(f"{type(exc).__name__}: {exc}"))
    return Outcome(True) if sent else Outcome(False, None, "the mail backend sent nothing")


def _claim(pk: int, now: datetime, timeout: float) -> bool:
    lease = now + timedelta(seconds=timeout + LEASE_GRACE_SECONDS)
    return bool(
        Notification.objects.filter(pk=pk, status=NotificationStatus.PENDING)
        .filter(Q(next_attempt_at__lte=now) | Q(next_attempt_at=None))
        .update(next_attempt_at=lease)
    )


def deliver(pk: int, *, now: datetime | None = None) -> Notification | None:
    """One attempt when the notification is due and no one else holds it (None otherwise). Call with no
    transaction open: nothing is locked while the receiver answers."""
    timeout = settings.SUNDRY_NOTIFY_TIMEOUT_SECONDS
    if not _claim(pk, now or timezone.now(), timeout):
        return None
    notification = Notification.objects.select_related("channel").get(pk=pk)
    channel = notification.channel
    attempt = notification.attempts + 1
    started = time.perf_counter()
    if not channel.enabled:
        outcome = Outcome(False, None, "the channel is disabled")
    elif channel.kind == ChannelKind.EMAIL:
        outcome = send_email(notification)
    else:
        outcome = send_webhook(notification, timeout=timeout)
    duration_ms = int((time.perf_counter() - started) * 1000)

    finished = timezone.now()
    notification.attempts = attempt
    notification.last_error = outcome.error
    if outcome.succeeded:
        notification.status = NotificationStatus.DELIVERED
        notification.delivered_at = finished
        notification.next_attempt_at = None
    elif attempt >= settings.SUNDRY_NOTIFY_MAX_ATTEMPTS or not channel.enabled:
        notification.status = NotificationStatus.FAILED
        notification.next_attempt_at = None
    else:
        wait = backoff_seconds(
            attempt,
            base=settings.SUNDRY_NOTIFY_BACKOFF_SECONDS,
            cap=settings.SUNDRY_NOTIFY_BACKOFF_CAP_SECONDS,
        )
        notification.next_attempt_at = finished + timedelta(seconds=wait)
    with transaction.atomic():
        Delivery.objects.create(
            notification=notification,
            attempt=attempt,
            succeeded=outcome.succeeded,
            status_code=outcome.status_code,
            error=outcome.error,
            duration_ms=duration_ms,
        )
        notification.save(
            update_fields=["attempts", "last_error", "status", "delivered_at", "next_attempt_at"]
        )
    if not outcome.succeeded:
        logger.warning(
            "notification %s (%s, %s) attempt %s failed: %s",
            notification.event_id,
            notification.kind,
            channel.name,
            attempt,
            outcome.error,
        )
    return notification


def due(now: datetime | None = None) -> list[int]:
    """The pending notifications whose next attempt is due, oldest first."""
    return list(
        Notification.objects.filter(
            status=NotificationStatus.PENDING, next_attempt_at__lte=now or timezone.now()
        )
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:500]
    )
