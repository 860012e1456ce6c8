"""One line per benchmark failure."""

from __future__ import annotations


def error_line(why: BaseException) -> str:
    """The innermost cause of a failure in one line (Dynamo wraps a backend's error in its own)."""
    while getattr(why, "inner_exception", None) is not None or why.__cause__ is not None:
        why = getattr(why, "inner_exception", None) or why.__cause__  # type: ignore[assignment]
    text = str(why).strip().splitlines()
    return f"{type(why).__name__}: {text[0] if text else ''}"[:300]
