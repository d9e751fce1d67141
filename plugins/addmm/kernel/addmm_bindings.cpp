// The addmm kernel's host module: its plan and reference kernel over torch tensors, borrowed through
// DLPack without copies. shimkit builds it from the plugin's Kernel record (SHIMKIT_HOST_MODULE is
// the module name it chooses), together with the reference c-shim shimkit_ref_addmm_out.
#include <pybind11/stl.h>

#include "addmm_plan.h"
#include "shimkit/pybind.h"

namespace py = pybind11;

namespace shimkit {
namespace bindings {

namespace {

struct BorrowedOperands {
  BorrowedView out, self, mat1, mat2;
  addmm::Operands operands() const { return {out.view, self.view, mat1.view, mat2.view}; }
};

BorrowedOperands borrow_all(py::handle out, py::handle self, py::handle mat1, py::handle mat2) {
  return {borrow(out, "out"), borrow(self, "self"), borrow(mat1, "mat1"), borrow(mat2, "mat2")};
}

py::tuple feed_tuple(const addmm::Feed& feed) {
  return py::make_tuple(addmm::feed_kind_name(feed.kind), py::tuple(py::cast(feed.shape)));
}

}  // namespace

void register_addmm(py::module_& m) {
  py::class_<addmm::Plan>(m, "AddmmPlan", py::module_local(),
                          "What addmm's portable plan decided for one call.")
      .def_property_readonly("dtype", [](const addmm::Plan& p) { return dtype_name(p.dtype); })
      .def_readonly("m", &addmm::Plan::m)
      .def_readonly("k", &addmm::Plan::k)
      .def_readonly("n", &addmm::Plan::n)
      .def_readonly("beta", &addmm::Plan::beta)
      .def_readonly("alpha", &addmm::Plan::alpha)
      .def_readonly("uses_self", &addmm::Plan::uses_self)
      .def_readonly("uses_product", &addmm::Plan::uses_product)
      .def_readonly("output_empty", &addmm::Plan::output_empty)
      .def_property_readonly("layouts",
                             [](const addmm::Plan& p) {
                               py::dict d;
                               d["self"] = layout_name(p.self_layout);
                               d["mat1"] = layout_name(p.mat1_layout);
                               d["mat2"] = layout_name(p.mat2_layout);
                               d["out"] = layout_name(p.out_layout);
                               return d;
                             })
      .def_property_readonly("feeds",
                             [](const addmm::Plan& p) {
                               py::dict d;
                               d["self"] = feed_tuple(p.self_feed);
                               d["mat1"] = feed_tuple(p.mat1_feed);
                               d["mat2"] = feed_tuple(p.mat2_feed);
                               d["out"] = feed_tuple(p.out_feed);
                               return d;
                             })
      .def_property_readonly("cache_key", [](const addmm::Plan& p) { return p.cache_key.to_string(); })
      .def_property_readonly("cache_key_hash", [](const addmm::Plan& p) { return p.cache_key.hash(); })
      .def("__repr__", [](const addmm::Plan& p) {
        return "<AddmmPlan " + std::string(dtype_name(p.dtype)) + " m=" + std::to_string(p.m) +
               " k=" + std::to_string(p.k) + " n=" + std::to_string(p.n) + " key=" +
               p.cache_key.to_string() + ">";
      });

  m.def(
      "addmm_plan",
      [](py::handle out, py::handle self, py::handle mat1, py::handle mat2, double beta,
         double alpha) {
        BorrowedOperands b = borrow_all(out, self, mat1, mat2);
        addmm::Plan plan;
        raise_if_error(addmm::make_plan(b.operands(), beta, alpha, &plan));
        return plan;
      },
      py::arg("out"), py::arg("self"), py::arg("mat1"), py::arg("mat2"), py::kw_only(),
      py::arg("beta") = 1.0, py::arg("alpha") = 1.0,
      "Validates an addmm call and returns its plan; raises ValueError naming the bad argument.");
  m.def(
      "addmm_reference",
      [](py::handle out, py::handle self, py::handle mat1, py::handle mat2, double beta,
         double alpha) {
        BorrowedOperands b = borrow_all(out, self, mat1, mat2);
        addmm::Operands ops = b.operands();
        addmm::Plan plan;
        raise_if_error(addmm::make_plan(ops, beta, alpha, &plan));
        Status status;
        {
          py::gil_scoped_release release;
          status = addmm::run_reference(plan, ops);
        }
        raise_if_error(status);
      },
      py::arg("out"), py::arg("self"), py::arg("mat1"), py::arg("mat2"), py::kw_only(),
      py::arg("beta") = 1.0, py::arg("alpha") = 1.0,
      "out = beta * self + alpha * (mat1 @ mat2) with the reference kernel, written into out.");
}

}  // namespace bindings
}  // namespace shimkit

PYBIND11_MODULE(SHIMKIT_HOST_MODULE, m) {
  m.doc() = "addmm's portable plan and reference kernel (host module of the addmm plugin's kernel)";
  shimkit::bindings::register_addmm(m);
}
