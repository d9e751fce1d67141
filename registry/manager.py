"""Plugin discovery and collection: built-ins, entry points and explicit registration.

Environment (read when a registry is created, in the manner of pytest and llm):

``SHIMKIT_DISABLE_PLUGIN_AUTOLOAD=1``
    Do not load third-party entry points (group ``shimkit``); built-ins and plugins registered from code
    still load.
``SHIMKIT_BLOCK_PLUGINS=a,b``
    Block by name: an entry point, a built-in module (``mm``), an op plugin or a pass. Blocked entry
    points are not even imported. Blocked records stay visible (``shimkit plugins`` shows them) so the
    audit can point at a blocked plugin that would fix a missing kernel.
``SHIMKIT_ALLOW_PLUGINS=a,b``
    Load only these third-party entry points; the others are listed as not allowed and not imported.
``SHIMKIT_STRICT_PLUGINS=1``
    A plugin that fails to import, whose hook raises, that yields a malformed record, that claims an
    op or C symbol another plugin already provides at the same priority, or whose import is slow
    raises :class:`~shimkit.registry.errors.PluginLoadError` instead of being reported (and, but for
    a slow import, skipped).
``SHIMKIT_SLOW_PLUGIN_SECONDS=2``
    An entry point whose import takes longer is reported (stage ``slow``); it is still loaded.

A registry may be used from several threads: discovery happens in the constructor, collection and
every later registration under one lock.
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
import time
import traceback
import types
import warnings
from importlib import metadata
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

import pluggy

import shimkit.registry.hookspecs as hookspecs
from shimkit._interrupts import is_ctrl_c, telling_ctrl_c_apart
from shimkit.registry.errors import InvalidPluginRecord, PluginLoadError, ShimkitPluginError
from shimkit.registry.entries import PluginProblem, PluginSource, Registered
from shimkit.registry.records import OpPlugin, PassSpec

ENTRY_POINT_GROUP = "shimkit"
_RECORD_TYPES = {"shimkit_op_plugins": OpPlugin, "shimkit_passes": PassSpec}


def _env_list(env: Mapping[str, str], key: str) -> frozenset[str] | None:
    raw = env.get(key)
    if raw is None:
        return None
    return frozenset(item.strip() for item in raw.split(",") if item.strip())


# Records a hook wrapper adds itself belong to no one plugin's implementation.
_WRAPPER_SOURCE = PluginSource("code", "<hook wrapper>", "<hook wrapper>")


class PluginRegistry:
    """Discovers shimkit plugins and collects their records.

    >>> registry = PluginRegistry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"},
    ...                           builtins=("shimkit.plugins.mm", "shimkit.plugins.bmm"))
    >>> sorted(p.name for p in registry.op_plugins())
    ['bmm', 'mm']

    ``env`` defaults to ``os.environ``; tests pass their own mapping instead of mutating the process.
    ``builtins`` names the modules registered first, as built-ins (``shimkit.backend.new_registry``
    hands it shimkit's own).
    """

    def __init__(self, env: Mapping[str, str] | None = None, *, builtins: Sequence[str] = (),
                 load: bool = True) -> None:
        env = os.environ if env is None else env
        self.autoload = env.get("SHIMKIT_DISABLE_PLUGIN_AUTOLOAD", "") not in ("1", "true", "yes")
        self.blocked_names = _env_list(env, "SHIMKIT_BLOCK_PLUGINS") or frozenset()
        self.allowed_entry_points = _env_list(env, "SHIMKIT_ALLOW_PLUGINS")
        self.strict = env.get("SHIMKIT_STRICT_PLUGINS", "") in ("1", "true", "yes")
        self.slow_import_seconds = float(env.get("SHIMKIT_SLOW_PLUGIN_SECONDS", "2"))
        self._lock = threading.RLock()
        self._manager = pluggy.PluginManager(hookspecs.PROJECT)
        self._manager.add_hookspecs(hookspecs)
        self._sources: dict[str, PluginSource] = {}
        self._problems: list[PluginProblem] = []
        self._records: tuple[list[Registered[OpPlugin]], list[Registered[PassSpec]]] | None = None
        self._origins: dict[int, tuple[Any, PluginSource]] = {}
        if load:
            self._load_builtins(builtins)
            if self.autoload:
                self._load_entry_points()

    # -- discovery -------------------------------------------------------------------------------
    def _load_builtins(self, module_names: Sequence[str]) -> None:
        for module_name in module_names:
            # Blocked built-ins still load: their records stay visible, marked blocked.
            self._load_module(module_name, PluginSource("builtin", module_name.rsplit(".", 1)[-1], module_name))

    def _load_entry_points(self) -> None:
        # A stable order, whatever the order packages were installed or discovered in: it settles ties.
        for entry_point in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP),
                                  key=lambda e: (e.name, e.dist.name if e.dist else "", e.value)):
            distribution = getattr(getattr(entry_point, "dist", None), "name", None)
            source = PluginSource("entry_point", entry_point.name, entry_point.value, distribution)
            if entry_point.name in self.blocked_names or distribution in self.blocked_names:
                self._manager.set_blocked(entry_point.name)
                self._sources[entry_point.name] = source
                continue
            if self.allowed_entry_points is not None and entry_point.name not in self.allowed_entry_points:
                self._problems.append(PluginProblem(source, "not-allowed",
                                                    "not listed in SHIMKIT_ALLOW_PLUGINS; not imported"))
                continue
            started = time.perf_counter()
            with telling_ctrl_c_apart() as ctrl_c:
                try:
                    plugin = entry_point.load()
                except (Exception, SystemExit, KeyboardInterrupt) as error:
                    if is_ctrl_c(error, ctrl_c):
                        raise
                    self._report(source, "import", error)  # a broken third-party import must not take shimkit down
                    continue
            seconds = time.perf_counter() - started
            if seconds > self.slow_import_seconds:
                self._report(source, "slow", f"importing it took {seconds:.2f} s (more than "
                             f"SHIMKIT_SLOW_PLUGIN_SECONDS={self.slow_import_seconds:g}); it is loaded")
            self._register(plugin, entry_point.name, source)

    def _load_module(self, module_name: str, source: PluginSource) -> None:
        try:
            module = importlib.import_module(module_name)
        except Exception as error:
            self._report(source, "import", error)
            return
        self._register(module, module_name, source)

    def _add(self, plugin: Any, name: str, source: PluginSource) -> None:
        """Register with pluggy, refusing hooks shimkit does not define (pluggy's ``check_pending``:
        a misspelt hook would otherwise be silently ignored). What pluggy registers is a stand-in
        whose hook implementations report their own failures (:meth:`_attributed`), with the
        plugin's markers (``tryfirst``, ``wrapper`` ...) and signatures. Raises on any problem,
        leaving nothing registered."""
        self._manager.register(self._attributing_stand_in(plugin, source), name=name)
        try:
            self._manager.check_pending()
        except pluggy.PluginValidationError as error:
            self._manager.unregister(name=name)
            raise InvalidPluginRecord(f"{error} (shimkit defines shimkit_op_plugins and shimkit_passes)") from None

    def _attributing_stand_in(self, plugin: Any, source: PluginSource) -> Any:
        stand_in = types.SimpleNamespace(__name__=getattr(plugin, "__name__", type(plugin).__name__))
        for attribute in dir(plugin):
            function = getattr(plugin, attribute, None)
            options = getattr(function, f"{hookspecs.PROJECT}_impl", None)
            if options is None or not callable(function):
                continue
            if attribute in _RECORD_TYPES and not (options.get("wrapper") or options.get("hookwrapper")):
                function = self._attributed(function, attribute, _RECORD_TYPES[attribute], source)
            setattr(stand_in, attribute, function)
        return stand_in

    def _attributed(self, function: Callable[[], Any], hook_name: str, record_type: type,
                    source: PluginSource) -> Callable[[], Any]:
        """``function`` as pluggy will call it: its records listed and type-checked, each remembered
        as this plugin's, and any failure reported against this plugin (the hook then contributes
        nothing, and the other plugins' implementations still run) — as conda does inside pluggy's
        hook execution."""
        @functools.wraps(function)  # keeps the hookimpl marker and the signature pluggy checks
        def attributed() -> list[Any] | None:
            with telling_ctrl_c_apart() as ctrl_c:
                try:
                    produced = function()
                    records = list(produced) if produced is not None else []
                except (Exception, SystemExit, KeyboardInterrupt) as error:
                    if is_ctrl_c(error, ctrl_c):
                        raise
                    self._report(source, "hook", error)  # sys.exit() in a hook ends that hook, not shimkit
                    return None
            bad = sorted({type(r).__name__ for r in records if not isinstance(r, record_type)})
            if bad:
                self._report(source, "record", InvalidPluginRecord(
                    f"{hook_name} must yield {record_type.__name__} records, got {', '.join(bad)}"))
                return None
            for record in records:
                self._origins[id(record)] = (record, source)
            return records

        return attributed

    def _register(self, plugin: Any, name: str, source: PluginSource) -> None:
        try:
            self._add(plugin, name, source)
        except (Exception, SystemExit) as error:
            self._report(source, "import", error)
            return
        self._sources[name] = source
        self._records = None

    def load_index(self, source: PluginSource) -> int:
        """When the plugin behind ``source`` was registered, relative to the others (built-ins first,
        then entry points by entry-point name and distribution name, then code registrations): what settles
        ties between equals."""
        sources = list(self._sources.values())
        return sources.index(source) if source in sources else len(sources)

    def register(self, plugin: ModuleType | object, name: str | None = None) -> str:
        """Register a plugin object or module from code; returns the name it is registered under."""
        with self._lock:
            return self._register_from_code(plugin, name)

    def _register_from_code(self, plugin: ModuleType | object, name: str | None) -> str:
        name = name or getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{id(plugin):x}"
        module = getattr(plugin, "__name__", type(plugin).__module__)
        if self._manager.get_plugin(name) is not None:
            raise ShimkitPluginError(f"a plugin named {name!r} is already registered "
                                     f"({self._sources[name].describe()})")
        source = PluginSource("code", name, module)
        try:
            self._add(plugin, name, source)
        except Exception as error:  # the caller is right here: tell it, rather than warn and skip
            raise ShimkitPluginError(f"cannot register plugin {name!r} ({module}): {error}") from error
        self._sources[name] = source
        self._records = None
        return name

    def unregister(self, name: str) -> None:
        """Remove a plugin registered under ``name``."""
        with self._lock:
            if self._manager.get_plugin(name) is None:
                raise KeyError(f"no plugin registered as {name!r}")
            self._manager.unregister(name=name)
            del self._sources[name]
            self._records = None

    def _report(self, source: PluginSource, stage: str, error: BaseException | str) -> None:
        if isinstance(error, BaseException):
            frame = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
            where = f" (at {frame[0].filename}:{frame[0].lineno})" if frame else ""
            message = f"{type(error).__name__}: {error}{where}"
        else:
            message = error
        problem = PluginProblem(source, stage, message)
        if problem in self._problems:  # found again by a later derivation: reported once
            return
        if self.strict:
            raise PluginLoadError(problem.describe() + " [SHIMKIT_STRICT_PLUGINS=1]") from (
                error if isinstance(error, BaseException) else None)
        warnings.warn(f"shimkit: skipping plugin: {problem.describe()}", stacklevel=3)
        self._problems.append(problem)

    # -- collection ------------------------------------------------------------------------------
    def _collect(self) -> tuple[list[Registered[OpPlugin]], list[Registered[PassSpec]]]:
        with self._lock:
            if self._records is None:
                self._records = (self._call_hook(self._manager.hook.shimkit_op_plugins),
                                 self._call_hook(self._manager.hook.shimkit_passes))
            return self._records

    def _call_hook(self, hook: Any) -> list[Registered[Any]]:
        """Call a hook through pluggy, so ``tryfirst``/``trylast`` and wrappers behave as in pluggy
        and pytest: records come in pluggy's call order (later registrations first, ``tryfirst``
        before, ``trylast`` after), each with the plugin that produced it."""
        self._origins = {}
        collected = []
        for records in hook():
            for record in records:
                origin = self._origins.get(id(record))
                source = origin[1] if origin is not None and origin[0] is record else _WRAPPER_SOURCE
                blocked = source.name in self.blocked_names or record.name in self.blocked_names
                collected.append(Registered(record, source, blocked))
        return collected

    @property
    def problems(self) -> tuple[PluginProblem, ...]:
        """Plugins reported and skipped (import, hook or record errors; not-allowed entry points)."""
        self._collect()
        return tuple(self._problems)

    def op_plugins(self, include_blocked: bool = False) -> list[Registered[OpPlugin]]:
        return [r for r in self._collect()[0] if include_blocked or not r.blocked]

    def pass_specs(self, include_blocked: bool = False) -> list[Registered[PassSpec]]:
        return [r for r in self._collect()[1] if include_blocked or not r.blocked]

    def blocked_sources(self) -> list[PluginSource]:
        return [s for s in self._sources.values()
                if s.name in self.blocked_names or (s.distribution is not None and s.distribution in self.blocked_names)]

    def report_conflict(self, loser: PluginSource, message: str) -> None:
        """A plugin that lost a tie over an op or symbol it claims (see ``derive``): reported, or
        raised in strict mode."""
        with self._lock:
            self._report(loser, "conflict", message)

    def report_problem(self, source: PluginSource, stage: str, message: str) -> None:
        """A plugin whose data or code fails while the backend is derived (an op that does not exist:
        stage ``op``; a pass factory that raises: stage ``pass``): reported, or raised in strict mode."""
        with self._lock:
            self._report(source, stage, message)

    def backend_config(self, device: str):
        """Derive the backend configuration for ``device`` from the active plugins."""
        from shimkit.registry.derive import derive_backend_config

        return derive_backend_config(self, device)
