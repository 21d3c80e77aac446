"""The shop's background jobs: realistic handlers, each written to be safe when run twice."""

from __future__ import annotations

from typing import Any

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from django_pgjobs import JobContext, job

from .models import Document, Invoice, WebhookDelivery


class TransientError(Exception):
    """A downstream hiccup worth retrying (HTTP 503, a busy OCR service...)."""


@job(queue="mail", max_attempts=5)
def send_receipt(invoice_id: int) -> str:
    """Email a receipt once: the receipt_sent_at mark makes a second run a no-op."""
    with transaction.atomic():
        invoice = Invoice.objects.select_for_update().get(pk=invoice_id)
        if invoice.receipt_sent_at:
            return "already sent"
        send_mail(
            subject=f"Your receipt for invoice {invoice.pk}",
            message=f"Thank you! We received {invoice.total_cents / 100:.2f} EUR.",
            from_email=None,
            recipient_list=[invoice.customer_email],
        )
        invoice.receipt_sent_at = timezone.now()
        invoice.save(update_fields=["receipt_sent_at"])
    return "sent"


@job(queue="webhooks", max_attempts=6, backoff={"base": 1.5, "cap": 2.0, "jitter": 0.2}, takes_context=True)
def deliver_webhook(context: JobContext, event: str, data: dict[str, Any]) -> dict[str, Any]:
    """Deliver an event to a partner. The receiving side de-duplicates on the idempotency key we
    pass along, so a delivery repeated after a crash is recognised there (at-least-once + keys)."""
    key = context.idempotency_key or f"job:{context.job_id}"
    if data.get("order", 0) % 7 == 0 and context.attempt == 1:
        raise TransientError("partner answered 503 Service Unavailable")
    delivery, created = WebhookDelivery.objects.get_or_create(idempotency_key=key, defaults={"event": event})
    if not created:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(deliveries=F("deliveries") + 1)
    return {"status": 200, "key": key, "attempt": context.attempt}


@job(queue="documents", max_attempts=3, backoff={"base": 1.5, "cap": 2.0, "jitter": 0.2})
def process_document(document_id: int) -> dict[str, int]:
    """A processing step that sometimes fails: a busy OCR service (retried) or a document we
    cannot handle at all (ends in the dead letters for staff to look at)."""
    document = Document.objects.get(pk=document_id)
    if document.pages > 40:
        raise ValueError(f"{document.name}: {document.pages} pages is over the 40-page limit")
    if document.pages % 5 == 0 and document.processed_at is None:
        Document.objects.filter(pk=document.pk).update(processed_at=timezone.now())
        raise TransientError("OCR service busy, try again")
    Document.objects.filter(pk=document.pk).update(processed_at=timezone.now())
    return {"pages": document.pages}
