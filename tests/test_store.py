"""The artifact store: a private root, entries verified before use, rebuilt when damaged, built once under a
lock, bounded and cleanable; and the builders on it (objects, libraries, MSL libraries, precompiled headers)
in folders whose names need escaping."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit import store as artifacts
from shimkit.cli import main as shimkit_main
from shimkit.csrc.build import compile_shared_library, parse_depfile
from shimkit.store import EnvironmentFailure, Store

AS_ROOT = os.geteuid() == 0


def _write(text: str):
    def produce(staging: Path) -> None:
        (staging / "artifact").write_text(text)
    return produce


def _entry(store: Store, kind: str = "thing", name: str = "a", text: str = "contents") -> Path:
    return store.build(kind, store.key(kind, [name]), _write(text)) / "artifact"


# -- the root -------------------------------------------------------------------------------------------------


def test_the_root_is_created_private(tmp_path):
    root = tmp_path / "new" / "store"
    _entry(Store(root))
    assert (os.stat(root).st_mode & 0o777) == 0o700


@pytest.mark.parametrize("problem", ["symlink", "world-writable", "group-writable", "another user", "a file"])
def test_a_root_others_could_plant_in_is_refused_naming_it(tmp_path, problem):
    root = tmp_path / "planted"
    if problem == "symlink":
        (tmp_path / "elsewhere").mkdir()
        root.symlink_to(tmp_path / "elsewhere")
    elif problem == "a file":
        root.write_text("")
    else:
        root.mkdir()
        if problem == "another user":
            if not AS_ROOT:
                pytest.skip("giving a folder to another user needs root")
            os.chown(root, 4242, 4242)
        else:
            os.chmod(root, 0o777 if problem == "world-writable" else 0o770)
    with pytest.raises(EnvironmentFailure, match=str(root)):
        _entry(Store(root))
    assert not list(tmp_path.rglob("artifact"))


def test_a_root_under_a_file_is_an_environment_failure(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(EnvironmentFailure, match="cannot be used"):
        _entry(Store(tmp_path / "file" / "store"))


def test_a_lock_file_replaced_by_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    store = Store(tmp_path / "store")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    key = store.key("thing", ["a"])
    (store.checked_root() / "thing").mkdir()
    (store.checked_root() / "thing" / f"{key[:artifacts.KEY_CHARS]}.lock").symlink_to(victim)
    with pytest.raises(EnvironmentFailure, match="symlink"):
        _entry(store)
    assert victim.read_text() == "precious"


# -- verification -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbled", "grown", "removed", "no manifest", "foreign",
                                    "extra file", "symlinked"])
def test_a_damaged_entry_is_rebuilt_and_said_so_once(tmp_path, damage, capsys):
    path = _entry(Store(tmp_path), text="contents")
    folder = path.parent
    if damage == "truncated":
        path.write_text("cont")
    elif damage == "garbled":
        path.write_text("CONTENTS")
    elif damage == "grown":
        path.write_text("contents and more")
    elif damage == "removed":
        path.unlink()
    elif damage == "no manifest":
        (folder / "manifest.json").unlink()
    elif damage == "foreign":  # another entry's whole folder, manifest and all, moved into this one's place
        other = _entry(Store(tmp_path), name="b", text="contents").parent
        os.rename(folder, tmp_path / "aside")
        os.rename(other, folder)
    elif damage == "extra file":
        (folder / "planted.so").write_text("")
    else:
        (tmp_path / "outside").write_text("contents")
        path.unlink()
        path.symlink_to(tmp_path / "outside")
    fresh = Store(tmp_path)
    assert fresh.lookup("thing", fresh.key("thing", ["a"])) is None
    rebuilt = _entry(fresh, text="contents")
    assert rebuilt.read_text() == "contents" and not rebuilt.is_symlink()
    assert _entry(fresh, text="contents") == rebuilt
    err = capsys.readouterr().err
    assert err.count("rebuilding the cached artifact") == 1, err


def test_an_entry_is_built_once_by_processes_that_need_it_at_once(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    workers = [context.Process(target=_build_counting, args=(str(tmp_path), barrier)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * 4
    assert (tmp_path / "builds").read_text() == "x"
    assert not list(tmp_path.glob("thing/.staging-*"))


def _build_counting(root: str, barrier) -> None:
    store = Store(Path(root) / "store")

    def produce(staging: Path) -> None:
        with open(Path(root) / "builds", "a") as counter:
            counter.write("x")
        (staging / "artifact").write_text("made")

    barrier.wait()
    path = store.build("thing", store.key("thing", ["shared"]), produce) / "artifact"
    os._exit(0 if path.read_text() == "made" else 1)


def test_a_failed_build_leaves_nothing_and_raises_what_failed(tmp_path):
    store = Store(tmp_path)

    def produce(staging: Path) -> None:
        (staging / "artifact").write_text("half")
        raise RuntimeError("the compiler said no")

    with pytest.raises(RuntimeError, match="the compiler said no"):
        store.build("thing", store.key("thing", ["a"]), produce)
    assert sorted(p.name for p in (tmp_path / "thing").iterdir()) == [f"{store.key('thing', ['a'])[:32]}.lock"]


def test_a_build_that_cannot_be_stored_is_an_environment_failure(tmp_path, monkeypatch):
    store = Store(tmp_path)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(artifacts.os, "fsync", full)
    with pytest.raises(EnvironmentFailure, match="the disk is full"):
        _entry(store)


# -- size -------------------------------------------------------------------------------------------------------


def _used(folder: Path, seconds_ago: float) -> float:
    import time

    stamp = time.time() - seconds_ago
    os.utime(folder, (stamp, stamp))
    return sum(p.stat().st_size for p in folder.iterdir())


def test_prune_removes_the_least_recently_used_first_and_spares_locked_entries(tmp_path):
    store = Store(tmp_path)
    folders = [_entry(store, name=str(n), text="x" * 1000).parent for n in range(4)]
    sizes = [_used(folder, ago) for folder, ago in zip(folders, (9000, 1000, 8000, 7000))]
    with store.locked("thing", store.key("thing", ["0"])):
        removed, freed = artifacts.prune(store, max_size=sizes[0] + sizes[1])
    # 0, the least recently used, is being built: left; then 2 and 3 go, and the store fits.
    assert [f.exists() for f in folders] == [True, True, False, False]
    assert (removed, freed) == (2, sizes[2] + sizes[3])


def test_prune_spares_what_was_just_used_and_clean_takes_everything_unlocked(tmp_path):
    store = Store(tmp_path)
    folders = [_entry(store, name=str(n)).parent for n in range(3)]
    assert artifacts.prune(store, max_size=0) == (0, 0)  # each was used a moment ago
    with store.locked("thing", store.key("thing", ["2"])):
        removed, _ = artifacts.clean(store)
    assert removed == 2 and [f.exists() for f in folders] == [False, False, True]
    assert [u.kind for u in artifacts.usage(store)] == ["thing"]


def test_the_cache_command_shows_prunes_and_cleans(tmp_path, capsys):
    store = Store(tmp_path)
    for n in range(3):
        _entry(store, kind="small", name=str(n))
    assert shimkit_main(["cache", "--root", str(tmp_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(k["kind"], k["entries"]) for k in shown["kinds"]] == [("small", 3)]
    assert shimkit_main(["cache", "--root", str(tmp_path), "clean", "--kind", "other"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert shimkit_main(["cache", "--root", str(tmp_path), "clean"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    (tmp_path / "elsewhere").symlink_to(tmp_path)
    assert shimkit_main(["cache", "--root", str(tmp_path / "elsewhere")]) == 2
    assert "symlink" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        shimkit_main(["cache", "prune", "--max-size", "lots"])
    assert "'lots' is not a size" in capsys.readouterr().err


@pytest.mark.parametrize("text, size", [("4096", 4096), ("2K", 2048), ("1.5M", 3 << 19), ("8GiB", 8 << 30),
                                        ("0", 0)])
def test_sizes_parse_with_binary_units(text, size):
    assert artifacts.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1G", "1Q", "nan", "inf", "G"])
def test_bad_sizes_are_refused_naming_them(text):
    with pytest.raises(ValueError, match=repr(text).replace("[", r"\[")):
        artifacts.parse_size(text)


# -- depfiles and paths that need escaping ----------------------------------------------------------------------

NAME = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\\:"), min_size=1, max_size=12)


def _make_escape(name: str) -> str:
    # As GCC's mkdeps writes a name: '$' doubled, a space or '#' behind a backslash.
    return name.replace("$", "$$").replace(" ", "\\ ").replace("#", "\\#")


@settings(max_examples=200, deadline=None)
@given(st.lists(NAME.filter(lambda n: n.strip() == n and n), min_size=1, max_size=6))
def test_depfiles_are_read_with_makes_escaping(names):
    text = "object: " + " \\\n  ".join(_make_escape(name) for name in names) + "\n"
    assert parse_depfile(text, "object") == names


def test_a_depfile_for_another_target_is_refused():
    with pytest.raises(ValueError, match="'object'"):
        parse_depfile("other.o: a.h\n", "object")


WEIRD = "dollar $HOME hash # quote \" space é"


def test_builds_work_in_folders_whose_names_need_escaping(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIMKIT_BUILD_DIR", str(tmp_path / f"store {WEIRD}"))
    sources = tmp_path / f"plugin {WEIRD}"
    sources.mkdir()
    (sources / "answer.h").write_text("inline int answer() { return 42; }\n")
    (sources / "answer.cpp").write_text('#include "answer.h"\nextern "C" __attribute__((visibility("default"))) int shimkit_answer() { return answer(); }\n')
    library = compile_shared_library("answer", [str(sources / "answer.cpp")])
    import ctypes

    assert ctypes.CDLL(str(library)).shimkit_answer() == 42
    # The object's recorded headers name the weird folder exactly: a changed header rebuilds it.
    (sources / "answer.h").write_text("inline int answer() { return 43; }\n")
    assert ctypes.CDLL(str(compile_shared_library("answer", [str(sources / "answer.cpp")]))).shimkit_answer() == 43
    assert not list((tmp_path / f"store {WEIRD}").rglob("*.tmp"))


def test_a_second_clone_reuses_the_first_clones_objects_and_a_changed_header_is_compiled(tmp_path, monkeypatch):
    from shimkit.csrc import build

    monkeypatch.setenv("SHIMKIT_BUILD_DIR", str(tmp_path / "store"))
    compiled = []
    real_run = build.run_compiler

    def counting(command, **kwargs):
        compiled.extend(arg for arg in command if arg.endswith(".cpp") and "-c" in command)
        return real_run(command, **kwargs)

    monkeypatch.setattr(build, "run_compiler", counting)

    def clone(name: str, value: int) -> Path:
        checkout = tmp_path / name
        (checkout / "kernels").mkdir(parents=True)
        (checkout / "kernels" / "answer.h").write_text(f"inline int answer() {{ return {value}; }}\n")
        (checkout / "kernels" / "answer.cpp").write_text(
            '#include "answer.h"\n#include <cassert>\nextern "C" __attribute__((visibility("default"))) '
            'int shimkit_answer() { assert(__FILE__[0] != 0); return answer(); }\n')
        monkeypatch.setitem(build.PORTABLE_ROOTS, "<checkout>", str(checkout))
        return checkout / "kernels" / "answer.cpp"

    import ctypes

    first = build.compile_shared_library("answer", [str(clone("first", 42))])
    assert ctypes.CDLL(str(first)).shimkit_answer() == 42 and len(compiled) == 1
    assert str(tmp_path / "first").encode() not in next((tmp_path / "store").glob("object/*/object.o")).read_bytes()
    second = build.compile_shared_library("answer", [str(clone("second", 42))])
    assert ctypes.CDLL(str(second)).shimkit_answer() == 42 and len(compiled) == 1   # linked, not compiled
    third = build.compile_shared_library("answer", [str(clone("third", 43))])       # same paths, other header
    assert ctypes.CDLL(str(third)).shimkit_answer() == 43 and len(compiled) == 2


def test_runtime_adapters_in_folders_with_quotes_are_included(tmp_path, monkeypatch):
    from shimkit.runtime.program import _adapter_unit

    monkeypatch.setenv("SHIMKIT_BUILD_DIR", str(tmp_path / "store"))
    folder = tmp_path / f"kernel {WEIRD}"
    folder.mkdir()
    (folder / "adapter.mm").write_text('extern "C" __attribute__((visibility("default"))) int shimkit_adapter_marker() { return 7; }\n')
    unit = _adapter_unit(str(folder / "adapter.mm"))
    library = compile_shared_library("adapter", [unit])
    import ctypes

    assert ctypes.CDLL(str(library)).shimkit_adapter_marker() == 7
    with pytest.raises(ValueError, match="line break"):
        _adapter_unit(str(tmp_path / "a\nb.mm"))


# -- the builders' artifacts, damaged on disk, in fresh processes -----------------------------------------------

COMPILE = textwrap.dedent("""
    import sys, torch
    from shimkit.metal.library import ShaderLibrary
    x = torch.zeros(4)
    ShaderLibrary("kernel void k(device float* x, uint i [[thread_position_in_grid]]) { x[i] = 7; }").k(x, threads=4)
    sys.exit(0 if x.tolist() == [7.0] * 4 else 1)
""")


def _run(code: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SHIMKIT_BUILD_DIR": str(root)})


def test_damaged_libraries_and_precompiled_headers_are_rebuilt_not_loaded(tmp_path):
    assert _run(COMPILE, tmp_path).returncode == 0
    [library] = tmp_path.glob("metal-library/*/library.so")
    headers = list(tmp_path.glob("metal-pch/*/metal_stdlib.gch"))
    library.write_bytes(os.urandom(library.stat().st_size))  # garbled: loading it crashed the audit (SIGTRAP)
    for header in headers:
        header.write_bytes(header.read_bytes()[:1000])  # truncated: "cannot read PCH file" for every kernel
    done = _run(COMPILE, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rebuilding the cached artifact" in done.stderr and f"{library.parent}" in done.stderr
    assert library.read_bytes()[:4] == b"\x7fELF"



def test_a_translation_names_no_folder_of_the_checkout_so_another_clone_reuses_its_builds():
    # A library's store key is its translated text: a path of this checkout in a line marker made every
    # clone rebuild all of its libraries.
    from shimkit.metal import library

    checkout = str(Path(library.__file__).resolve().parents[1])
    cooperative = ("#include <metal_stdlib>\nusing namespace metal;\nkernel void k(device float* x, uint i "
                   "[[thread_position_in_grid]]) { threadgroup float t[4]; t[i] = i; "
                   "threadgroup_barrier(mem_flags::mem_threadgroup); x[i] = t[3 - i]; }\n")
    plain = "kernel void k(device float* x, uint i [[thread_position_in_grid]]) { x[i] = 7; }"
    for source in (plain, cooperative):
        translation = library._translation(source)
        assert checkout not in translation.text and "k" in translation.kernels

SPLIT = textwrap.dedent('''
    import sys
    from shimkit.metal.library import ShaderLibrary
    source = """
        #include <metal_stdlib>
        using namespace metal;
        kernel void k(device float* x, uint i [[thread_position_in_grid]]) {
            threadgroup float t[4];
            t[i] = i; threadgroup_barrier(mem_flags::mem_threadgroup); x[i] = t[3 - i] + VALUE;
        }"""
    kernel = ShaderLibrary(source.replace("VALUE", sys.argv[1])).k
    sys.exit(0 if kernel.execution == "split" else 1)
''')


def test_libclangs_precompiled_header_is_built_once_for_every_process(tmp_path):
    pytest.importorskip("clang.cindex")
    for value in ("1", "2"):  # two kernels: each process splits one (a split text is stored too)
        done = subprocess.run([sys.executable, "-c", SPLIT, value], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "SHIMKIT_BUILD_DIR": str(tmp_path)})
        assert done.returncode == 0, done.stderr
    assert len(list(tmp_path.glob("metal-split/*/split.json"))) == 2
    assert len(list(tmp_path.glob("libclang-pch/*/metal_stdlib.pch"))) == 1


def test_a_store_and_an_audit_cache_reach_a_spawned_worker_by_their_root(tmp_path):
    """CUDA audits run each model in a spawned worker, which receives the audit cache pickled: the copy is a
    store at the same root (the caller's lock stays the caller's), and what it writes the caller reads."""
    import pickle

    from shimkit.audit.cache import AuditCache
    from shimkit.audit.parallel import failure_entry
    from shimkit.audit.workers import TaskFailure

    cache = AuditCache(tmp_path / "store")
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.directory == cache.directory and copy.store is not cache.store
    copy.put("key", failure_entry("m", TaskFailure("export", "RuntimeError: no", 1.0))[0])
    assert cache.get("key")["failure"]["message"] == "RuntimeError: no"


# -- the environment's prebuilt store ------------------------------------------------------------------------


def test_a_lookup_the_root_misses_is_answered_from_the_prebuilt_store_which_is_never_written(tmp_path):
    prebuilt = _entry(Store(tmp_path / "prebuilt"), name="shipped", text="from set-up")
    store = Store(tmp_path / "user", tmp_path / "prebuilt")

    def never(staging: Path) -> None:
        raise AssertionError("a prebuilt entry was built again")

    assert store.build("thing", store.key("thing", ["shipped"]), never) == prebuilt.parent
    built = _entry(store, name="new", text="built here")
    assert built.parent.parent.parent == tmp_path / "user" and built.read_text() == "built here"
    assert sorted(p.name for p in (tmp_path / "prebuilt" / "thing").iterdir() if p.is_dir()) == [prebuilt.parent.name]
    artifacts.clean(store)
    assert prebuilt.read_text() == "from set-up"  # clean and prune work on the user's root only
    assert store.lookup("thing", store.key("thing", ["shipped"])) == prebuilt.parent


def test_the_cache_command_shows_the_prebuilt_store_beside_the_users(tmp_path, monkeypatch, capsys):
    _entry(Store(tmp_path / "prebuilt"), name="shipped")
    _entry(Store(tmp_path / "user"), name="mine")
    monkeypatch.setenv(artifacts.PREBUILT_ENV, str(tmp_path / "prebuilt"))
    assert shimkit_main(["cache", "--root", str(tmp_path / "user")]) == 0
    assert f"read-only, {tmp_path / 'prebuilt'} ($SHIMKIT_PREBUILT_DIR): 1 entries" in capsys.readouterr().out
    assert shimkit_main(["cache", "--root", str(tmp_path / "user"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["prebuilt"]["root"] == str(tmp_path / "prebuilt")
    assert [(k["kind"], k["entries"]) for k in shown["prebuilt"]["kinds"]] == [("thing", 1)]
    assert shimkit_main(["cache", "--root", str(tmp_path / "user"), "clean"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out and (tmp_path / "prebuilt" / "thing").is_dir()
    monkeypatch.setenv(artifacts.PREBUILT_ENV, "")
    assert shimkit_main(["cache", "--root", str(tmp_path / "user"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prebuilt"] == {"root": None, "kinds": []}


@pytest.mark.parametrize("problem", ["group-writable", "symlink", "damaged entry"])
def test_a_prebuilt_store_or_entry_others_could_have_planted_is_not_used_and_said_so(tmp_path, problem, capsys):
    prebuilt = _entry(Store(tmp_path / "prebuilt"), name="shipped")
    root = tmp_path / "prebuilt"
    if problem == "group-writable":
        os.chmod(root, 0o770)
    elif problem == "symlink":
        os.rename(root, tmp_path / "real")
        root.symlink_to(tmp_path / "real")
    else:
        prebuilt.write_text("planted!")
    store = Store(tmp_path / "user", root)
    key = store.key("thing", ["shipped"])
    assert store.lookup("thing", key) is None
    rebuilt = _entry(store, name="shipped")
    assert rebuilt.parent.parent.parent == tmp_path / "user" and rebuilt.read_text() == "contents"
    err = capsys.readouterr().err
    assert err.count("not using the prebuilt") == 1 and str(root) in err, err


def test_no_prebuilt_store_is_read_where_the_variable_is_empty(tmp_path, monkeypatch):
    monkeypatch.setenv(artifacts.PREBUILT_ENV, "")
    assert artifacts.prebuilt_root() is None
    monkeypatch.setenv(artifacts.PREBUILT_ENV, str(tmp_path))
    assert artifacts.default_store(tmp_path / "user").prebuilt == tmp_path
    monkeypatch.delenv(artifacts.PREBUILT_ENV)
    assert artifacts.prebuilt_root() == Path(sys.prefix) / "share" / "shimkit" / "prebuilt"


def test_cache_prebuild_builds_what_a_program_then_compiles_nothing_for(tmp_path, monkeypatch):
    """What `./dev setup` runs: afterwards the stand-in runtime's every unit and shimkit.metal's runtime and
    precompiled headers are found there by a process whose own store is empty."""
    from shimkit.cli import _PREBUILD_KERNELS
    from shimkit.csrc import build
    from shimkit.metal.library import compile_shader
    from shimkit.runtime.program import compile_interface_object
    from shimkit.runtime.sources import compile_arguments, runtime_sources

    import torch

    done = subprocess.run([sys.executable, "-m", "shimkit", "cache", "--root", str(tmp_path / "prebuilt"), "prebuild"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"in {tmp_path / 'prebuilt'}" in done.stdout
    monkeypatch.setenv(artifacts.ROOT_ENV, str(tmp_path / "user"))
    monkeypatch.setenv(artifacts.PREBUILT_ENV, str(tmp_path / "prebuilt"))
    objects = build.compile_objects(runtime_sources(()), **compile_arguments())
    assert objects and [p for p in objects if not p.is_relative_to(tmp_path / "prebuilt")] == [], runtime_sources(())
    compile_interface_object()  # the part of every wrapper that AOTInductor's interface is
    library = compile_shader(_PREBUILD_KERNELS.replace("shimkit_prebuild", "other"))  # kernels of its own
    x = torch.ones(4)
    library.other_fill(x)
    assert x.tolist() == [0.0] * 4
    # Only the new library (and its kernel's split) was built: no runtime unit, interface, library or header.
    assert {u.kind for u in artifacts.usage(Store(tmp_path / "user"))} == {"metal-library", "metal-split"}
