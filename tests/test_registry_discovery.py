"""Discovery: built-ins, entry points, code registration, env switches, broken plugins."""

import sys
import types

import pytest

from registry_helpers import CLEAN_ENV, install_distribution
from shimkit.backend import new_registry
from shimkit.registry import OpPlugin, PassSpec, PluginLoadError, ShimkitPluginError, hookimpl

BUILTINS = {"mm", "bmm", "convolution", "topk", "sdpa", "torchao-linear-4bit", "gather-qmv",
            "gated-delta-rule", "addmm", "view-copy"}

GOOD_PLUGIN = """
import torch
from shimkit.registry import OpPlugin, hookimpl

@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(name="{name}", ops=("aten::erfinv",), decompositions={{"aten::erfinv": torch.erfinv}})
"""


def names(registry, **kwargs):
    return {entry.name for entry in registry.op_plugins(**kwargs)}


def test_builtins_load_without_autoload():
    registry = new_registry(env=CLEAN_ENV)
    assert BUILTINS <= names(registry)
    assert all(e.source.kind == "builtin" for e in registry.op_plugins())
    assert registry.problems == ()


def test_a_builtin_for_a_module_this_torch_lacks_loads_quietly():
    # torch 2.11 has no torch.nn.modules.linear_cross_entropy: the built-in that decomposes its ops made every
    # registry there report a problem (found running the suite on the GPU machine). A fresh interpreter, as
    # the torch module table is process state.
    import subprocess

    probe = """
import sys
import torch
sys.modules["torch.nn.modules.linear_cross_entropy"] = None  # as on a release without the module
from shimkit.backend import new_registry
registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})
print("PROBLEMS", registry.problems)
print("LOADED", "linear-cross-entropy" in {entry.name for entry in registry.op_plugins()})
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("PROBLEMS", "LOADED")))
    assert lines == {"PROBLEMS": "()", "LOADED": "True"}, done.stdout + done.stderr[-2000:]


def test_example_package_is_discovered_through_its_entry_point():
    registry = new_registry(env={})
    (entry,) = [e for e in registry.op_plugins() if e.name == "example-logaddexp"]
    assert entry.source.kind == "entry_point"
    assert entry.source.name == "example"
    assert entry.source.distribution == "shimkit-example-plugin"
    assert "aten::logaddexp.default" in entry.record.decompositions


def test_disable_autoload_skips_entry_points():
    assert "example-logaddexp" not in names(new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}))


@pytest.mark.parametrize("blocked_name", ["blocked_ep", "blocked-dist"])
def test_block_entry_point_is_not_imported_and_is_listed(tmp_path, monkeypatch, blocked_name):
    from shimkit.cli import plugins_report

    install_distribution(tmp_path, "blocked-dist", {"blocked_ep": "blocked_mod"},
                         {"blocked_mod": "raise RuntimeError('must not be imported')"})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = new_registry(env={"SHIMKIT_BLOCK_PLUGINS": blocked_name})
    assert "blocked_mod" not in sys.modules
    assert registry.problems == ()
    assert [s.name for s in registry.blocked_sources()] == ["blocked_ep"]
    # By its entry point's name or its distribution's, it is listed as blocked, not left out of the listing.
    (listed,) = plugins_report(registry)["blocked_sources"]
    assert listed == {"kind": "entry_point", "name": "blocked_ep", "module": "blocked_mod",
                      "distribution": "blocked-dist"}


def test_block_builtin_module_and_op_plugin_names():
    registry = new_registry(env={**CLEAN_ENV, "SHIMKIT_BLOCK_PLUGINS": "mm, addmm"})
    assert "mm" not in names(registry) and "addmm" not in names(registry)
    blocked = {e.name for e in registry.op_plugins(include_blocked=True) if e.blocked}
    assert blocked == {"mm", "addmm"}
    config = registry.backend_config("mps")
    assert "aoti_torch_mps_mm_out" not in config.fallback_kernels
    assert "aoti_torch_mps_bmm_out" in config.fallback_kernels


def test_allow_list_limits_entry_points(tmp_path, monkeypatch):
    install_distribution(tmp_path, "other-dist", {"other": "other_plugin"},
                         {"other_plugin": GOOD_PLUGIN.format(name="other-erfinv")})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = new_registry(env={"SHIMKIT_ALLOW_PLUGINS": "other"})
    assert "other-erfinv" in names(registry)
    assert "example-logaddexp" not in names(registry)
    assert BUILTINS <= names(registry)
    (problem,) = registry.problems
    assert (problem.source.name, problem.stage) == ("example", "not-allowed")


BROKEN = {
    "import": "raise ImportError('no such native library: libfoo.so')",
    "hook": """
from shimkit.registry import hookimpl
@hookimpl
def shimkit_op_plugins():
    raise ValueError('hook exploded')
""",
    "record": """
from shimkit.registry import hookimpl
@hookimpl
def shimkit_op_plugins():
    yield {'name': 'not-a-record'}
""",
    "invalid": """
from shimkit.registry import OpPlugin, Shim, hookimpl
@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(name="bad", ops=("aten::mm",),
                   shims=(Shim(op="aten::mm", device="mps", symbol="not a symbol", provided_by_runtime=True),))
""",
    "misspelt": """
from shimkit.registry import hookimpl
@hookimpl
def shimkit_op_plugin():
    return []
""",
}
EXPECTED = {"misspelt": ("import", "unknown hook 'shimkit_op_plugin'"), "import": ("import", "libfoo.so"), "hook": ("hook", "hook exploded"),
            "record": ("record", "got dict"), "invalid": ("hook", "symbol must be a C identifier")}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_plugin_is_reported_by_name_and_skipped(kind, tmp_path, monkeypatch):
    module = f"broken_{kind}_plugin"
    install_distribution(tmp_path, f"broken-{kind}", {f"broken-{kind}": module}, {module: BROKEN[kind]})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match=f"broken-{kind}"):
        registry = new_registry(env={})
        problems = registry.problems
    (problem,) = problems
    stage, text = EXPECTED[kind]
    assert problem.stage == stage and text in problem.message
    assert problem.source.name == f"broken-{kind}" and problem.source.module == module
    assert problem.source.distribution == f"broken-{kind}"
    assert BUILTINS <= names(registry)
    assert "aoti_torch_mps_mm_out" in registry.backend_config("mps").fallback_kernels


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_strict_mode_raises(kind, tmp_path, monkeypatch):
    module = f"strict_{kind}_plugin"
    install_distribution(tmp_path, f"strict-{kind}", {f"strict-{kind}": module}, {module: BROKEN[kind]})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match=f"strict-{kind}"):
        new_registry(env={"SHIMKIT_STRICT_PLUGINS": "1"}).op_plugins()


def test_register_from_code_and_unregister():
    registry = new_registry(env=CLEAN_ENV)

    class ErfinvPlugin:
        @hookimpl
        def shimkit_op_plugins(self):
            yield OpPlugin(name="erfinv", ops=("aten::erfinv",), decompositions={"aten::erfinv": lambda x: x})

    name = registry.register(ErfinvPlugin(), name="erfinv-plugin")
    (entry,) = [e for e in registry.op_plugins() if e.name == "erfinv"]
    assert entry.source.kind == "code" and entry.source.name == "erfinv-plugin"
    with pytest.raises(ShimkitPluginError, match="already registered"):
        registry.register(ErfinvPlugin(), name="erfinv-plugin")
    registry.unregister(name)
    assert "erfinv" not in names(registry)


def test_module_registered_from_code():
    registry = new_registry(env=CLEAN_ENV)
    module = types.ModuleType("my_inline_plugin")
    exec(GOOD_PLUGIN.format(name="inline-erfinv"), module.__dict__)
    registry.register(module)
    assert "inline-erfinv" in names(registry)


def test_registering_a_malformed_plugin_from_code_raises_naming_it():
    class MisspelledHook:
        @hookimpl
        def shimkit_op_plugin(self):  # no such hook
            return []

    registry = new_registry(env=CLEAN_ENV)
    with pytest.raises(ShimkitPluginError, match="cannot register plugin 'misspelled'.*shimkit_op_plugin"):
        registry.register(MisspelledHook(), name="misspelled")
    assert registry.problems == ()


def _pass_plugin(name):
    class Plugin:
        @hookimpl
        def shimkit_passes(self):
            yield PassSpec(name=name, factory=lambda capabilities: (lambda gm: None))
    return Plugin()


def test_hooks_are_called_through_pluggy_so_tryfirst_and_trylast_order_the_records():
    class First:
        @hookimpl(tryfirst=True)
        def shimkit_passes(self):
            yield PassSpec(name="b-first", factory=lambda capabilities: (lambda gm: None))

    class Last:
        @hookimpl(trylast=True)
        def shimkit_passes(self):
            yield PassSpec(name="c-last", factory=lambda capabilities: (lambda gm: None))

    registry = new_registry(env=CLEAN_ENV)
    registry.register(First(), name="first")
    registry.register(_pass_plugin("a-plain"), name="plain")
    registry.register(Last(), name="last")
    own = [e.name for e in registry.pass_specs() if e.name in ("a-plain", "b-first", "c-last")]
    assert own == ["b-first", "a-plain", "c-last"]
    by_name = {e.name: e.source.name for e in registry.pass_specs()}
    assert by_name["b-first"] == "first" and by_name["c-last"] == "last"  # still attributed


def test_a_hook_wrapper_sees_and_may_filter_every_plugins_records():
    seen = []

    class Filter:
        @hookimpl(wrapper=True)
        def shimkit_passes(self):
            results = yield
            seen.extend(spec.name for records in results for spec in records)
            return [[spec for spec in records if spec.name != "dropped"] for records in results]

    registry = new_registry(env=CLEAN_ENV)
    registry.register(_pass_plugin("dropped"), name="dropped-plugin")
    registry.register(_pass_plugin("kept"), name="kept-plugin")
    registry.register(Filter(), name="filter")
    names = [e.name for e in registry.pass_specs()]
    assert "kept" in names and "dropped" not in names and "dropped" in seen


def test_a_failing_hook_is_reported_against_its_plugin_while_the_others_run():
    class Broken:
        @hookimpl(tryfirst=True)
        def shimkit_passes(self):
            raise RuntimeError("pass hook exploded")

    registry = new_registry(env=CLEAN_ENV)
    registry.register(Broken(), name="broken")
    registry.register(_pass_plugin("fine"), name="fine-plugin")
    with pytest.warns(UserWarning, match="registered from code 'broken'.*pass hook exploded"):
        names = [e.name for e in registry.pass_specs()]
    assert "fine" in names and "view_copy_to_view" in names


MISNAMED_OPS = """
import torch
from shimkit.registry import OpPlugin, hookimpl

def _double(x):
    return x + x

@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(name="misnamed", ops=("aten::addmmm", "aten::mul.Tensor", "torchao_mps_only::int4mm"),
                   decompositions={"aten::addmmm": _double, "torchao_mps_only::int4mm": _double},
                   generated_on={"aten::mul.Tensor": ("mps",)},
                   doc="one misspelt aten op, one real op, one op of a library not loaded here")
"""


def test_an_op_that_does_not_exist_is_that_plugins_problem_and_the_rest_works(tmp_path, monkeypatch):
    install_distribution(tmp_path, "misnamed-ops", {"misnamed-ops": "misnamed_ops"}, {"misnamed_ops": MISNAMED_OPS})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = new_registry(env={})
    with pytest.warns(UserWarning, match="misnamed-ops"):
        config = registry.backend_config("mps")
    assert config.decomposition_table and "aten::mul.Tensor" in config.capabilities.generated
    assert not any("addmmm" in str(op) or "int4mm" in str(op) for op in config.decomposition_table)
    (problem,) = registry.problems
    assert problem.stage == "op" and "misnamed-ops" in problem.describe()
    # Only the misspelt aten op is a problem: the unloaded library's op is simply not available here.
    assert "aten::addmmm.default" in problem.message and "int4mm" not in problem.message
    strict = new_registry(env={"SHIMKIT_STRICT_PLUGINS": "1"})
    with pytest.raises(PluginLoadError, match="misnamed-ops.*aten::addmmm"):
        strict.backend_config("mps")


RAISING_FACTORY = """
from shimkit.registry import PassSpec, hookimpl

def _factory(capabilities):
    raise RuntimeError("no pass for you")

@hookimpl
def shimkit_passes():
    yield PassSpec(name="raising_factory", factory=_factory, doc="its factory raises")
"""


def test_a_raising_pass_factory_is_that_plugins_problem_and_the_rest_works(tmp_path, monkeypatch):
    install_distribution(tmp_path, "raising-pass", {"raising-pass": "raising_pass"}, {"raising_pass": RAISING_FACTORY})
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = new_registry(env={})
    with pytest.warns(UserWarning, match="raising-pass"):
        config = registry.backend_config("mps")
    assert "raising_factory" not in config.pass_names and "plugin_decompositions" in config.pass_names
    (problem,) = registry.problems
    assert problem.stage == "pass" and "RuntimeError: no pass for you" in problem.message
    with pytest.raises(PluginLoadError, match="raising-pass.*no pass for you"):
        new_registry(env={"SHIMKIT_STRICT_PLUGINS": "1"}).backend_config("mps")
