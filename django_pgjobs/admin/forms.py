"""The job edit form: validates what ``JobManager.edit`` accepts, before it is called."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ..exceptions import InvalidJob
from ..models import Job
from ..payloads import check_value

#: The fields an operator may change on a job that is not running.
EDITABLE_FIELDS = ("queue", "priority", "run_at", "max_attempts", "payload")


class PrettyJSONField(forms.JSONField):
    """A JSON textarea that shows the stored value indented, so a payload is readable and editable."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=self.encoder)


class JobEditForm(forms.ModelForm):
    payload = PrettyJSONField(
        label="Payload",
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80, "class": "vLargeTextField pgjobs-json"}),
        help_text='A JSON object: {"args": [...], "kwargs": {...}}.',
    )
    priority = forms.IntegerField(
        label="Priority", min_value=-32768, max_value=32767, help_text="Lower runs first."
    )
    max_attempts = forms.IntegerField(label="Max attempts", min_value=1, max_value=2**31 - 1)
    queue = forms.CharField(label="Queue", max_length=100, strip=True)

    class Meta:
        model = Job
        fields = EDITABLE_FIELDS

    def clean_payload(self) -> dict[str, Any]:
        payload = self.cleaned_data["payload"]
        if not isinstance(payload, dict):
            raise ValidationError('The payload must be a JSON object, e.g. {"args": [], "kwargs": {}}.')
        for key in ("args", "kwargs"):
            if key in payload and not isinstance(payload[key], list if key == "args" else dict):
                kind = "a list" if key == "args" else "an object"
                raise ValidationError(f"payload[{key!r}] must be {kind}.")
        try:
            check_value(self.instance.task, "payload", payload)
        except InvalidJob as exc:
            raise ValidationError(str(exc)) from exc
        return payload

    def clean_queue(self) -> str:
        queue = self.cleaned_data["queue"]
        if not queue or "\x00" in queue:
            raise ValidationError("The queue name must be a non-empty string.")
        return queue

    def edit_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``Job.objects.edit``: only what the operator changed."""
        return {name: self.cleaned_data[name] for name in EDITABLE_FIELDS if name in self.changed_data}
