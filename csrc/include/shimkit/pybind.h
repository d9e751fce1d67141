// What a kernel's pybind11 bindings need from shimkit: tensors borrowed without copies, and Status
// turned into Python exceptions. Compiled into shimkit._C and into every kernel host module
// (csrc/python/dlpack.cpp), so a host module links neither libtorch nor shimkit._C for these.
#pragma once

#include <pybind11/pybind11.h>

#include "shimkit/status.h"
#include "shimkit/tensor_view.h"

namespace shimkit {
namespace bindings {

// Borrows a tensor (anything with __dlpack__: torch, numpy ...) as a TensorView without copying.
// The returned object keeps the DLPack capsule, and with it the producer's memory, alive.
struct BorrowedView {
  TensorView view;
  pybind11::object capsule;
};
BorrowedView borrow(pybind11::handle tensor, const char* name);

// Raises the Python exception matching `status` (ValueError for invalid arguments,
// NotImplementedError for unsupported ones, RuntimeError otherwise); returns if it is ok.
void raise_if_error(const Status& status);

}  // namespace bindings
}  // namespace shimkit
