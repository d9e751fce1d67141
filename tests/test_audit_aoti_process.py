"""The compiler trap behind the H100's AOTInductor crash (docs/cuda.md): a package whose ``wrapper.so`` was
linked with a static libstdc++ is refused with what to do, before loading it can crash the process. The
shared objects are built here with the machine's g++ both ways, as a ``$CXX`` wrapper script would."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from shimkit.audit.aoti_process import StaticLibstdcxx, check_dynamic_libstdcxx, main, needed_libraries

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

SOURCE = """
#include <regex>
#include <string>
extern "C" int matches(const char* text) { return std::regex_match(std::string(text), std::regex("cuda:[0-9]+")); }
"""


@pytest.fixture(scope="module")
def shared_objects(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("elf")
    (folder / "wrapper.cpp").write_text(SOURCE)
    built = {}
    for name, flags in (("dynamic", []), ("static", ["-static-libstdc++"])):
        built[name] = folder / f"{name}.wrapper.so"
        subprocess.run(["g++", "-shared", "-fPIC", "-O0", *flags, str(folder / "wrapper.cpp"), "-o",
                        str(built[name])], check=True)
    return built


def _package(path: Path, shared_object: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/archive_format", "pt2")
        archive.write(shared_object, "model/data/aotinductor/model/cabc123.wrapper.so")
    return path


def test_the_dynamic_section_is_read_as_readelf_reads_it(shared_objects):
    for shared_object in shared_objects.values():
        readelf = subprocess.run(["readelf", "-d", str(shared_object)], capture_output=True, text=True,
                                 check=True).stdout
        listed = [line.split("[", 1)[1].rstrip("]") for line in readelf.splitlines() if "(NEEDED)" in line]
        assert needed_libraries(shared_object.read_bytes()) == listed
    assert "libstdc++.so.6" in needed_libraries(shared_objects["dynamic"].read_bytes())
    assert not any(n.startswith("libstdc++") for n in needed_libraries(shared_objects["static"].read_bytes()))


def test_a_package_linked_with_a_static_libstdcxx_is_refused_with_the_way_out(shared_objects, tmp_path,
                                                                                 monkeypatch):
    check_dynamic_libstdcxx(str(_package(tmp_path / "fine.pt2", shared_objects["dynamic"])))
    bad = _package(tmp_path / "bad.pt2", shared_objects["static"])
    monkeypatch.setenv("CXX", "/opt/toolchain/bin/g++-wrapper")
    with pytest.raises(StaticLibstdcxx) as refused:
        check_dynamic_libstdcxx(str(bad))
    message = str(refused.value)
    assert "model/data/aotinductor/model/cabc123.wrapper.so" in message and str(bad) in message
    assert "$CXX=/opt/toolchain/bin/g++-wrapper" in message and "CXX=/usr/bin/g++" in message


def test_the_child_process_refuses_before_loading(shared_objects, tmp_path, capsys):
    bad = _package(tmp_path / "package.pt2", shared_objects["static"])
    status = main([str(bad), str(tmp_path / "inputs.pt"), str(tmp_path / "outputs.pt"), "cpu"])
    assert status == 3 and "refused to load" in capsys.readouterr().err
    assert not (tmp_path / "outputs.pt").exists()


def test_a_file_that_is_not_elf_is_named():
    with pytest.raises(ValueError, match="notes.txt is not a 64-bit little-endian ELF file"):
        needed_libraries(b"plain text", "notes.txt")
