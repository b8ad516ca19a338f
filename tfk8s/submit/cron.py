"""Cron expressions of recurring runs, checked before any request.

KFP's scheduler reads 6 fields (robfig/cron, seconds first), so a 5-field Unix cron, which means something else
there, is refused with the fix (:func:`validate_cron`). Argo's CronWorkflow reads 5 fields (robfig/cron's
``ParseStandard``, no seconds): :func:`argo_schedule` takes either and gives Argo's, converting a KFP cron whose
seconds field is 0 and refusing one that needs seconds.
"""

from __future__ import annotations

import re

from tfk8s.submit.errors import CronError

CRON_FIELDS = ("seconds", "minutes", "hours", "day-of-month", "month", "day-of-week")
CRON_EXAMPLE = "'0 0 2 * * *' (02:00 every day)"
ARGO_CRON_FIELDS = CRON_FIELDS[1:]
ARGO_CRON_EXAMPLE = "'0 2 * * *' (02:00 every day)"

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


def _cron_value(expr: str, field: str, text: str, names_of_fields: tuple = CRON_FIELDS,
                example: str = CRON_EXAMPLE) -> int:
    low, high, names = _BOUNDS[field]
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit():
        hint = f" or a name ({', '.join(names)})" if names else ""
        raise CronError(
            f"cron {expr!r}: {field} field has {text!r}, expected a number {low}-{high}{hint}; "
            f"fields are {' '.join(names_of_fields)}, e.g. {example}"
        )
    value = int(text)
    if not low <= value <= high:
        raise CronError(
            f"cron {expr!r}: {field} {value} is out of range {low}-{high}; "
            f"fields are {' '.join(names_of_fields)}, e.g. {example}"
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
        # a 5-field Unix cron: its own fix is the one example (for '0 2 * * *' it is CRON_EXAMPLE itself)
        fix = (f"; a 5-field Unix cron takes the seconds first: {'0 ' + expr!r}" if len(fields) == 5
               else f", e.g. {CRON_EXAMPLE}")
        raise CronError(f"cron {expr!r} has {len(fields)} fields; KFP cron has 6: {' '.join(CRON_FIELDS)}{fix}")
    _check_fields(expr, fields, CRON_FIELDS, CRON_EXAMPLE)
    return expr


def _check_fields(expr: str, fields: list[str], names: tuple, example: str) -> None:
    """Check each field of ``expr`` (split into ``fields``, named ``names``) against robfig/cron's syntax:
    ``*``, ``?`` (day fields), numbers or names, ``a-b`` ranges, ``/n`` steps, ``,`` lists."""
    for field, text in zip(names, fields, strict=True):
        for item in text.split(","):
            base, slash, step = item.partition("/")
            if slash and (not step.isdigit() or int(step) == 0):
                raise CronError(
                    f"cron {expr!r}: {field} step in {item!r} must be a positive number, e.g. */15; "
                    f"fields are {' '.join(names)}, e.g. {example}"
                )
            if base in ("*", "?"):
                if base == "?" and field not in ("day-of-month", "day-of-week"):
                    raise CronError(f"cron {expr!r}: '?' is only allowed in day-of-month or day-of-week")
                continue
            low_text, dash, high_text = base.partition("-")
            low = _cron_value(expr, field, low_text, names, example)
            if dash and low > _cron_value(expr, field, high_text, names, example):
                raise CronError(f"cron {expr!r}: {field} range {base!r} runs backwards")


def argo_schedule(expr: str) -> str:
    """The schedule of an Argo CronWorkflow for ``expr``, given in either format; returns Argo's 5-field form.

    Argo's controller parses ``spec.schedules`` with robfig/cron's ``ParseStandard``: 5 fields, ``minutes hours
    day-of-month month day-of-week``, or a descriptor (``@daily``, ``@every 6h``), no seconds. So:

    - 5 fields (Argo's, a Unix cron) or a descriptor: checked and returned as given;
    - 6 fields (KFP's, seconds first) whose seconds field is ``0``: converted, ``'0 0 2 * * *'`` -> ``'0 2 * * *'``;
    - 6 fields with other seconds (``'30 0 2 * * *'``, ``'*/10 * * * * *'``): refused, Argo cannot fire at a second.

    Raises:
        CronError: one line naming the difference between the formats or the field that is wrong.
    """
    expr = (expr or "").strip()
    if expr.startswith("@"):
        return validate_cron(expr)  # the same descriptors in both
    fields = expr.split()
    if len(fields) == 6:
        if fields[0] != "0":
            raise CronError(
                f"cron {expr!r} fires at second {fields[0]!r}: Argo's cron has 5 fields, "
                f"{' '.join(ARGO_CRON_FIELDS)}, no seconds; a 6-field KFP cron converts only when its seconds "
                f"field is 0 (e.g. '0 0 2 * * *' -> {ARGO_CRON_EXAMPLE})"
            )
        validate_cron(expr)
        return " ".join(fields[1:])
    if len(fields) != 5:
        raise CronError(
            f"cron {expr!r} has {len(fields)} fields; Argo's cron has 5: {' '.join(ARGO_CRON_FIELDS)}, "
            f"e.g. {ARGO_CRON_EXAMPLE} (or KFP's 6 with seconds 0 first: '0 0 2 * * *')"
        )
    _check_fields(expr, fields, ARGO_CRON_FIELDS, ARGO_CRON_EXAMPLE)
    return " ".join(fields)


def check_timezone(name: str) -> str:
    """Check an IANA time zone name (``Europe/Berlin``, ``UTC``) as Argo's controller loads it
    (``time.LoadLocation``); empty is allowed (the controller's own zone). Returns it.

    Raises:
        CronError: the zone is unknown, with examples.
    """
    import zoneinfo

    if not name:
        return name
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise CronError(f"time zone {name!r} is not an IANA time zone name; e.g. UTC, Europe/Berlin, "
                        f"America/New_York") from None
    return name
