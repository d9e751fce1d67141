// The addmm plugin's Metal kernel (plugins/addmm/kernel/addmm_metal.mm, compiled unchanged, or a mutant of it) run
// on shimkit's CPU Metal and MPSGraph (objc/), each case's out compared byte for byte with the plugin's reference
// kernel (run_reference) on copies of the same operands. One line per case, "ok <name>" or "FAIL <name>: <why>";
// exit status 1 if any case fails. Under AddressSanitizer the leak check runs at the end of main, while the kernel's
// process-lifetime graph cache is still reachable.
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>
#include <objc/runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/lsan_interface.h>
#define ADDMM_DRIVER_LEAK_CHECK 1
#endif
#endif

#include "addmm_metal.h"
#include "addmm_plan.h"

using shimkit::DType;
using shimkit::DeviceType;
using shimkit::Status;
using shimkit::StatusCode;
using shimkit::TensorView;
using shimkit::addmm::Operands;
using shimkit::addmm::Plan;

namespace {

// -[MPSGraph init] counted, to tell a graph-cache hit (no new graph) from a miss.
int graphs_built = 0;
IMP original_graph_init = nullptr;

id counting_graph_init(id self, SEL selector) {
  ++graphs_built;
  return reinterpret_cast<id (*)(id, SEL)>(original_graph_init)(self, selector);
}

void count_graphs() {
  Method init = class_getInstanceMethod([MPSGraph class], @selector(init));
  original_graph_init = method_setImplementation(init, reinterpret_cast<IMP>(counting_graph_init));
}

// What ExecuTorch's Metal runtime provides the kernel, over the stand-in: every data pointer handed out is
// registered with its buffer; graphs encode into one command buffer, committed when the kernel or the driver
// synchronizes (or at once when it asks to wait), so a kernel that read its tensor data after run_metal returned
// would read freed objects.
class StandInHost : public shimkit::metal::Host {
 public:
  StandInHost() : device_(MTLCreateSystemDefaultDevice()), queue_([device_ newCommandQueue]) {}
  ~StandInHost() override {
    synchronize();
    for (auto& entry : buffers_) [entry.second.first release];
    [queue_ release];
    [device_ release];
  }
  StandInHost(const StandInHost&) = delete;
  StandInHost& operator=(const StandInHost&) = delete;

  void register_pointer(const void* data, id<MTLBuffer> buffer, NSUInteger byte_offset) {
    [buffer retain];
    auto found = buffers_.find(data);
    if (found != buffers_.end()) [found->second.first release];
    buffers_[data] = {buffer, byte_offset};
  }

  id<MTLDevice> device() override { return device_; }
  id<MTLBuffer> buffer_for(const void* data, NSUInteger* byte_offset) override {
    auto found = buffers_.find(data);
    if (found == buffers_.end()) return nil;
    *byte_offset = found->second.second;
    return found->second.first;
  }
  void synchronize() override {
    if (pending_ == nil) return;
    [pending_ commit];
    [pending_ waitUntilCompleted];
    [pending_ release];
    pending_ = nil;
  }
  void run_graph(MPSGraph* graph, NSDictionary* feeds, NSDictionary* results, bool wait) override {
    if (pending_ == nil) pending_ = [[MPSCommandBuffer commandBufferFromCommandQueue:queue_] retain];
    [graph encodeToCommandBuffer:pending_ feeds:feeds targetOperations:nil resultsDictionary:results executionDescriptor:nil];
    if (wait) synchronize();
  }

 private:
  id<MTLDevice> device_;
  id<MTLCommandQueue> queue_;
  MPSCommandBuffer* pending_ = nil;
  std::map<const void*, std::pair<id<MTLBuffer>, NSUInteger>> buffers_;
};

struct Spec {
  DType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

Spec dense(DType dtype, std::vector<int64_t> sizes, int64_t offset = 0) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * sizes[d];
  return {dtype, sizes, strides, offset};
}

// A rows x cols matrix stored column-major: the .t() of a contiguous cols x rows one.
Spec transposed(DType dtype, int64_t rows, int64_t cols, int64_t offset = 0) {
  return {dtype, {rows, cols}, {1, rows}, offset};
}

// One operand in two storages holding the same bytes: host memory for the reference, an MTLBuffer for Metal.
class Operand {
 public:
  Operand(id<MTLDevice> device, const Spec& spec) : spec_(spec) {
    // An empty view still gets an element, so that its data pointer lies in its storage.
    int64_t extent = spec.offset + 1;
    const bool empty = std::find(spec.sizes.begin(), spec.sizes.end(), 0) != spec.sizes.end();
    for (std::size_t d = 0; d < spec.sizes.size() && !empty; ++d) extent += (spec.sizes[d] - 1) * spec.strides[d];
    bytes_ = static_cast<std::size_t>(extent) * shimkit::element_size(spec.dtype);
    host_.assign(bytes_, 0);
    buffer_ = [device newBufferWithLength:bytes_ options:MTLResourceStorageModeShared];
  }
  ~Operand() { [buffer_ release]; }
  Operand(const Operand&) = delete;
  Operand& operator=(const Operand&) = delete;

  // Every element of the storage (the view's and the rest) from `seed`, in both copies.
  void fill(uint64_t seed) {
    for (std::size_t i = 0; i < bytes_ / shimkit::element_size(spec_.dtype); ++i) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const float value = static_cast<float>(static_cast<int64_t>(seed >> 40) % 4000) / 1000.0f - 2.0f;
      shimkit::store_float(host_.data(), spec_.dtype, static_cast<int64_t>(i), value);
    }
    std::memcpy([buffer_ contents], host_.data(), bytes_);
  }
  void fill_nan() {
    for (std::size_t i = 0; i < bytes_ / shimkit::element_size(spec_.dtype); ++i) {
      shimkit::store_float(host_.data(), spec_.dtype, static_cast<int64_t>(i), NAN);
    }
    std::memcpy([buffer_ contents], host_.data(), bytes_);
  }

  TensorView view(DeviceType device) {
    TensorView view;
    char* base = device == DeviceType::kCPU ? reinterpret_cast<char*>(host_.data()) : static_cast<char*>([buffer_ contents]);
    view.data = base + spec_.offset * static_cast<int64_t>(shimkit::element_size(spec_.dtype));
    view.dtype = spec_.dtype;
    view.sizes = spec_.sizes;
    view.strides = spec_.strides;
    view.storage_offset = spec_.offset;
    view.device = {device, 0};
    return view;
  }
  NSUInteger byte_offset() const { return static_cast<NSUInteger>(spec_.offset) * shimkit::element_size(spec_.dtype); }
  id<MTLBuffer> buffer() const { return buffer_; }

  // "" when Metal's storage equals the reference's byte for byte, else the first element of the view that differs.
  std::string compare() {
    if (std::memcmp([buffer_ contents], host_.data(), bytes_) == 0) return "";
    const TensorView metal = view(DeviceType::kMPS), reference = view(DeviceType::kCPU);
    for (int64_t i = 0; i < spec_.sizes[0]; ++i) {
      for (int64_t j = 0; j < spec_.sizes[1]; ++j) {
        const int64_t at = i * spec_.strides[0] + j * spec_.strides[1];
        const float got = shimkit::load_float(metal.data, spec_.dtype, at);
        const float want = shimkit::load_float(reference.data, spec_.dtype, at);
        if (std::memcmp(&got, &want, sizeof got) != 0) {
          char text[160];
          std::snprintf(text, sizeof text, "a wrong result: out[%lld, %lld] is %.9g, the reference gives %.9g",
                        static_cast<long long>(i), static_cast<long long>(j), got, want);
          return text;
        }
      }
    }
    return "memory outside out's view was written";
  }

 private:
  Spec spec_;
  std::size_t bytes_;
  std::vector<unsigned char> host_;
  id<MTLBuffer> buffer_;
};

struct Case {
  std::string name;
  Spec out, self, mat1, mat2;
  double beta = 1.0, alpha = 1.0;
  int runs = 1;                   // each run refills the inputs; the plan, and so the cache key, stay the same
  int graphs = -1;                // graphs the case must build (-1: not checked)
  bool nan_self = false;
  bool mat2_in_short_buffer = false;  // registered with a buffer too small for it
  StatusCode code = StatusCode::kOk;  // the status expected instead of a result
  std::string message = "";           // ... and a part of its message
};

std::string status_text(const Status& status) {
  return std::string(shimkit::status_code_name(status.code())) + ": " + status.message();
}

// "" when the case behaves as expected, else why not.
std::string run_case(const Case& c, int index) {
  StandInHost host;
  Operand out(host.device(), c.out), self(host.device(), c.self), mat1(host.device(), c.mat1),
      mat2(host.device(), c.mat2);
  Operand* inputs[] = {&self, &mat1, &mat2};
  out.fill(1000 + static_cast<uint64_t>(index));
  for (Operand* operand : {&out, &self, &mat1, &mat2}) {
    host.register_pointer(operand->view(DeviceType::kMPS).data, operand->buffer(), operand->byte_offset());
  }
  if (c.mat2_in_short_buffer) {
    id<MTLBuffer> short_buffer = [host.device() newBufferWithLength:4 options:MTLResourceStorageModeShared];
    host.register_pointer(mat2.view(DeviceType::kMPS).data, short_buffer, 0);
    [short_buffer release];
  }
  Operands metal{out.view(DeviceType::kMPS), self.view(DeviceType::kMPS), mat1.view(DeviceType::kMPS),
                 mat2.view(DeviceType::kMPS)};
  Operands reference{out.view(DeviceType::kCPU), self.view(DeviceType::kCPU), mat1.view(DeviceType::kCPU),
                     mat2.view(DeviceType::kCPU)};
  const int graphs_before = graphs_built;
  for (int run = 0; run < c.runs; ++run) {
    for (std::size_t i = 0; i < 3; ++i) inputs[i]->fill(static_cast<uint64_t>(index * 100 + run * 10 + i));
    if (c.nan_self) self.fill_nan();
    Plan plan;
    Status status = shimkit::addmm::make_plan(metal, c.beta, c.alpha, &plan);
    if (status.is_ok()) status = shimkit::addmm::run_metal(plan, metal, host);
    host.synchronize();
    if (c.code != StatusCode::kOk) {
      if (status.code() == c.code && status.message().find(c.message) != std::string::npos) return "";
      return "expected " + std::string(shimkit::status_code_name(c.code)) + " naming '" + c.message + "', got " +
             (status.is_ok() ? std::string("ok") : status_text(status));
    }
    if (!status.is_ok()) return status_text(status);
    Plan reference_plan;
    Status checked = shimkit::addmm::make_plan(reference, c.beta, c.alpha, &reference_plan);
    if (checked.is_ok()) checked = shimkit::addmm::run_reference(reference_plan, reference);
    if (!checked.is_ok()) return "the reference failed: " + status_text(checked);
    const std::string difference = out.compare();
    if (!difference.empty()) return "run " + std::to_string(run + 1) + ": " + difference;
  }
  if (c.graphs >= 0 && graphs_built - graphs_before != c.graphs) {
    return "built " + std::to_string(graphs_built - graphs_before) + " graphs, expected " + std::to_string(c.graphs);
  }
  return "";
}

std::vector<Case> cases() {
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16, f16 = DType::kFloat16;
  std::vector<Case> all;
  auto add = [&](Case c) { all.push_back(std::move(c)); };
  add({"f32_contiguous", dense(f32, {3, 5}), dense(f32, {3, 5}), dense(f32, {3, 4}), dense(f32, {4, 5})});
  add({"bf16_scaled_row_bias", dense(bf16, {3, 5}), dense(bf16, {5}), dense(bf16, {3, 4}), dense(bf16, {4, 5}), 0.5,
       2.0});
  add({"f16_scaled_column_bias", dense(f16, {3, 5}), dense(f16, {3, 1}), dense(f16, {3, 4}), dense(f16, {4, 5}),
       -1.25, 0.75});
  add({"bf16_larger", dense(bf16, {17, 9}), dense(bf16, {17, 9}), dense(bf16, {17, 33}), dense(bf16, {33, 9}), 1.5,
       -0.5});
  add({"f32_transposed_mat1_mat2", dense(f32, {3, 5}), dense(f32, {3, 5}), transposed(f32, 3, 4),
       transposed(f32, 4, 5)});
  add({"bf16_transposed_out", transposed(bf16, 3, 5), dense(bf16, {3, 5}), dense(bf16, {3, 4}), dense(bf16, {4, 5})});
  add({"f16_transposed_self", dense(f16, {3, 5}), transposed(f16, 3, 5), dense(f16, {3, 4}), dense(f16, {4, 5}), 2.0,
       1.0});
  add({"f32_packed_mat2", dense(f32, {3, 5}), dense(f32, {3, 5}), dense(f32, {3, 4}), {f32, {4, 5}, {10, 2}, 0}});
  add({"bf16_packed_out", {bf16, {3, 5}, {7, 1}, 2}, dense(bf16, {3, 5}), dense(bf16, {3, 4}), dense(bf16, {4, 5})});
  add({"f16_packed_self", dense(f16, {3, 5}), {f16, {3, 5}, {12, 2}, 1}, dense(f16, {3, 4}), dense(f16, {4, 5})});
  add({"f32_scalar_bias", dense(f32, {3, 5}), dense(f32, {}), dense(f32, {3, 4}), dense(f32, {4, 5}), 0.5, 1.0});
  add({"bf16_broadcast_mat1", dense(bf16, {3, 5}), dense(bf16, {3, 5}), {bf16, {3, 4}, {0, 1}, 0},
       {bf16, {4, 5}, {1, 0}, 0}});
  Case nan_self{"f32_beta0_nan_self", dense(f32, {3, 5}), dense(f32, {3, 5}), dense(f32, {3, 4}), dense(f32, {4, 5}),
                0.0, 1.0};
  nan_self.nan_self = true;
  add(nan_self);
  add({"f16_k0", dense(f16, {3, 5}), dense(f16, {3, 5}), dense(f16, {3, 0}), dense(f16, {0, 5}), 1.5, 2.0});
  add({"f32_k0_beta0", dense(f32, {3, 5}), dense(f32, {3, 5}), dense(f32, {3, 0}), dense(f32, {0, 5}), 0.0, 1.0});
  add({"f32_empty_out", dense(f32, {0, 5}), dense(f32, {5}), dense(f32, {0, 4}), dense(f32, {4, 5})});
  add({"f32_offsets_through_mpsndarray", dense(f32, {3, 5}, 5), dense(f32, {5}, 3), dense(f32, {3, 4}, 4),
       dense(f32, {4, 5}, 7)});
  add({"f16_offset_transposed_mat2", dense(f16, {3, 5}), dense(f16, {3, 5}), dense(f16, {3, 4}, 2),
       transposed(f16, 4, 5, 3)});
  Case hit{"f32_graph_cache_hit", dense(f32, {2, 6}), dense(f32, {2, 6}), dense(f32, {2, 7}), dense(f32, {7, 6}), 0.375,
           0.625};
  hit.runs = 2;
  hit.graphs = 1;
  add(hit);
  // The same plan but for self's shape: the second must not reuse the first's graph.
  add({"f32_bias_one", dense(f32, {2, 4}), dense(f32, {1}), dense(f32, {2, 3}), dense(f32, {3, 4}), 1.25, 0.75});
  add({"f32_bias_n_after_bias_one", dense(f32, {2, 4}), dense(f32, {4}), dense(f32, {2, 3}), dense(f32, {3, 4}), 1.25,
       0.75});
  Case mismatch{"dtype_mismatch", dense(f32, {3, 5}), dense(f32, {3, 5}), dense(f32, {3, 4}), dense(bf16, {4, 5})};
  mismatch.code = StatusCode::kInvalidArgument;
  mismatch.message = "dtype mismatch";
  add(mismatch);
  Case raised{"nsexception_as_status", dense(f32, {3, 5}), dense(f32, {3, 5}), dense(f32, {3, 4}), dense(f32, {4, 5})};
  raised.mat2_in_short_buffer = true;
  raised.code = StatusCode::kInternal;
  raised.message = "MPSGraph raised NSInvalidArgumentException";
  add(raised);
  return all;
}

}  // namespace

int main() {
  int failed = 0;
  @autoreleasepool {
    count_graphs();
    const std::vector<Case> all = cases();
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::string why;
      @autoreleasepool {
        why = run_case(all[i], static_cast<int>(i));
      }
      if (why.empty()) {
        std::printf("ok %s\n", all[i].name.c_str());
      } else {
        ++failed;
        std::printf("FAIL %s: %s\n", all[i].name.c_str(), why.c_str());
      }
    }
    std::printf("%zu cases, %d failed\n", all.size(), failed);
  }
  std::fflush(stdout);
#ifdef ADDMM_DRIVER_LEAK_CHECK
  __lsan_do_leak_check();
#endif
  return failed == 0 ? 0 : 1;
}
