// Python bindings of shimkit._C, one registration function per area; module.cpp calls them all.
// Kernels' own bindings live in their plugin's host module, not here.
#pragma once

#include "shimkit/pybind.h"

namespace shimkit {
namespace bindings {

void register_sdk(pybind11::module_& m);

}  // namespace bindings
}  // namespace shimkit
