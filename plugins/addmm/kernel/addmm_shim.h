// The addmm c-shim body, shared by every device's exported symbol:
//   AOTITorchError aoti_torch_<device>_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
//       AtenTensorHandle mat1, AtenTensorHandle mat2, double beta, double alpha);
// `Api` reads handles (see shimkit/aoti_adapter.h); `Device::run(plan, operands)` executes a plan.
#pragma once

#include "addmm_plan.h"
#include "shimkit/aoti_adapter.h"

namespace shimkit {
namespace addmm {

template <class Api, class Device>
Status addmm_out(typename Api::Handle out, typename Api::Handle self, typename Api::Handle mat1,
                 typename Api::Handle mat2, double beta, double alpha) {
  Operands ops;
  Status status = aoti::read_view<Api>(out, "out", &ops.out);
  if (status.is_ok()) status = aoti::read_view<Api>(self, "self", &ops.self);
  if (status.is_ok()) status = aoti::read_view<Api>(mat1, "mat1", &ops.mat1);
  if (status.is_ok()) status = aoti::read_view<Api>(mat2, "mat2", &ops.mat2);
  if (!status.is_ok()) return status.with_context("addmm");
  Plan plan;
  SHIMKIT_RETURN_IF_ERROR(make_plan(ops, beta, alpha, &plan));
  return Device::run(plan, ops);
}

}  // namespace addmm
}  // namespace shimkit
