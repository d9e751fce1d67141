"""shimkit's pytest plugin (entry point ``pytest11``): fixtures and hypothesis profiles.

Fixtures:

``shimkit_registry``
    A fresh plugin registry (built-ins only, no entry points), made the process-wide one for the test.
``register_plugin``
    ``register_plugin(plugin_or_record, name=None)`` registers a plugin module or object, or a bare
    :class:`~shimkit.registry.OpPlugin`/:class:`~shimkit.registry.PassSpec`, into that isolated
    registry; it is gone after the test.

A property test that calls into shimkit and sets no ``@settings`` of its own runs without hypothesis'
200 ms deadline (its first example compiles kernels or lowers a program): the ini option
``shimkit_deadline`` (``none``, or milliseconds) sets another.

Hypothesis profiles ``ci`` (derandomized: the same examples every run, 60 of them), ``dev`` (30 random
examples) and ``deep`` (1,000) are registered under those names unless the project registered its own.
A profile is loaded only on request, so other projects' hypothesis settings are untouched:
``--shimkit-profile=NAME``, ``SHIMKIT_HYPOTHESIS_PROFILE=NAME`` or the ini option
``shimkit_hypothesis_profile``; the name ``auto`` means ``ci`` when ``CI`` is set, else ``dev``.

This module is imported by every pytest run where shimkit is installed: it imports neither torch nor
hypothesis until a fixture or a profile is used.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"derandomize": True, "deadline": None, "max_examples": 60, "print_blob": True,
           "suppress_health_check": ("too_slow", "data_too_large")},
    "dev": {"deadline": None, "max_examples": 30},
    "deep": {"deadline": None, "max_examples": 1000},
}


def register_profiles() -> None:
    """Register ``ci``, ``dev`` and ``deep`` with hypothesis, leaving any of those names a project
    registered itself alone. Hypothesis' own built-in ``ci`` profile (100 examples) is no project's: ours
    replaces it."""
    import hypothesis._settings
    from hypothesis import HealthCheck, settings
    from hypothesis.errors import InvalidArgument

    builtin = {"ci": getattr(hypothesis._settings, "CI", None)}
    for name, options in PROFILES.items():
        try:
            if settings.get_profile(name) is not builtin.get(name):
                continue
        except InvalidArgument:
            pass
        options = dict(options)
        if "suppress_health_check" in options:
            options["suppress_health_check"] = [HealthCheck[c] for c in options["suppress_health_check"]]
        settings.register_profile(name, **options)


def activate_profile(name: str | None = None) -> str:
    """Register the profiles and load ``name`` (``None`` or ``auto``: ``SHIMKIT_HYPOTHESIS_PROFILE``,
    else ``ci`` when ``CI`` is set, else ``dev``). Returns the loaded name."""
    from hypothesis import settings

    register_profiles()
    if name in (None, "auto"):
        name = os.environ.get("SHIMKIT_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(name)
    return name


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("shimkit")
    group.addoption("--shimkit-profile", default=None, metavar="NAME",
                    help="load this hypothesis profile (ci, dev, deep, or auto: ci when CI is set)")
    parser.addini("shimkit_hypothesis_profile", default="",
                  help="hypothesis profile to load for this project (ci, dev, deep or auto)")
    parser.addini("shimkit_deadline", default="none",
                  help="the hypothesis deadline of property tests that call shimkit.testing and set no "
                       "@settings of their own: 'none' (the default: their first example compiles) or "
                       "milliseconds")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give property tests that call into shimkit a deadline that fits them (``shimkit_deadline``): their
    first example compiles kernels or lowers a program, seconds against hypothesis' 200 ms, which failed
    the README's and the plugin guide's own examples with ``DeadlineExceeded`` under plain ``pytest``. A
    test with its own ``@settings``, and every test that does not use shimkit, is left as it is."""
    deadline = _deadline(config.getini("shimkit_deadline"))
    for item in items:
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)  # a test method: its function carries hypothesis' settings
        if _uses_shimkit(test) and not getattr(test, "_hypothesis_internal_settings_applied", False):
            from hypothesis import settings

            settings(deadline=deadline)(test)


def _deadline(text: str) -> Any:
    if text.strip().lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(f"shimkit_deadline takes 'none' or milliseconds, got {text!r}") from None


def _uses_shimkit(test: Any) -> bool:
    """Whether ``test`` is a hypothesis property whose body names something of shimkit's."""
    inner = getattr(getattr(test, "hypothesis", None), "inner_test", None)
    code, names = getattr(inner, "__code__", None), getattr(inner, "__globals__", {})
    def of_shimkit(value: Any) -> bool:
        return str(getattr(value, "__module__", None) or getattr(value, "__name__", "")).startswith("shimkit")

    return code is not None and any(of_shimkit(names.get(name)) for name in code.co_names)


#: The run's ``shimkit_deadline`` (``None``: no deadline), also for the properties shimkit runs itself
#: (``assert_plugin_matches_reference``), which are not the test's own ``@given``.
DEADLINE: Any = None


@pytest.hookimpl(tryfirst=True)  # before hypothesis' own plugin loads --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    global DEADLINE
    DEADLINE = _deadline(config.getini("shimkit_deadline"))
    requested = (config.getoption("shimkit_profile") or os.environ.get("SHIMKIT_HYPOTHESIS_PROFILE")
                 or config.getini("shimkit_hypothesis_profile"))
    if requested:
        activate_profile(requested)
    elif (getattr(config.option, "hypothesis_profile", None) or "") in PROFILES:
        register_profiles()


@pytest.fixture
def shimkit_registry() -> Iterator[Any]:
    """An isolated registry (built-in plugins only) that is the process-wide one during the test."""
    from shimkit.backend import new_registry, use_registry

    with use_registry(new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})) as registry:
        yield registry


@pytest.fixture
def register_plugin(shimkit_registry: Any) -> Iterator[Any]:
    """Register plugins into the test's isolated registry; they are unregistered afterwards."""
    registered: list[str] = []

    def register(plugin: Any, name: str | None = None) -> str:
        plugin = _as_plugin(plugin)
        registered.append(shimkit_registry.register(plugin, name=name))
        return registered[-1]

    yield register
    for name in reversed(registered):
        shimkit_registry.unregister(name)


def _as_plugin(plugin: Any) -> Any:
    """Wrap a bare record in a hook implementation; pass modules and plugin objects through."""
    from shimkit.registry import OpPlugin, PassSpec, hookimpl

    if isinstance(plugin, OpPlugin):
        record = plugin

        class OpPluginHook:
            __name__ = f"op-plugin-{record.name}"

            @hookimpl
            def shimkit_op_plugins(self):
                yield record

        return OpPluginHook()
    if isinstance(plugin, PassSpec):
        spec = plugin

        class PassHook:
            __name__ = f"pass-{spec.name}"

            @hookimpl
            def shimkit_passes(self):
                yield spec

        return PassHook()
    return plugin
