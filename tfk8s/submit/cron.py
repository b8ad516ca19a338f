"""Cron expressions of recurring runs, checked before any request: KFP's scheduler reads 6 fields (robfig/cron,
seconds first), so a 5-field Unix cron, which means something else there, is refused with the fix."""

from __future__ import annotations

import re

from tfk8s.submit.errors import CronError

CRON_FIELDS = ("seconds", "minutes", "hours", "day-of-month", "month", "day-of-week")
CRON_EXAMPLE = "'0 0 2 * * *' (02:00 every day)"

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_BOUNDS = {  # field -> (low, high, names)
    "seconds": (0, 59, {}),
    "minutes": (0, 59, {}),
    "hours": (0, 23, {}),
    "day-of-month": (1, 31, {}),
    "month": (1, 12, _MONTHS),
    "day-of-week": (0, 6, _DAYS),
}
_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_EVERY = re.compile(r"^@every\s+(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


def _cron_value(expr: str, field: str, text: str) -> int:
    low, high, names = _BOUNDS[field]
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit():
        hint = f" or a name ({', '.join(names)})" if names else ""
        raise CronError(
            f"cron {expr!r}: {field} field has {text!r}, expected a number {low}-{high}{hint}; "
            f"fields are {' '.join(CRON_FIELDS)}, e.g. {CRON_EXAMPLE}"
        )
    value = int(text)
    if not low <= value <= high:
        raise CronError(
            f"cron {expr!r}: {field} {value} is out of range {low}-{high}; "
            f"fields are {' '.join(CRON_FIELDS)}, e.g. {CRON_EXAMPLE}"
        )
    return value


def validate_cron(expr: str) -> str:
    """Check a KFP cron expression; returns it stripped.

    KFP's scheduler (robfig/cron) reads 6 fields, ``seconds minutes hours day-of-month month day-of-week``, or a
    descriptor (``@daily``, ``@every 6h``). A 5-field Unix cron is rejected here, because KFP would read
    ``0 2 * * *`` as "second 0 of minute 2 of every hour", not 02:00. Times are in the scheduler's time zone
    (the KFP controller's, usually UTC).

    Raises:
        CronError: the message names the field and shows an example, e.g. ``'0 0 2 * * *'`` for 02:00 daily.
    """
    expr = (expr or "").strip()
    if expr.startswith("@"):
        if expr in _DESCRIPTORS or _EVERY.match(expr):
            return expr
        raise CronError(
            f"cron {expr!r}: unknown descriptor; use one of {', '.join(sorted(_DESCRIPTORS))}, '@every 6h', "
            f"or 6 fields, e.g. {CRON_EXAMPLE}"
        )
    fields = expr.split()
    if len(fields) != 6:
        hint = f" (a 5-field Unix cron? prepend the seconds: {'0 ' + expr!r})" if len(fields) == 5 else ""
        raise CronError(
            f"cron {expr!r} has {len(fields)} fields; KFP cron has 6: {' '.join(CRON_FIELDS)}, "
            f"e.g. {CRON_EXAMPLE}{hint}"
        )
    for field, text in zip(CRON_FIELDS, fields, strict=True):
        for item in text.split(","):
            base, slash, step = item.partition("/")
            if slash and (not step.isdigit() or int(step) == 0):
                raise CronError(
                    f"cron {expr!r}: {field} step in {item!r} must be a positive number, e.g. */15; "
                    f"fields are {' '.join(CRON_FIELDS)}, e.g. {CRON_EXAMPLE}"
                )
            if base in ("*", "?"):
                if base == "?" and field not in ("day-of-month", "day-of-week"):
                    raise CronError(f"cron {expr!r}: '?' is only allowed in day-of-month or day-of-week")
                continue
            low_text, dash, high_text = base.partition("-")
            low = _cron_value(expr, field, low_text)
            if dash and low > _cron_value(expr, field, high_text):
                raise CronError(f"cron {expr!r}: {field} range {base!r} runs backwards")
    return expr
