from django.db import models


class Invoice(models.Model):
    customer_email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    receipt_sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Invoice {self.pk} ({self.total_cents / 100:.2f})"


class WebhookDelivery(models.Model):
    """What the receiving end saw: one row per idempotency key, however often it was delivered."""

    idempotency_key = models.CharField(max_length=255, unique=True)
    event = models.CharField(max_length=100)
    deliveries = models.PositiveIntegerField(default=1)

    def __str__(self) -> str:
        return f"{self.event} {self.idempotency_key} x{self.deliveries}"


class Document(models.Model):
    name = models.CharField(max_length=200)
    pages = models.PositiveIntegerField()
    processed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name
