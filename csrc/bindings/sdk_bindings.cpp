// The kernel SDK's portable helpers, exposed for tests and for plugin authors inspecting tensors.
#include <pybind11/stl.h>

#include "bindings.h"
#include "shimkit/layout.h"

namespace py = pybind11;

namespace shimkit {
namespace bindings {

namespace {

// Rounds `src` into `dst` element by element through float, the path every kernel's loads and
// stores take; lets tests check the 16-bit conversions against torch exhaustively.
void cast(py::handle src, py::handle dst) {
  BorrowedView from = borrow(src, "src");
  BorrowedView to = borrow(dst, "dst");
  raise_if_error(validate_view(from.view, "src"));
  raise_if_error(validate_view(to.view, "dst"));
  if (from.view.sizes != to.view.sizes) {
    raise_if_error(Status::invalid_argument("cast: src has shape " + format_shape(from.view.sizes) +
                                            " but dst has " + format_shape(to.view.sizes)));
  }
  if (from.view.dim() != 1) {
    raise_if_error(Status::invalid_argument("cast: src and dst must be 1-D"));
  }
  for (int64_t i = 0; i < from.view.sizes[0]; ++i) {
    store_float(to.view.data, to.view.dtype, i * to.view.strides[0],
                load_float(from.view.data, from.view.dtype, i * from.view.strides[0]));
  }
}

// Copies `src` into `dst` through a dense row-major staging buffer, as a graph device does for a
// kPacked operand.
void repack(py::handle src, py::handle dst) {
  BorrowedView from = borrow(src, "src");
  BorrowedView to = borrow(dst, "dst");
  raise_if_error(validate_view(from.view, "src"));
  raise_if_error(validate_view(to.view, "dst"));
  if (from.view.sizes != to.view.sizes || from.view.dtype != to.view.dtype) {
    raise_if_error(Status::invalid_argument("repack: src is " + from.view.describe() +
                                            " but dst is " + to.view.describe()));
  }
  std::vector<char> staging(static_cast<std::size_t>(from.view.numel()) * element_size(from.view.dtype));
  pack_dense(from.view, staging.data());
  unpack_dense(staging.data(), to.view);
}

}  // namespace

void register_sdk(py::module_& m) {
  m.def(
      "classify_layout",
      [](py::handle tensor) {
        BorrowedView b = borrow(tensor, "tensor");
        raise_if_error(validate_view(b.view, "tensor"));
        return std::string(layout_name(classify_layout(b.view)));
      },
      py::arg("tensor"),
      "How the tensor lies in memory: 'contiguous', 'transposed', 'broadcast' or 'strided'.");
  m.def(
      "describe_view",
      [](py::handle tensor) {
        BorrowedView b = borrow(tensor, "tensor");
        return b.view.describe();
      },
      py::arg("tensor"), "The TensorView shimkit's kernels see for this tensor, as text.");
  m.def("cast", &cast, py::arg("src"), py::arg("dst"),
        "Writes 1-D src into dst, converting dtype the way shimkit kernels round (nearest even).");
  m.def("repack", &repack, py::arg("src"), py::arg("dst"),
        "Copies src into dst via a dense staging buffer (pack_dense then unpack_dense).");
}

}  // namespace bindings
}  // namespace shimkit
