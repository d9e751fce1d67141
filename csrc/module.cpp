// The pybind11 module shimkit._C: build facts, plus the bindings each kernel registers.
#include <pybind11/pybind11.h>

#include "bindings/bindings.h"

#ifndef SHIMKIT_WITH_METAL
#define SHIMKIT_WITH_METAL 0
#endif

namespace py = pybind11;

static py::dict build_info() {
  py::dict info;
#if defined(__clang__)
  info["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = std::string("gcc ") + __VERSION__;
#else
  info["compiler"] = std::string("unknown");
#endif
#if defined(__APPLE__)
  info["platform"] = "darwin";
#elif defined(__linux__)
  info["platform"] = "linux";
#else
  info["platform"] = "other";
#endif
  info["metal"] = static_cast<bool>(SHIMKIT_WITH_METAL);
  info["cplusplus"] = static_cast<long>(__cplusplus);
  return info;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "shimkit's compiled kernels: portable plans and reference implementations";
  m.def("build_info", &build_info,
        "Compiler, platform and whether Metal (.mm) sources were compiled into this build.");
  shimkit::bindings::register_sdk(m);
}
