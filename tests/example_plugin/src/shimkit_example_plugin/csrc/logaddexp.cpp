// A third-party kernel built with shimkit.csrc.build.shimkit_extension: logaddexp over float32 arrays
// of the same shape and any strides. Validation goes through shimkit's SDK, so errors name the
// argument the way shimkit's own kernels do.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "shimkit/status.h"
#include "shimkit/tensor_view.h"

namespace py = pybind11;

namespace {

// Only float32 arrays are accepted as they are; pybind11 would otherwise copy-convert silently.
using Float32Array = py::array_t<float, 0>;

shimkit::TensorView view_of(const Float32Array& array) {
  shimkit::TensorView view;
  view.data = const_cast<float*>(array.data());
  view.dtype = shimkit::DType::kFloat32;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    view.sizes.push_back(array.shape(d));
    view.strides.push_back(array.strides(d) / static_cast<py::ssize_t>(sizeof(float)));
  }
  return view;
}

void raise_if_error(const shimkit::Status& status) {
  if (!status.is_ok()) throw std::invalid_argument(status.message());
}

float logaddexp(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(a) && a == b) return a;  // a - b would be NaN for equal infinities
  return std::fmax(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
}

int64_t offset_of(const std::vector<int64_t>& index, const shimkit::TensorView& view) {
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * view.strides[d];
  return offset;
}

Float32Array logaddexp_f32(const Float32Array& a, const Float32Array& b) {
  shimkit::TensorView va = view_of(a), vb = view_of(b);
  raise_if_error(shimkit::validate_view(va, "a"));
  raise_if_error(shimkit::validate_view(vb, "b"));
  if (va.sizes != vb.sizes) {
    throw std::invalid_argument("logaddexp: b has shape " + shimkit::format_shape(vb.sizes) +
                                " but a has shape " + shimkit::format_shape(va.sizes));
  }
  Float32Array out(std::vector<py::ssize_t>(va.sizes.begin(), va.sizes.end()));
  float* result = out.mutable_data();
  const auto* pa = static_cast<const float*>(va.data);
  const auto* pb = static_cast<const float*>(vb.data);
  std::vector<int64_t> index(va.sizes.size(), 0);
  for (int64_t flat = 0; flat < va.numel(); ++flat) {
    result[flat] = logaddexp(pa[offset_of(index, va)], pb[offset_of(index, vb)]);
    for (int64_t d = va.dim() - 1; d >= 0 && ++index[d] == va.sizes[d]; --d) index[d] = 0;
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_kernels, m) {
  m.doc() = "shimkit-example-plugin's reference kernels, compiled with shimkit's build helper";
  m.def("logaddexp", &logaddexp_f32, py::arg("a"), py::arg("b"),
        "log(exp(a) + exp(b)) of two float32 arrays of one shape (any strides); returns a new array.");
}
