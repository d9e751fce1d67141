// The host module's Python bindings: baddbmm_out(out, self, batch1, batch2, *, beta, alpha) over torch tensors,
// borrowed through DLPack without copies (shimkit/pybind.h). shimkit builds the module from the Kernel record's
// host_sources (this file, baddbmm_graph.mm, baddbmm_host.mm) and names it with SHIMKIT_HOST_MODULE.
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "baddbmm.h"
#include "shimkit/pybind.h"

namespace py = pybind11;

namespace {

mpsgraph_baddbmm::Operand operand(const shimkit::TensorView& view) {
  return {static_cast<int32_t>(view.dtype), view.sizes, view.strides};
}

void baddbmm_out(py::handle out, py::handle self, py::handle batch1, py::handle batch2, double beta, double alpha) {
  using shimkit::bindings::borrow;
  const auto o = borrow(out, "out"), s = borrow(self, "self"), a = borrow(batch1, "batch1"),
             b = borrow(batch2, "batch2");
  mpsgraph_baddbmm::Call call;
  std::string error = mpsgraph_baddbmm::plan_baddbmm(operand(o.view), operand(s.view), operand(a.view),
                                                     operand(b.view), beta, alpha, &call);
  if (!error.empty()) throw py::value_error(error);
  {
    py::gil_scoped_release release;
    error = mpsgraph_baddbmm::baddbmm_on_host(call, s.view.data, a.view.data, b.view.data, o.view.data);
  }
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace

PYBIND11_MODULE(SHIMKIT_HOST_MODULE, m) {
  m.doc() = "baddbmm as one MPSGraph (host module of the mpsgraph-baddbmm plugin's kernel)";
  m.def("baddbmm_out", &baddbmm_out, py::arg("out"), py::arg("self"), py::arg("batch1"), py::arg("batch2"),
        py::kw_only(), py::arg("beta") = 1.0, py::arg("alpha") = 1.0,
        "out = beta * self + alpha * (batch1 @ batch2) through the MPSGraph kernel; every operand dense, one dtype.");
}
