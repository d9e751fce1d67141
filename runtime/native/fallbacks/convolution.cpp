// Stands in for the Metal runtime's op_convolution.mm (pytorch/executorch cff6f4d, unchanged since 29625e8e and
// the same in v1.4.1): aoti_torch_mps_convolution, a cross-correlation with stride, zero padding, dilation and
// groups, plus an optional bias, for 1-D and 2-D inputs, batched or not, returned as a new contiguous tensor.
// Accumulates in float32 (assumed of MPSGraph's convolution, whose accumulator Apple does not document) and rounds
// the convolution to the dtype; a bias is a second graph operation (additionWithPrimaryTensor, :335-348) that
// rounds again, as the addmm stand-in assumes of each MPSGraph operation.
//
// What upstream computes, where it is not what ATen computes (each noted as a divergence):
// - input and weight are read through sizes() alone (op_convolution.mm:87-138) and handed to MPSGraph as NCHW and
//   OIHW buffers (:223-224, :288-289, :378-383): a channels-last (or any non-contiguous) operand is read as if it
//   were contiguous, pytorch/executorch#22951;
// - the [C_out] bias is added to the [N, C_out, H, W] result by MPSGraph's broadcasting addition, which aligns it
//   with the last dimension (:335-348): right where C_out is 1, bias[w] added at column w where W_out == C_out (a
//   divergence), refused otherwise as MPSGraph refuses the shapes. Inductor never hands this shim a bias on mps (its
//   lowering peels the bias off into an add for every device but the CPU).
// Refused like upstream, with its messages: dtypes other than float32 and bfloat16; a 5-D weight, which upstream
// takes for a 2-D one and then fails on the input's rank (no 3-D path, :87-130); an empty batch or any other
// non-positive output dimension (:176-180); `transposed`: upstream computes the transposed output shape but runs
// MPSGraph's forward convolution on it (:152-158, :298-324), so no transposed convolution comes out right there.
// Refused like ATen: mismatched channels or groups, parameters of the wrong length or sign, a kernel larger than the
// padded input, empty non-batch dimensions. An input without channels gives a result without channels, as ATen's.
#include "fallback_common.h"

namespace shimkit {
namespace metal_fallbacks {
namespace {

constexpr const char* kSymbol = "aoti_torch_mps_convolution";
constexpr const char* kFile = "op_convolution.mm";
constexpr const char* kIssue = " (pytorch/executorch#22951)";

struct Params {
  int64_t spatial = 0;             // 1, 2 or 3
  int64_t stride[3] = {1, 1, 1};   // padded to three dims: the leading ones are identities
  int64_t padding[3] = {0, 0, 0};
  int64_t dilation[3] = {1, 1, 1};
};

// ATen takes one value for every dim or one per dim.
Status read_list(const int64_t* values, int64_t length, const char* name, int64_t spatial, int64_t minimum,
                 int64_t* into) {
  if (length != 1 && length != spatial) {
    return invalid(std::string("expected ") + name + " to be a single integer value or a list of " +
                   std::to_string(spatial) + " values to match the convolution dimensions, but got " +
                   std::to_string(length) + " values");
  }
  if (values == nullptr) return invalid(std::string(name) + " is a null pointer");
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t value = values[length == 1 ? 0 : d];
    if (value < minimum) {
      return invalid(std::string(name) + " must be " + (minimum > 0 ? "positive" : "non-negative") + ", got " +
                     std::to_string(value));
    }
    into[3 - spatial + d] = value;
  }
  return Status::ok();
}

Status convolution(AtenTensorHandle input_handle, AtenTensorHandle weight_handle, AtenTensorHandle* bias_handle,
                   const int64_t* stride, int64_t stride_len, const int64_t* padding, int64_t padding_len,
                   const int64_t* dilation, int64_t dilation_len, int32_t transposed, int64_t groups,
                   AtenTensorHandle* ret0) {
  if (ret0 == nullptr) return invalid("ret0 must not be null");
  if (transposed != 0) {
    return unsupported("transposed convolution is not supported: the Metal runtime runs a forward "
                       "convolution for it, whose result is not a transposed convolution");
  }
  Arg input, weight, bias;
  bool has_bias = false;
  SHIMKIT_RETURN_IF_ERROR(read_arg(input_handle, "input", &input));
  SHIMKIT_RETURN_IF_ERROR(read_arg(weight_handle, "weight", &weight));
  SHIMKIT_RETURN_IF_ERROR(read_optional_arg(bias_handle, "bias", &bias, &has_bias));
  SHIMKIT_RETURN_IF_ERROR(read_as_upstream(kSymbol, kFile, kIssue, input, contiguous_strides(input.view.sizes),
                                           "a contiguous NCHW buffer", &input));
  SHIMKIT_RETURN_IF_ERROR(read_as_upstream(kSymbol, kFile, kIssue, weight, contiguous_strides(weight.view.sizes),
                                           "a contiguous OIHW buffer", &weight));
  SHIMKIT_RETURN_IF_ERROR(require_metal_float(input));
  SHIMKIT_RETURN_IF_ERROR(require_same_dtype(weight, input));
  if (has_bias) SHIMKIT_RETURN_IF_ERROR(require_same_dtype(bias, input));

  Params p;
  p.spatial = weight.dim() - 2;
  if (p.spatial < 1 || p.spatial > 3) {
    return invalid("weight must be 3-D, 4-D or 5-D (a 1-D, 2-D or 3-D convolution), got " + weight.describe());
  }
  if (p.spatial == 3) {
    return invalid("conv2d expects 3D or 4D input, got " + std::to_string(input.dim()) +
                   " (op_convolution.mm has no 3-D path: it takes a 5-D weight for a 2-D one)");
  }
  const bool batched = input.dim() == p.spatial + 2;
  if (!batched && input.dim() != p.spatial + 1) {
    return invalid("input must be " + std::to_string(p.spatial + 1) + "-D or " + std::to_string(p.spatial + 2) +
                   "-D for a " + std::to_string(weight.dim()) + "-D weight, got " + input.describe());
  }
  SHIMKIT_RETURN_IF_ERROR(read_list(stride, stride_len, "stride", p.spatial, 1, p.stride));
  SHIMKIT_RETURN_IF_ERROR(read_list(padding, padding_len, "padding", p.spatial, 0, p.padding));
  SHIMKIT_RETURN_IF_ERROR(read_list(dilation, dilation_len, "dilation", p.spatial, 1, p.dilation));
  if (groups < 1) return invalid("groups must be positive, got " + std::to_string(groups));

  const int64_t lead = batched ? 1 : 0;  // index of the channel dim in input
  const int64_t batch = batched ? input.size(0) : 1;
  const int64_t in_channels = input.size(lead);
  const int64_t out_channels = weight.size(0);
  const int64_t group_in = weight.size(1);
  if (out_channels < 1 || out_channels % groups != 0) {
    return invalid("weight of shape " + format_shape(weight.view.sizes) + " has " + std::to_string(out_channels) +
                   " output channels, which must be positive and divisible by groups=" + std::to_string(groups));
  }
  if (group_in * groups != in_channels) {
    return invalid("weight of shape " + format_shape(weight.view.sizes) + " with groups=" + std::to_string(groups) +
                   " expects input to have " + std::to_string(group_in * groups) + " channels, but input " +
                   format_shape(input.view.sizes) + " has " + std::to_string(in_channels));
  }
  if (has_bias && (bias.dim() != 1 || bias.size(0) != out_channels)) {
    return invalid("bias must be 1-D with " + std::to_string(out_channels) + " elements, got " + bias.describe());
  }

  // Sizes padded to three spatial dims.
  int64_t in_size[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, out_size[3] = {1, 1, 1};
  for (int64_t d = 0; d < p.spatial; ++d) {
    in_size[3 - p.spatial + d] = input.size(lead + 1 + d);
    kernel[3 - p.spatial + d] = weight.size(2 + d);
  }
  const bool empty_batch = batch == 0 || in_channels == 0;
  std::vector<int64_t> result_sizes;
  if (batched) result_sizes.push_back(batch);
  // ATen (and its meta function) give an input without channels a result without channels.
  result_sizes.push_back(in_channels == 0 ? 0 : out_channels);
  for (int64_t d = 3 - p.spatial; d < 3; ++d) {
    if (in_size[d] == 0 && !empty_batch) {
      return invalid("input " + format_shape(input.view.sizes) +
                     " is empty in a non-batch dimension (only zero batch or zero channel inputs are supported)");
    }
    const int64_t padded = in_size[d] + 2 * p.padding[d];
    const int64_t reach = p.dilation[d] * (kernel[d] - 1) + 1;
    if (padded < reach) {
      return invalid("the padded input size " + std::to_string(padded) + " is smaller than the dilated kernel size " +
                     std::to_string(reach) + " (input " + format_shape(input.view.sizes) + ", weight " +
                     format_shape(weight.view.sizes) + ")");
    }
    out_size[d] = (padded - reach) / p.stride[d] + 1;
    result_sizes.push_back(out_size[d]);
  }

  if (batch <= 0) {
    return invalid("Invalid output dimensions N=" + std::to_string(batch) + ", C_out=" + std::to_string(out_channels) +
                   ", H_out=" + std::to_string(out_size[1]) + ", W_out=" + std::to_string(out_size[2]) +
                   " (op_convolution.mm refuses an empty batch)");
  }
  const int64_t out_width = out_size[2];
  if (has_bias && out_channels != 1) {
    if (out_width != out_channels) {
      return invalid("bias of " + std::to_string(out_channels) + " elements does not broadcast against the result's "
                     "last dimension of " + std::to_string(out_width) + ": op_convolution.mm adds it with MPSGraph's "
                     "broadcasting addition, which refuses the shapes");
    }
    note_divergence(kSymbol, "adds the bias along the last dimension of the NCHW result (op_convolution.mm:335-348), "
                             "bias[w] at column w, where ATen adds bias[c] to channel c",
                    bias.layout() + " on a result of width " + std::to_string(out_width));
  }

  Result output;
  SHIMKIT_RETURN_IF_ERROR(allocate(input, result_sizes, input.code, "output", &output));

  // Dense float copies: input [batch, channels, D, H, W], weight [out, group_in, kD, kH, kW].
  const std::vector<float> x = load_dense(input);
  const std::vector<float> w = load_dense(weight);
  const std::vector<float> b = has_bias ? load_dense(bias) : std::vector<float>();
  const int64_t in_plane = in_size[0] * in_size[1] * in_size[2];
  const int64_t kernel_plane = kernel[0] * kernel[1] * kernel[2];
  const int64_t out_plane = out_size[0] * out_size[1] * out_size[2];
  const int64_t group_out = out_channels / groups;
  std::vector<float> y(static_cast<std::size_t>(batch * out_channels * out_plane));
  for (int64_t n = 0; n < (in_channels == 0 ? 0 : batch); ++n) {
    for (int64_t co = 0; co < out_channels; ++co) {
      const int64_t first_in = (co / group_out) * group_in;
      for (int64_t od = 0; od < out_size[0]; ++od) {
        for (int64_t oh = 0; oh < out_size[1]; ++oh) {
          for (int64_t ow = 0; ow < out_size[2]; ++ow) {
            float acc = 0.0f;
            for (int64_t ci = 0; ci < group_in; ++ci) {
              const float* plane = x.data() + (n * in_channels + first_in + ci) * in_plane;
              const float* taps = w.data() + (co * group_in + ci) * kernel_plane;
              for (int64_t kd = 0; kd < kernel[0]; ++kd) {
                const int64_t id = od * p.stride[0] - p.padding[0] + kd * p.dilation[0];
                if (id < 0 || id >= in_size[0]) continue;
                for (int64_t kh = 0; kh < kernel[1]; ++kh) {
                  const int64_t ih = oh * p.stride[1] - p.padding[1] + kh * p.dilation[1];
                  if (ih < 0 || ih >= in_size[1]) continue;
                  for (int64_t kw = 0; kw < kernel[2]; ++kw) {
                    const int64_t iw = ow * p.stride[2] - p.padding[2] + kw * p.dilation[2];
                    if (iw < 0 || iw >= in_size[2]) continue;
                    acc += plane[(id * in_size[1] + ih) * in_size[2] + iw] *
                           taps[(kd * kernel[1] + kh) * kernel[2] + kw];
                  }
                }
              }
            }
            if (has_bias) {  // its own graph operation: the convolution rounds first
              acc = rounded(input, rounded(input, acc) + b[static_cast<std::size_t>(out_channels == 1 ? 0 : ow)]);
            }
            y[static_cast<std::size_t>(((n * out_channels + co) * out_size[0] + od) * out_size[1] * out_size[2] +
                                       oh * out_size[2] + ow)] = acc;
          }
        }
      }
    }
  }
  store_dense(output.arg, y);
  return hand_over(&output, ret0);
}

}  // namespace
}  // namespace metal_fallbacks
}  // namespace shimkit

extern "C" {

AOTI_TORCH_EXPORT AOTITorchError aoti_torch_mps_convolution(
    AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride,
    int64_t stride_len_, const int64_t* padding, int64_t padding_len_, const int64_t* dilation, int64_t dilation_len_,
    int32_t transposed, const int64_t* output_padding, int64_t output_padding_len_, int64_t groups,
    AtenTensorHandle* ret0) {
  // output_padding only shapes a transposed convolution, which is refused.
  (void)output_padding;
  (void)output_padding_len_;
  return shimkit::metal_fallbacks::run("aoti_torch_mps_convolution", [&] {
    return shimkit::metal_fallbacks::convolution(input, weight, bias, stride, stride_len_, padding, padding_len_,
                                                 dilation, dilation_len_, transposed, groups, ret0);
  });
}

}  // extern "C"
