"""Turn decoded JSON objects into :class:`~sarl.rewards.base.Sample` values: the text contract of
every registered reward outside training.

Called by ``sarl reward score`` (one object per JSON line) and the reward service (one object per
request item). An object has ``response`` (string, required), ``prompt`` (string, default ""),
``ground_truth`` (string, number or null; numbers become their text, as dataset answers often are
numeric) and any other keys, which reach the reward as ``Sample.extra`` (e.g. ``teacher`` for
``rlkd``, ``problem`` for ``structured_qa``). Which of these a reward needs is
:mod:`sarl.rewards.inputs`'s table. Every problem is a :class:`SampleError` naming the field.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sarl.rewards.base import Sample

SAMPLE_FIELDS = ("response", "prompt", "ground_truth")
#: Group key of a group reward's sample: an exact string or integer (``"1"`` and ``1`` differ).
GroupKey = str | int


class SampleError(ValueError):
    """A sample object is malformed; the message names the field."""


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages (never the value: it may be huge)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def response_field(obj: Any) -> str:
    """The ``response`` string of a decoded JSON line; SampleError naming what is wrong."""
    if not isinstance(obj, dict):
        raise SampleError(f"expected a JSON object, got {json_type(obj)}")
    response = obj.get("response")
    if not isinstance(response, str):
        if "response" not in obj:
            raise SampleError("response: missing")
        raise SampleError(f"response: expected a string, got {json_type(response)}")
    return response


def parse_sample(obj: Any, *, exclude: Collection[str] = ()) -> Sample:
    """A decoded JSON object as a :class:`Sample`; keys in ``exclude`` stay out of ``extra``."""
    response = response_field(obj)
    prompt = obj.get("prompt", "")
    if not isinstance(prompt, str):
        raise SampleError(f"prompt: expected a string, got {json_type(prompt)}")
    truth = obj.get("ground_truth")
    if isinstance(truth, int | float) and not isinstance(truth, bool):
        truth = str(truth)
    if truth is not None and not isinstance(truth, str):
        raise SampleError(
            f"ground_truth: expected a string, a number or null, got {json_type(truth)}"
        )
    extra = {k: v for k, v in obj.items() if k not in SAMPLE_FIELDS and k not in exclude}
    return Sample(response=response, prompt=prompt, ground_truth=truth, extra=extra)


def group_key(obj: dict[str, Any], field: str) -> GroupKey:
    """The value of ``field`` that groups ``obj`` with its siblings (compared exactly)."""
    if field not in obj:
        raise SampleError(f"{field}: missing (the field samples are grouped by)")
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SampleError(
            f"{field}: expected a string or an integer to group by, got {json_type(value)}"
        )
    return value
