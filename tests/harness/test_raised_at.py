"""``harness.errors.raised_at``: where a stored traceback's root error was raised."""

from __future__ import annotations

from harness.errors import describe_error, raised_at


def _lowering() -> None:
    raise KeyError("no rule")


def _compile() -> None:
    try:
        _lowering()
    except KeyError as why:
        raise RuntimeError("compile failed") from why


def _handler() -> None:
    try:
        _lowering()
    except KeyError:
        raise ValueError("while handling") from None


def test_a_chain_is_charged_to_the_frame_its_root_error_was_raised_in() -> None:
    try:
        _compile()
    except RuntimeError as exc:
        detail = describe_error(exc)[1]
    assert raised_at(detail).startswith("tests/harness/test_raised_at.py:")
    assert raised_at(detail).endswith(" in _lowering")


def test_a_single_error_and_text_without_frames() -> None:
    try:
        _handler()
    except ValueError as exc:
        detail = describe_error(exc)[1]
    assert raised_at(detail).endswith(" in _handler")  # `from None` hides the KeyError
    assert raised_at("worker died from signal 11 (log tail: ...)") is None
    assert raised_at(None) is None


def test_installed_packages_are_named_from_site_packages() -> None:
    detail = ('Traceback (most recent call last):\n  File "/x/lib/python3.11/site-packages/torch/_ops.py", '
              'line 12, in __call__\n    return f()\nRuntimeError: boom\n')
    assert raised_at(detail) == "torch/_ops.py:12 in __call__"
