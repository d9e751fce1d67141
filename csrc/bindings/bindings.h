// Python bindings of shimkit._C, one registration function per area; module.cpp calls them all.
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

void register_sdk(pybind11::module_& m);
void register_addmm(pybind11::module_& m);

}  // namespace bindings
}  // namespace shimkit
