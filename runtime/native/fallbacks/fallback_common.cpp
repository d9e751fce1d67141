// The pieces every fallback shares (fallback_common.h), and the one extra export a host needs to show
// why a fallback failed: the fallbacks report through a return code only, like the AOTI ABI asks.
#include "fallback_common.h"

#include <limits>

namespace shimkit {
namespace metal_fallbacks {

int32_t float32_code() { return aoti_torch_dtype_float32(); }
int32_t bfloat16_code() { return aoti_torch_dtype_bfloat16(); }
int32_t float16_code() { return aoti_torch_dtype_float16(); }
int32_t int64_code() { return aoti_torch_dtype_int64(); }
int32_t int32_code() { return aoti_torch_dtype_int32(); }
int32_t uint8_code() { return aoti_torch_dtype_uint8(); }

std::string dtype_text(int32_t code) { return scalar_type_name(code); }

bool Arg::contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (size(d) == 0) return true;
    if (size(d) != 1 && stride(d) != expected) return false;
    expected *= size(d);
  }
  return true;
}

std::string Arg::describe() const { return dtype_text(code) + layout(); }

std::string Arg::layout() const {
  return format_shape(view.sizes) + " strides " + format_shape(view.strides);
}

namespace {

// validate_view's checks, with messages that name integer dtypes correctly.
Status check_extent(const Arg& arg) {
  const TensorView& view = arg.view;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int64_t size : view.sizes) {
    if (size < 0) return invalid(arg.name + " has a negative size: " + format_shape(view.sizes));
    if (size == 0) return Status::ok();
  }
  int64_t numel = 1;
  int64_t extent = 0;
  for (std::size_t d = 0; d < view.sizes.size(); ++d) {
    const int64_t size = view.sizes[d];
    const int64_t stride = view.strides[d];
    if (stride < 0) return invalid(arg.name + " has a negative stride: " + arg.describe());
    if (numel > kMax / size || (size > 1 && stride > (kMax - extent) / (size - 1))) {
      return invalid(arg.name + " is too large to index: " + arg.describe());
    }
    numel *= size;
    extent += (size - 1) * stride;
  }
  if (view.data == nullptr) {
    return invalid(arg.name + " has no data (null data pointer) but " + std::to_string(numel) + " elements");
  }
  return Status::ok();
}

}  // namespace

Status read_arg(AtenTensorHandle handle, const char* name, Arg* arg) {
  Arg result;
  result.name = name;
  if (handle == nullptr) return invalid(result.name + " is a null tensor handle");
  int64_t dim = 0;
  if (aoti_torch_get_dim(handle, &dim) != AOTI_TORCH_SUCCESS || dim < 0) {
    return invalid("could not read the rank of " + result.name);
  }
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  if (aoti_torch_get_sizes(handle, &sizes) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_strides(handle, &strides) != AOTI_TORCH_SUCCESS ||
      (dim > 0 && (sizes == nullptr || strides == nullptr))) {
    return invalid("could not read the sizes and strides of " + result.name);
  }
  if (aoti_torch_get_dtype(handle, &result.code) != AOTI_TORCH_SUCCESS) {
    return invalid("could not read the dtype of " + result.name);
  }
  int32_t device_type = 0;
  int32_t device_index = 0;
  if (aoti_torch_get_data_ptr(handle, &result.view.data) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_device_type(handle, &device_type) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_device_index(handle, &device_index) != AOTI_TORCH_SUCCESS) {
    return invalid("could not read the data pointer or device of " + result.name);
  }
  result.is_float = dtype_from_scalar_type(result.code, &result.view.dtype);
  result.view.sizes.assign(sizes, sizes + dim);
  result.view.strides.assign(strides, strides + dim);
  result.view.device = {static_cast<DeviceType>(device_type), device_index};
  // The data pointer already addresses the first element (storage offset applied) in both APIs.
  result.view.storage_offset = 0;
  if (result.view.device.type != DeviceType::kCPU && result.view.device.type != DeviceType::kMPS) {
    return unsupported(result.name + " is on " + device_name(result.view.device) +
                       "; these fallbacks read host memory (cpu, or the Linux runtime's mps buffers)");
  }
  SHIMKIT_RETURN_IF_ERROR(check_extent(result));
  *arg = std::move(result);
  return Status::ok();
}

Status read_optional_arg(const AtenTensorHandle* handle, const char* name, Arg* arg, bool* present) {
  *present = handle != nullptr && *handle != nullptr;
  return *present ? read_arg(*handle, name, arg) : Status::ok();
}

Status require_dtype(const Arg& arg, std::initializer_list<int32_t> accepted, const char* why) {
  std::string names;
  for (int32_t code : accepted) {
    if (code == arg.code) return Status::ok();
    names += (names.empty() ? "" : ", ") + dtype_text(code);
  }
  return invalid(arg.name + " has dtype " + dtype_text(arg.code) + "; accepted: " + names + " (" + why + ")");
}

Status require_metal_float(const Arg& arg) {
  return require_dtype(arg, {float32_code(), bfloat16_code()}, "the Metal runtime's op takes no other");
}

Status require_same_dtype(const Arg& arg, const Arg& reference) {
  if (arg.code == reference.code) return Status::ok();
  return invalid("dtype mismatch: " + arg.name + " is " + dtype_text(arg.code) + " but " + reference.name +
                 " is " + dtype_text(reference.code));
}

Status require_bound_as(const Arg& arg, const Arg& reference, const char* file) {
  if (arg.code == reference.code) return Status::ok();
  return invalid(arg.name + " is " + dtype_text(arg.code) + " but " + reference.name + " is " +
                 dtype_text(reference.code) + ": " + file + " binds every operand as " + reference.name +
                 "'s dtype and would reinterpret its bits");
}

Status require_rank(const Arg& arg, int64_t rank, const char* what) {
  if (arg.dim() == rank) return Status::ok();
  return invalid(arg.name + " must be " + std::to_string(rank) + "-D " + what + ", got " +
                 std::to_string(arg.dim()) + "-D " + arg.describe());
}

Status require_contiguous(const Arg& arg, const char* why) {
  if (arg.contiguous()) return Status::ok();
  return invalid(arg.name + " must be contiguous (" + why + "), got " + arg.describe());
}

Status require_writable(const Arg& arg) {
  if (arg.numel() <= 1) return Status::ok();
  for (int64_t d = 0; d < arg.dim(); ++d) {
    if (arg.size(d) > 1 && arg.stride(d) == 0) {
      return invalid(arg.name + " is broadcast (" + arg.describe() +
                     "): several output elements would share one memory location");
    }
  }
  return Status::ok();
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t running = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = running;
    running *= sizes[d] > 1 ? sizes[d] : 1;  // as ATen: a zero or one size never scales the others
  }
  return strides;
}


int64_t dense_span(const Arg& arg) {
  if (arg.numel() == 0) return 0;
  int64_t span = 1;
  for (int64_t d = 0; d < arg.dim(); ++d) {
    span += (arg.size(d) - 1) * (arg.stride(d) < 0 ? -arg.stride(d) : arg.stride(d));
  }
  return span;
}

std::string layout_name(const Arg& arg) {
  if (arg.dim() == 4 || arg.dim() == 5) {  // channels innermost, then the spatial dims, then the batch
    std::vector<int64_t> order = {1};
    for (int64_t d = arg.dim() - 1; d >= 2; --d) order.push_back(d);
    order.push_back(0);
    int64_t expected = 1;
    bool channels_last = true;
    for (int64_t d : order) {
      if (arg.size(d) != 1 && arg.stride(d) != expected) channels_last = false;
      expected *= arg.size(d);
    }
    if (channels_last) return "channels-last";
  }
  return "strided";
}

Status read_as_upstream(const char* symbol, const char* file, const char* issue, const Arg& arg,
                        const std::vector<int64_t>& strides, const std::string& assumed, Arg* read) {
  Arg as_read = arg;  // `read` may be `arg` itself
  as_read.view.strides = strides;
  bool differs = false;  // sizes of 0 or 1 take any stride, as ATen's is_contiguous lets them
  for (int64_t d = 0; d < arg.dim(); ++d) differs = differs || (arg.size(d) > 1 && arg.stride(d) != strides[d]);
  if (!differs || arg.numel() == 0) {
    *read = std::move(as_read);
    return Status::ok();
  }
  if (dense_span(arg) < dense_span(as_read)) {
    return invalid(arg.name + " " + arg.describe() + " spans fewer elements than " + file + " reads from it as " +
                   assumed + ": it would be read past its end");
  }
  note_divergence(symbol, "reads its " + layout_name(arg) + " " + arg.name + " as " + assumed + ": " + file +
                              " uses only sizes()" + issue, arg.layout());
  *read = std::move(as_read);
  return Status::ok();
}

Status read_mat2_as_upstream(const char* symbol, const char* file, const Arg& mat2, int64_t k, int64_t n, Arg* read) {
  const bool transposed = mat2.stride(0) == 1 && mat2.stride(1) != 1;
  return read_as_upstream(symbol, file, "", mat2, transposed ? std::vector<int64_t>{1, k} : std::vector<int64_t>{n, 1},
                          transposed ? "a dense [N, K] buffer, transposed" : "a dense [K, N] buffer", read);
}

Status write_out_as_upstream(const char* symbol, const char* file, const Arg& out, int64_t m, int64_t n,
                             Arg* written) {
  if (out.numel() < m * n || (out.numel() > 0 && dense_span(out) < m * n)) {
    return invalid("out " + out.describe() + " holds fewer than the " + std::to_string(m * n) + " elements " + file +
                   " writes into it densely: it would be written past its end");
  }
  Arg as_written = out;
  as_written.view.sizes = {m, n};
  as_written.view.strides = {n, 1};
  if (out.view.sizes != as_written.view.sizes || !out.contiguous()) {
    note_divergence(symbol, std::string("writes its [M, N] result into out as a dense buffer: ") + file +
                                " never reads out's sizes or strides", out.layout());
  }
  *written = std::move(as_written);
  return Status::ok();
}

std::vector<float> product(int64_t batch, int64_t m, int64_t k, int64_t n, const Arg& lhs, const Arg& rhs) {
  const auto operand = [](const Arg& arg) {
    const int64_t first = arg.dim() - 2;  // a 2-D operand is a batch of one
    return MatrixOperand{arg.view.data, arg.view.dtype, first == 0 ? 0 : arg.stride(0), arg.stride(first),
                         arg.stride(first + 1)};
  };
  std::vector<float> result(static_cast<std::size_t>(batch * m * n));
  matrix_product(batch, m, k, n, operand(lhs), operand(rhs), result.data());
  return result;
}

Result::~Result() {
  if (handle_ != nullptr) aoti_torch_delete_tensor_object(handle_);
}

Status allocate(const Arg& device_of, const std::vector<int64_t>& sizes, int32_t dtype, const char* name,
                Result* result) {
  const std::vector<int64_t> strides = contiguous_strides(sizes);
  AtenTensorHandle handle = nullptr;
  if (aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(), dtype,
                               static_cast<int32_t>(device_of.view.device.type), device_of.view.device.index,
                               &handle) != AOTI_TORCH_SUCCESS ||
      handle == nullptr) {
    return Status::internal("could not allocate " + std::string(name) + " " + dtype_text(dtype) +
                            format_shape(sizes) + " on " + device_name(device_of.view.device));
  }
  result->handle_ = handle;
  return read_arg(handle, name, &result->arg);
}

Status hand_over(Result* result, AtenTensorHandle* ret) {
  *ret = result->release();
  return Status::ok();
}

Status hand_over(Result* first, AtenTensorHandle* ret0, Result* second, AtenTensorHandle* ret1) {
  *ret0 = first->release();
  return hand_over(second, ret1);
}

std::vector<float> load_dense(const Arg& arg) {
  std::vector<float> values(static_cast<std::size_t>(arg.numel()));
  if (arg.contiguous()) {  // the common case, without an index per element
    for (int64_t e = 0; e < arg.numel(); ++e) values[static_cast<std::size_t>(e)] = arg.load(e);
    return values;
  }
  for_each_index(arg.view.sizes, [&](int64_t linear, const std::vector<int64_t>& index) {
    values[static_cast<std::size_t>(linear)] = arg.load(offset_of(index, arg.view.strides));
  });
  return values;
}

void store_dense(const Arg& arg, const std::vector<float>& values) {
  if (arg.contiguous()) {
    for (int64_t e = 0; e < arg.numel(); ++e) arg.store(e, values[static_cast<std::size_t>(e)]);
    return;
  }
  for_each_index(arg.view.sizes, [&](int64_t linear, const std::vector<int64_t>& index) {
    arg.store(offset_of(index, arg.view.strides), values[static_cast<std::size_t>(linear)]);
  });
}

}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

// The message of this thread's last failed fallback call ("" if none failed): "<symbol>: <message>".
AOTI_TORCH_EXPORT const char* shimkit_metal_fallback_last_error(void) {
  return shimkit::aoti::last_error().c_str();
}

}  // extern "C"
