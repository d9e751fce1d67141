// Stands in for the Metal runtime's op_convolution.mm (pytorch/executorch cff6f4d, unchanged since 29625e8e and
// the same in v1.4.1): aoti_torch_mps_convolution, a cross-correlation with stride, zero padding, dilation and
// groups, plus an optional bias, for 1-D and 2-D inputs, batched or not, returned as a new contiguous tensor.
// Accumulates in float32 (assumed of MPSGraph's convolution, whose accumulator Apple does not document: its taps in
// order, one fused multiply-add each, as shimkit/matrix_product.h sums) and rounds
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
#include <algorithm>
#include <cmath>

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

// The shape of one convolution, spatial dims padded to three (the leading ones of size 1).
struct Geometry {
  const Params& p;
  int64_t in_channels, group_in, group_out, groups;
  const int64_t* in_size;
  const int64_t* kernel;
  const int64_t* out_size;

  int64_t in_plane() const { return in_size[0] * in_size[1] * in_size[2]; }
  int64_t kernel_plane() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t out_plane() const { return out_size[0] * out_size[1] * out_size[2]; }
  int64_t taps() const { return group_in * kernel_plane(); }  // the sum's length: channels, then kD, kH, kW
  // The input position `tap` of `kernel` reaches from output position `at` along spatial dim `d`: -1 in padding.
  int64_t reach(int64_t d, int64_t at, int64_t tap) const {
    const int64_t position = at * p.stride[d] - p.padding[d] + tap * p.dilation[d];
    return position < 0 || position >= in_size[d] ? -1 : position;
  }
};

// y[n, co] for the output channels co of group g: each element the sum over its taps in order (input channel, then
// kD, kH, kW), one fused multiply-add per tap inside the input (padded taps are skipped), from 0.0f.
void direct_group(const Geometry& geo, const float* x, const float* w, int64_t n, int64_t g, float* y) {
  const int64_t first_in = g * geo.group_in;
  for (int64_t co = g * geo.group_out; co < (g + 1) * geo.group_out; ++co) {
    float* out = y + (n * geo.groups * geo.group_out + co) * geo.out_plane();
    int64_t at = 0;
    for (int64_t od = 0; od < geo.out_size[0]; ++od) {
      for (int64_t oh = 0; oh < geo.out_size[1]; ++oh) {
        for (int64_t ow = 0; ow < geo.out_size[2]; ++ow, ++at) {
          float acc = 0.0f;
          for (int64_t ci = 0; ci < geo.group_in; ++ci) {
            const float* plane = x + (n * geo.in_channels + first_in + ci) * geo.in_plane();
            const float* taps = w + (co * geo.group_in + ci) * geo.kernel_plane();
            for (int64_t kd = 0; kd < geo.kernel[0]; ++kd) {
              const int64_t id = geo.reach(0, od, kd);
              if (id < 0) continue;
              for (int64_t kh = 0; kh < geo.kernel[1]; ++kh) {
                const int64_t ih = geo.reach(1, oh, kh);
                if (ih < 0) continue;
                for (int64_t kw = 0; kw < geo.kernel[2]; ++kw) {
                  const int64_t iw = geo.reach(2, ow, kw);
                  if (iw < 0) continue;
                  acc = std::fma(plane[(id * geo.in_size[1] + ih) * geo.in_size[2] + iw],
                                 taps[(kd * geo.kernel[1] + kh) * geo.kernel[2] + kw], acc);
                }
              }
            }
          }
          out[at] = acc;
        }
      }
    }
  }
}

// direct_group's sums as matrix products (shimkit/matrix_product.h: the same order, the same fused terms): the group's
// weights [group_out, taps] times the input unfolded into [taps, output positions] (zero at padded taps), a few
// output lines (one (od, oh) each) at a time so that the unfolded block stays within kUnfoldedFloats.
void lowered_group(const Geometry& geo, const float* x, const float* w, int64_t n, int64_t g, float* y) {
  constexpr int64_t kUnfoldedFloats = 1 << 22;
  const int64_t taps = geo.taps(), width = geo.out_size[2], lines = geo.out_size[0] * geo.out_size[1];
  const int64_t lines_per_block = std::max<int64_t>(1, kUnfoldedFloats / std::max<int64_t>(1, taps * width));
  const int64_t first_in = g * geo.group_in;
  const MatrixOperand weights{w + g * geo.group_out * taps, DType::kFloat32, 0, taps, 1};
  float* out = y + (n * geo.groups + g) * geo.group_out * geo.out_plane();
  std::vector<float> unfolded, products;
  for (int64_t line0 = 0; line0 < lines; line0 += lines_per_block) {
    const int64_t block_lines = std::min(lines_per_block, lines - line0), columns = block_lines * width;
    unfolded.assign(static_cast<std::size_t>(taps * columns), 0.0f);
    for (int64_t tap = 0; tap < taps; ++tap) {
      const int64_t ci = tap / geo.kernel_plane(), within = tap % geo.kernel_plane();
      const int64_t kd = within / (geo.kernel[1] * geo.kernel[2]), kh = within / geo.kernel[2] % geo.kernel[1];
      const int64_t kw = within % geo.kernel[2];
      const float* plane = x + (n * geo.in_channels + first_in + ci) * geo.in_plane();
      float* row = unfolded.data() + tap * columns;
      for (int64_t line = 0; line < block_lines; ++line) {
        const int64_t od = (line0 + line) / geo.out_size[1], oh = (line0 + line) % geo.out_size[1];
        const int64_t id = geo.reach(0, od, kd), ih = geo.reach(1, oh, kh);
        if (id < 0 || ih < 0) continue;
        const float* source = plane + (id * geo.in_size[1] + ih) * geo.in_size[2];
        for (int64_t ow = 0; ow < width; ++ow) {
          const int64_t iw = geo.reach(2, ow, kw);
          if (iw >= 0) row[line * width + ow] = source[iw];
        }
      }
    }
    products.resize(static_cast<std::size_t>(geo.group_out * columns));
    matrix_product(1, geo.group_out, taps, columns, weights,
                   MatrixOperand{unfolded.data(), DType::kFloat32, 0, columns, 1}, products.data());
    for (int64_t co = 0; co < geo.group_out; ++co) {
      std::copy(products.begin() + co * columns, products.begin() + (co + 1) * columns,
                out + co * geo.out_plane() + line0 * width);
    }
  }
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
  const Geometry geometry{p, in_channels, group_in, out_channels / groups, groups, in_size, kernel, out_size};
  std::vector<float> y(static_cast<std::size_t>(batch * out_channels * geometry.out_plane()));
  if (in_channels > 0) {
    // Lowered to matrix products where it computes the same sums: a padded tap there adds 0 * w, which only a
    // non-finite weight would make other than zero.
    const bool finite = std::all_of(w.begin(), w.end(), [](float value) { return std::isfinite(value); });
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t g = 0; g < groups; ++g) {
        finite ? lowered_group(geometry, x.data(), w.data(), n, g, y.data())
               : direct_group(geometry, x.data(), w.data(), n, g, y.data());
      }
    }
  }
  if (has_bias) {  // its own graph operation: the convolution rounds first
    for (std::size_t e = 0; e < y.size(); ++e) {
      const int64_t ow = static_cast<int64_t>(e) % out_size[2];
      y[e] = rounded(input, rounded(input, y[e]) + b[static_cast<std::size_t>(out_channels == 1 ? 0 : ow)]);
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
