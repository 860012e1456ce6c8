"""Plugins: modules imported before any check runs, in the minimizer, its workers and its repros.

``CRUCIBLE_MINIFY_PLUGINS=pkg.mod,other.mod`` (or ``crucible minify --plugin MOD``) names them. A
plugin registers what a check needs and that only exists after an import: a Dynamo backend defined
outside torch, or, as a testing aid, a deliberately broken lowering that the minimizer's own tests
plant. The variable is the only channel, so a spawned worker sees exactly what its parent saw.
"""

from __future__ import annotations

import importlib
import os

PLUGINS_ENV = "CRUCIBLE_MINIFY_PLUGINS"


def plugin_names() -> list[str]:
    return [name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip()]


def set_plugins(names: list[str]) -> None:
    """Add ``names`` to the environment (inherited by spawned workers) and import them here."""
    merged = list(dict.fromkeys(plugin_names() + list(names)))
    if merged:
        os.environ[PLUGINS_ENV] = ",".join(merged)
    load_plugins()


def load_plugins() -> list[str]:
    """Import every plugin named in the environment; a missing one is a clear error."""
    names = plugin_names()
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"{PLUGINS_ENV}: cannot import plugin {name!r} ({exc}); "
                             f"check the module path and PYTHONPATH") from None
    return names
