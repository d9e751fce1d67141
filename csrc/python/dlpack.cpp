// Zero-copy access to torch tensors without linking libtorch: through the DLPack protocol.
#include <cstdint>
#include <string>

#include "shimkit/pybind.h"

namespace py = pybind11;

namespace shimkit {
namespace bindings {
namespace {

// The DLPack 0.x ABI (dlpack.h), which every producer still offers through __dlpack__() and a
// capsule named "dltensor". Declared here rather than vendored: these few structs are the ABI.
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // may be null: dense row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

constexpr uint8_t kDLFloat = 2;
constexpr uint8_t kDLBfloat = 4;
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr int32_t kDLMetal = 8;

std::string dlpack_dtype_name(DLDataType t) {
  static const char* const kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string code = t.code < 7 ? kCodes[t.code] : "code" + std::to_string(t.code);
  return code + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

}  // namespace

BorrowedView borrow(py::handle tensor, const char* name) {
  const std::string arg(name);
  if (!py::hasattr(tensor, "__dlpack__")) {
    throw py::type_error(arg + " must be a tensor (an object with __dlpack__), got " +
                         std::string(py::str(py::type::handle_of(tensor).attr("__name__"))));
  }
  BorrowedView borrowed;
  try {
    borrowed.capsule = tensor.attr("__dlpack__")();
  } catch (py::error_already_set& error) {
    throw py::value_error(arg + " cannot be borrowed through DLPack: " + std::string(error.what()));
  }
  // The capsule is not renamed to "used_dltensor": we only borrow, so its destructor still runs
  // the producer's deleter when `borrowed.capsule` goes.
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(borrowed.capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  const DLTensor& t = managed->dl_tensor;

  TensorView& view = borrowed.view;
  if (t.dtype.lanes == 1 && t.dtype.code == kDLFloat && t.dtype.bits == 32) {
    view.dtype = DType::kFloat32;
  } else if (t.dtype.lanes == 1 && t.dtype.code == kDLFloat && t.dtype.bits == 16) {
    view.dtype = DType::kFloat16;
  } else if (t.dtype.lanes == 1 && t.dtype.code == kDLBfloat && t.dtype.bits == 16) {
    view.dtype = DType::kBFloat16;
  } else {
    throw py::value_error(arg + " has dtype " + dlpack_dtype_name(t.dtype) +
                          "; supported: float32, bfloat16, float16");
  }
  switch (t.device.device_type) {
    case kDLCPU:
      view.device = {DeviceType::kCPU, 0};
      break;
    case kDLCUDA:
      view.device = {DeviceType::kCUDA, t.device.device_id};
      break;
    case kDLMetal:
      view.device = {DeviceType::kMPS, t.device.device_id};
      break;
    default:
      throw py::value_error(arg + " is on DLPack device type " +
                            std::to_string(t.device.device_type) + ", which shimkit does not know");
  }
  view.sizes.assign(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {
    view.strides.assign(t.strides, t.strides + t.ndim);
  } else {
    view.strides.assign(t.ndim, 1);
    for (int32_t d = t.ndim - 1; d > 0; --d) view.strides[d - 1] = view.strides[d] * t.shape[d];
  }
  const uint64_t item = element_size(view.dtype);
  if (t.byte_offset % item != 0) {
    throw py::value_error(arg + " starts at a byte offset that is not a whole element");
  }
  view.storage_offset = static_cast<int64_t>(t.byte_offset / item);
  view.data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  return borrowed;
}

void raise_if_error(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return;
    case StatusCode::kInvalidArgument:
      throw py::value_error(status.message());
    case StatusCode::kUnsupported:
      PyErr_SetString(PyExc_NotImplementedError, status.message().c_str());
      throw py::error_already_set();
    case StatusCode::kInternal:
      break;
  }
  throw std::runtime_error(status.message());
}

}  // namespace bindings
}  // namespace shimkit
