from __future__ import annotations

from django.urls import path

from desk.pages import views

urlpatterns = [
    path("", views.queue, name="queue"),
    path("metrics/", views.metrics, name="metrics"),
    path("metrics.csv", views.metrics_csv, name="metrics-csv"),
    path("reviews/next/", views.next_review, name="next-review"),
    path("classes/", views.classes, name="classes"),
    path("tickets/<str:ticket_id>/", views.ticket_detail, name="ticket-detail"),
    path("tickets/<str:ticket_id>/export.json", views.ticket_export, name="ticket-export"),
    path("tickets/<str:ticket_id>/live/", views.ticket_live, name="ticket-live"),
    path("tickets/<str:ticket_id>/state/", views.correct_state, name="correct-state"),
    path("tickets/<str:ticket_id>/status/", views.set_status, name="set-status"),
    path("tickets/<str:ticket_id>/replay/", views.replay, name="replay"),
    path(
        "tickets/<str:ticket_id>/compactions/<int:number>/", views.compaction_review, name="compaction-review"
    ),
    path(
        "tickets/<str:ticket_id>/compactions/<int:number>/review/",
        views.review_compaction,
        name="review-compaction",
    ),
]
