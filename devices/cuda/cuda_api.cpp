#include "devices/cuda/cuda_api.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include <cuda.h>

#include "kernels/cuda/launch.hpp"

namespace cohort::devices::cuda {

gpu::status classify(cudaError_t err) {
  using gpu::status;
  switch (err) {
  case cudaSuccess:
    return status::ok;
  case cudaErrorMemoryAllocation:
    return status::out_of_memory;
  case cudaErrorInvalidValue:
  case cudaErrorInvalidConfiguration:
  case cudaErrorInvalidDevicePointer:
  case cudaErrorInvalidResourceHandle:
  case cudaErrorInvalidDeviceFunction:
  case cudaErrorNoKernelImageForDevice:
  // A module the driver refused (the driver API's CUresult codes for these
  // are the same numbers: CUDA_ERROR_INVALID_IMAGE, _INVALID_PTX, ...).
  case cudaErrorInvalidKernelImage:
  case cudaErrorInvalidPtx:
  case cudaErrorUnsupportedPtxVersion:
  case cudaErrorJitCompilerNotFound:
  case cudaErrorSymbolNotFound:
  case cudaErrorInvalidSource:
    return status::invalid_value;
  case cudaErrorNoDevice:
  case cudaErrorInvalidDevice:
  case cudaErrorDevicesUnavailable:
    return status::no_device;
  case cudaErrorInsufficientDriver:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorCompatNotSupportedOnDevice:
    return status::driver_missing;
  case cudaErrorLaunchFailure:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
    return status::launch_failure;
  case cudaErrorIllegalAddress:
    return status::illegal_address;
  case cudaErrorECCUncorrectable:
    return status::ecc_uncorrectable;
  case cudaErrorNvlinkUncorrectable:
  case cudaErrorContextIsDestroyed:
    return status::hardware_stop;
  default:
    return status::other;
  }
}

namespace {

gpu::result rc(cudaError_t err) {
  return {classify(err), static_cast<int>(err)};
}

cudaStream_t stream_of(gpu::stream_t s) {
  return static_cast<cudaStream_t>(s);
}

cudaEvent_t event_of(gpu::event_t e) {
  return static_cast<cudaEvent_t>(e);
}

gpu::result blas_rc(cublasStatus_t st) {
  switch (st) {
  case CUBLAS_STATUS_SUCCESS:
    return {};
  case CUBLAS_STATUS_ALLOC_FAILED:
    return rc(cudaErrorMemoryAllocation);
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return rc(cudaErrorInitializationError);
  default:
    return rc(cudaErrorUnknown);
  }
}

std::string format_uuid(const cudaUUID_t& id) {
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char buf[64];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                "%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
                b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

// The driver API's module calls, reached through the runtime
// (cudaGetDriverEntryPointByVersion) so that the plugin links no libcuda:
// on a machine without a driver it still loads and reports no device.
struct driver_modules {
  decltype(&cuModuleLoadDataEx) load = nullptr;
  decltype(&cuModuleGetFunction) get_function = nullptr;
  decltype(&cuModuleUnload) unload = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;

  // cudaSuccess once every entry point is found.
  cudaError_t resolve() {
    auto find = [](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found{};
      auto err = cudaGetDriverEntryPointByVersion(name, &p, 12000,
                                                  cudaEnableDefault, &found);
      if (err != cudaSuccess)
        return err;
      if (found != cudaDriverEntryPointSuccess || p == nullptr)
        return cudaErrorSymbolNotFound;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      return cudaSuccess;
    };
    for (auto err :
         {find("cuModuleLoadDataEx", load),
          find("cuModuleGetFunction", get_function),
          find("cuModuleUnload", unload), find("cuLaunchKernel", launch)})
      if (err != cudaSuccess)
        return err;
    return cudaSuccess;
  }
};

class runtime_api final : public gpu::api {
public:
  ~runtime_api() override {
    for (auto& [stream, blas] : blas_)
      cublasDestroy(blas.handle);
  }

  const char* vendor() const override { return "CUDA"; }

  std::string describe(int raw) const override {
    auto err = static_cast<cudaError_t>(raw);
    return std::string{cudaGetErrorName(err)} + ": " + cudaGetErrorString(err);
  }

  gpu::result device_count(int& n) override {
    n = 0;
    return rc(cudaGetDeviceCount(&n));
  }

  gpu::result get_properties(int dev, gpu::properties& out) override {
    cudaDeviceProp p{};
    if (auto err = cudaGetDeviceProperties(&p, dev); err != cudaSuccess)
      return rc(err);
    out.name = p.name;
    out.cc_major = p.major;
    out.cc_minor = p.minor;
    out.memory_bytes = p.totalGlobalMem;
    out.multiprocessors = p.multiProcessorCount;
    out.uuid = format_uuid(p.uuid);
    char bus[64] = {};
    if (auto err = cudaDeviceGetPCIBusId(bus, sizeof(bus), dev);
        err != cudaSuccess)
      return rc(err);
    out.pci_bus_id = bus;
    return {};
  }

  gpu::result set_device(int dev) override { return rc(cudaSetDevice(dev)); }

  gpu::result stream_create(gpu::stream_t& s) override {
    cudaStream_t stream = nullptr;
    if (auto err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        err != cudaSuccess)
      return rc(err);
    cublasHandle_t handle = nullptr;
    if (auto st = cublasCreate(&handle); st != CUBLAS_STATUS_SUCCESS) {
      cudaStreamDestroy(stream);
      return blas_rc(st);
    }
    cublasSetStream(handle, stream);
    int dev = 0;
    cudaGetDevice(&dev);
    std::lock_guard<std::mutex> guard{mtx_};
    blas_[stream] = {handle, dev};
    s = stream;
    return {};
  }

  gpu::result stream_destroy(gpu::stream_t s) override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (auto i = blas_.find(stream_of(s)); i != blas_.end()) {
        cublasDestroy(i->second.handle);
        blas_.erase(i);
      }
    }
    return rc(cudaStreamDestroy(stream_of(s)));
  }

  gpu::result stream_synchronize(gpu::stream_t s) override {
    return rc(cudaStreamSynchronize(stream_of(s)));
  }

  gpu::result stream_query(gpu::stream_t s) override {
    auto err = cudaStreamQuery(stream_of(s));
    return rc(err == cudaErrorNotReady ? cudaSuccess : err);
  }

  gpu::result malloc_device(void*& p, size_t bytes) override {
    return rc(cudaMalloc(&p, bytes));
  }

  gpu::result free_device(void* p) override { return rc(cudaFree(p)); }

  // Interprocess sharing: the handle is cudaIpcMemHandle_t's bytes, 64 of them.
  gpu::result ipc_get_handle(void* base,
                             std::array<uint8_t, 64>& out) override {
    cudaIpcMemHandle_t h{};
    static_assert(sizeof h == 64);
    auto r = rc(cudaIpcGetMemHandle(&h, base));
    if (!r.failed())
      std::memcpy(out.data(), &h, sizeof h);
    return r;
  }

  gpu::result ipc_open_handle(const std::array<uint8_t, 64>& handle,
                              void*& base) override {
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle.data(), sizeof h);
    return rc(cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess));
  }

  gpu::result ipc_close_handle(void* base) override {
    return rc(cudaIpcCloseMemHandle(base));
  }

  gpu::result host_register(void* p, size_t bytes) override {
    return rc(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
  }

  gpu::result host_unregister(void* p) override {
    return rc(cudaHostUnregister(p));
  }

  gpu::result copy_to_device(void* dst, const void* src, size_t bytes,
                             gpu::stream_t s) override {
    return rc(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(s)));
  }

  gpu::result copy_to_host(void* dst, const void* src, size_t bytes,
                           gpu::stream_t s) override {
    return rc(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(s)));
  }

  gpu::result zero_device(void* p, size_t bytes, gpu::stream_t s) override {
    return rc(cudaMemsetAsync(p, 0, bytes, stream_of(s)));
  }

  gpu::result event_create(gpu::event_t& e, bool timing) override {
    cudaEvent_t ev = nullptr;
    auto err = cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault
                                                    : cudaEventDisableTiming);
    e = ev;
    return rc(err);
  }

  gpu::result event_destroy(gpu::event_t e) override {
    return rc(cudaEventDestroy(event_of(e)));
  }

  gpu::result event_record(gpu::event_t e, gpu::stream_t s) override {
    return rc(cudaEventRecord(event_of(e), stream_of(s)));
  }

  gpu::result event_query(gpu::event_t e, bool& done) override {
    auto err = cudaEventQuery(event_of(e));
    done = err == cudaSuccess;
    return rc(err == cudaErrorNotReady ? cudaSuccess : err);
  }

  gpu::result stream_wait_event(gpu::stream_t s, gpu::event_t e) override {
    return rc(cudaStreamWaitEvent(stream_of(s), event_of(e), 0));
  }

  gpu::result event_elapsed_ns(gpu::event_t start, gpu::event_t stop,
                               int64_t& ns) override {
    float ms = 0;
    auto err = cudaEventElapsedTime(&ms, event_of(start), event_of(stop));
    ns = static_cast<int64_t>(double(ms) * 1e6);
    return rc(err);
  }

  gpu::result scratch_bytes(const kernels::gpu::launch_args& a,
                            size_t& bytes) override {
    return rc(kernels::cuda::scratch_bytes(a, bytes));
  }

  gpu::result launch(const kernels::gpu::launch_args& a,
                     gpu::stream_t s) override {
    // A failed call before (an OOM, say) leaves a per-thread error that the
    // kernels' own checks would report as theirs.
    static_cast<void>(cudaGetLastError());
    kernels::cuda::stream_context ctx;
    ctx.stream = stream_of(s);
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (auto i = blas_.find(ctx.stream); i != blas_.end())
        ctx.blas = i->second.handle;
    }
    return rc(kernels::cuda::launch(a, ctx));
  }

  gpu::result module_load(const void* image, size_t bytes, gpu::module_t& m,
                          std::string& log) override {
    static_cast<void>(bytes); // PTX is NUL-terminated, cubin and fatbin
                              // carry their size
    if (auto err = modules())
      return rc(err);
    // The JIT's error log, for PTX that does not compile.
    char error_log[4096] = "";
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER,
                           CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {error_log, reinterpret_cast<void*>(sizeof error_log)};
    // A primary context current on this thread (cudaSetDevice alone does
    // not create it).
    if (auto err = cudaFree(nullptr); err != cudaSuccess)
      return rc(err);
    CUmodule mod = nullptr;
    auto res = driver_.load(&mod, image, 2, opts, values);
    error_log[sizeof error_log - 1] = '\0';
    log = error_log;
    m = mod;
    return rc(static_cast<cudaError_t>(res));
  }

  gpu::result module_function(gpu::module_t m, const char* name,
                              gpu::function_t& f) override {
    if (auto err = modules())
      return rc(err);
    CUfunction fn = nullptr;
    auto res = driver_.get_function(&fn, static_cast<CUmodule>(m), name);
    f = fn;
    return rc(static_cast<cudaError_t>(res));
  }

  gpu::result module_unload(gpu::module_t m) override {
    if (auto err = modules())
      return rc(err);
    return rc(
        static_cast<cudaError_t>(driver_.unload(static_cast<CUmodule>(m))));
  }

  gpu::result launch_function(gpu::function_t f, uint32_t grid, uint32_t block,
                              const void* args, size_t bytes,
                              gpu::stream_t s) override {
    static_cast<void>(bytes);
    if (auto err = modules())
      return rc(err);
    void* params[] = {const_cast<void*>(args)};
    return rc(static_cast<cudaError_t>(driver_.launch(
        static_cast<CUfunction>(f), grid, 1, 1, block, 1, 1, 0,
        reinterpret_cast<CUstream>(stream_of(s)), params, nullptr)));
  }

  gpu::result on_stream_done(gpu::stream_t s, gpu::host_fn fn,
                             void* user) override {
    return rc(cudaLaunchHostFunc(stream_of(s), fn, user));
  }

  gpu::result last_error() override { return rc(cudaGetLastError()); }

  gpu::result device_reset() override {
    int dev = 0;
    cudaGetDevice(&dev);
    {
      // cuBLAS handles of the device die with its context.
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto i = blas_.begin(); i != blas_.end();) {
        if (i->second.device == dev) {
          cublasDestroy(i->second.handle);
          i = blas_.erase(i);
        } else {
          ++i;
        }
      }
    }
    return rc(cudaDeviceReset());
  }

private:
  // Resolves the driver's module calls once.
  cudaError_t modules() {
    std::call_once(modules_once_, [this] { modules_err_ = driver_.resolve(); });
    return modules_err_;
  }

  std::once_flag modules_once_;
  cudaError_t modules_err_ = cudaSuccess;
  driver_modules driver_;

  struct blas_entry {
    cublasHandle_t handle = nullptr;
    int device = 0;
  };
  std::mutex mtx_;
  std::unordered_map<cudaStream_t, blas_entry> blas_;
};

} // namespace

std::shared_ptr<gpu::api> make_runtime_api() {
  return std::make_shared<runtime_api>();
}

} // namespace cohort::devices::cuda
