#include "devices/gpu/discover.hpp"

#include "messages/errc.hpp"

// The vendor runtimes' headers cannot meet in one translation unit (both
// define the vector types), so the factories are declared here, as in
// devices/cuda/cuda_api.hpp and devices/hip/hip_api.hpp.
#ifdef COHORT_WITH_CUDA
namespace cohort::devices::cuda {
std::shared_ptr<gpu::api> make_runtime_api();
} // namespace cohort::devices::cuda
#endif
#ifdef COHORT_WITH_HIP
namespace cohort::devices::hip {
std::shared_ptr<gpu::api> make_runtime_api();
} // namespace cohort::devices::hip
#endif

namespace cohort::devices::gpu {

std::shared_ptr<api> cuda_runtime() {
#ifdef COHORT_WITH_CUDA
  static auto rt = cuda::make_runtime_api();
  return rt;
#else
  return nullptr;
#endif
}

std::shared_ptr<api> hip_runtime() {
#ifdef COHORT_WITH_HIP
  static auto rt = hip::make_runtime_api();
  return rt;
#else
  return nullptr;
#endif
}

namespace {

void open_all(discovery& out, const char* vendor, std::shared_ptr<api> rt,
              device_kind kind, const char* prefix,
              std::shared_ptr<health::gpu_monitor> (*monitor)(),
              const gpu_options& base) {
  backend_status st;
  st.vendor = vendor;
  st.built = rt != nullptr;
  if (!rt) {
    st.note = std::string{vendor} + " backend not built (toolchain missing)";
    out.backends.push_back(std::move(st));
    return;
  }
  int n = 0;
  if (auto rc = rt->device_count(n); rc.failed() || n == 0) {
    st.note = rc.failed() ? "no " + std::string{vendor} +
                                " device: " + rt->describe(rc.raw)
                          : "no " + std::string{vendor} + " device";
    out.backends.push_back(std::move(st));
    return;
  }
  auto opts = base;
  opts.monitor = monitor();
  if (!opts.monitor->available())
    st.note = "health unavailable: " + opts.monitor->unavailable_reason();
  for (int i = 0; i < n; ++i) {
    auto dev = gpu_device::open(rt, i, kind, prefix + std::to_string(i), opts);
    if (!dev) {
      st.note += (st.note.empty() ? "" : "; ") + describe(dev.error());
      continue;
    }
    out.devices.push_back(std::move(*dev));
    ++st.count;
  }
  out.backends.push_back(std::move(st));
}

} // namespace

discovery discover(const gpu_options& opts) {
  discovery out;
  open_all(
      out, "CUDA", cuda_runtime(), device_kind::cuda_gpu, "cuda",
      [] { return health::open_nvml(); }, opts);
  open_all(
      out, "HIP", hip_runtime(), device_kind::hip_gpu, "hip",
      [] { return health::open_rocm_smi(); }, opts);
  return out;
}

} // namespace cohort::devices::gpu
