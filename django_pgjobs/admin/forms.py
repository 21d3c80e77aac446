"""The job edit form: validates what ``JobManager.edit`` accepts, before it is called.

Only what the operator changed is written, and "changed" means "differs from what the page showed",
not "differs from the row as it is now": every editable field renders its shown value in a hidden
``initial-<name>`` input (``show_hidden_initial``). Otherwise a field the system moved between page
load and save (``run_at`` after "Run now" or a retry backoff) would look changed, and the page's
stale value would be written back over it.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django import forms
from django.contrib.admin.widgets import AdminSplitDateTime
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..exceptions import InvalidJob
from ..models import Job
from ..payloads import check_payload

#: The fields an operator may change on a job that is ready or dead (not running, not done).
EDITABLE_FIELDS = ("queue", "priority", "run_at", "max_attempts", "payload")

#: Deepest JSON nesting the edit form accepts. Far beyond any real payload, and far below the depth at
#: which the job page could no longer show it (indented ``json.dumps`` recurses once per level, inside
#: the template engine's own deep stack: about 870 levels broke it in a test).
MAX_JSON_DEPTH = 100

TOO_DEEP = f"The JSON is nested too deeply (more than {MAX_JSON_DEPTH} levels of lists or objects)."


def deeper_than(value: Any, limit: int) -> bool:
    """Whether lists/objects in ``value`` nest more than ``limit`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > limit:
                return True
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


class PrettyJSONField(forms.JSONField):
    """A JSON textarea that shows the stored value indented, so a payload is readable and editable.

    Deeply nested input is a validation error, not a server error: thousands of levels make
    ``json.loads`` raise ``RecursionError``, and hundreds, once saved, would make the page fail to
    render the payload (see :data:`MAX_JSON_DEPTH`).
    """

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:
            raise ValidationError(TOO_DEEP, code="invalid") from None
        if deeper_than(converted, MAX_JSON_DEPTH):
            raise ValidationError(TOO_DEEP, code="invalid")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        # Re-displaying the form after that error parses the input again; show too-deep input as
        # the text that was sent instead of re-serialising it (which recurses once per level).
        try:
            value = super().bound_data(data, initial)
        except RecursionError:
            return forms.fields.InvalidJSONInput(data)
        if not isinstance(value, forms.fields.InvalidJSONInput) and deeper_than(value, MAX_JSON_DEPTH):
            return forms.fields.InvalidJSONInput(data)
        return value

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        if deeper_than(value, MAX_JSON_DEPTH):  # stored that deep by code, not through this form
            return forms.fields.InvalidJSONInput(json.dumps(TOO_DEEP))
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, cls=self.encoder)


class RunAtField(forms.SplitDateTimeField):
    """The admin's date + time inputs, whose hidden initial value is one timestamp input.

    With the split widget's own hidden initial (``initial-run_at_0`` / ``_1``), Django does not carry
    the shown value over when the form is re-displayed after a validation error: it looks for a key
    named exactly ``initial-run_at``, misses it, and renders the *submitted* value as "shown", so a
    run_at the operator changed would then look unchanged and be dropped on the next save.
    """

    hidden_widget = forms.HiddenInput

    def compress(self, data_list: Any) -> Any:
        """The entered date and time, aware. With ``USE_TZ = False`` Django leaves them naive, and
        ``Job.objects.edit`` refuses a naive run_at (as enqueue does, with a message for code): the
        operator means the wall time of the current time zone (``TIME_ZONE``), as Django's own
        ``from_current_timezone`` does with ``USE_TZ = True``, refusing a time that zone skips or
        repeats."""
        value = super().compress(data_list)
        if isinstance(value, dt.datetime) and timezone.is_naive(value):
            zone = timezone.get_current_timezone()
            if zone.utcoffset(value) != zone.utcoffset(value.replace(fold=1 - value.fold)):
                raise ValidationError(
                    "%(datetime)s couldn't be interpreted in time zone %(current_timezone)s; it may be "
                    "ambiguous or it may not exist.",
                    code="ambiguous_timezone",
                    params={"datetime": value, "current_timezone": zone},
                )
            value = timezone.make_aware(value, zone)
        return value

    def to_python(self, value: Any) -> Any:
        # Used only for the hidden initial value (MultiValueField.clean never calls to_python).
        if value in self.empty_values:
            return None
        parsed = parse_datetime(str(value))
        if parsed is None:
            raise ValidationError("Invalid initial run at.", code="invalid")
        return parsed


class JobEditForm(forms.ModelForm):
    payload = PrettyJSONField(
        label="Payload",
        widget=forms.Textarea(attrs={"rows": 12, "cols": 80, "class": "vLargeTextField pgjobs-json"}),
        help_text='A JSON object: {"args": [...], "kwargs": {...}}.',
        show_hidden_initial=True,
    )
    priority = forms.IntegerField(
        label="Priority",
        min_value=-32768,
        max_value=32767,
        help_text="Higher runs first.",
        show_hidden_initial=True,
    )
    run_at = RunAtField(label="Run at", widget=AdminSplitDateTime, show_hidden_initial=True)
    max_attempts = forms.IntegerField(
        label="Max attempts", min_value=1, max_value=2**31 - 1, show_hidden_initial=True
    )
    queue = forms.CharField(label="Queue", max_length=100, strip=True, show_hidden_initial=True)

    class Meta:
        model = Job
        fields = EDITABLE_FIELDS

    def clean_payload(self) -> dict[str, Any]:
        payload = self.cleaned_data["payload"]
        if not isinstance(payload, dict):
            raise ValidationError('The payload must be a JSON object, e.g. {"args": [], "kwargs": {}}.')
        try:
            check_payload(self.instance.task, payload)  # the manager's own rule (args list, ...)
        except InvalidJob as exc:
            raise ValidationError(str(exc)) from exc
        return payload

    def clean_queue(self) -> str:
        queue = self.cleaned_data["queue"]
        if not queue or "\x00" in queue:
            raise ValidationError("The queue name must be a non-empty string.")
        return queue

    def edit_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``Job.objects.edit``: only what the operator changed on the page
        (compared with the page's hidden initial values, see the module docstring)."""
        return {
            name: self.cleaned_data[name]
            for name in EDITABLE_FIELDS
            if name in self.fields and name in self.changed_data
        }
