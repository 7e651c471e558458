#include "devices/hip/hip_api.hpp"

#include <cstdio>
#include <cstring>

#include "kernels/hip/launch.hpp"

namespace cohort::devices::hip {

gpu::status classify(hipError_t err) {
  using gpu::status;
  switch (err) {
  case hipSuccess:
    return status::ok;
  case hipErrorOutOfMemory:
    return status::out_of_memory;
  case hipErrorInvalidValue:
  case hipErrorInvalidConfiguration:
  case hipErrorInvalidDevicePointer:
  case hipErrorInvalidHandle:
  case hipErrorInvalidDeviceFunction:
  case hipErrorNoBinaryForGpu:
  // A code object the runtime refused, or an entry point it lacks.
  case hipErrorInvalidImage:
  case hipErrorInvalidKernelFile:
  case hipErrorNotFound:
  case hipErrorSharedObjectInitFailed:
    return status::invalid_value;
  case hipErrorNoDevice:
  case hipErrorInvalidDevice:
    return status::no_device;
  case hipErrorInsufficientDriver:
    return status::driver_missing;
  case hipErrorLaunchFailure:
  case hipErrorLaunchTimeOut:
  case hipErrorAssert:
    return status::launch_failure;
  case hipErrorIllegalAddress:
    return status::illegal_address;
  case hipErrorECCNotCorrectable:
    return status::ecc_uncorrectable;
  case hipErrorContextIsDestroyed:
    return status::hardware_stop;
  default:
    return status::other;
  }
}

namespace {

gpu::result rc(hipError_t err) {
  return {classify(err), static_cast<int>(err)};
}

hipStream_t stream_of(gpu::stream_t s) {
  return static_cast<hipStream_t>(s);
}

hipEvent_t event_of(gpu::event_t e) {
  return static_cast<hipEvent_t>(e);
}

// HIP 5.2 has no hipLaunchHostFunc; a stream callback carries the function.
struct callback {
  gpu::host_fn fn;
  void* user;
};

void run_callback(hipStream_t, hipError_t, void* user) {
  auto* cb = static_cast<callback*>(user);
  cb->fn(cb->user);
  delete cb;
}

class runtime_api final : public gpu::api {
public:
  const char* vendor() const override { return "HIP"; }

  std::string describe(int raw) const override {
    auto err = static_cast<hipError_t>(raw);
    return std::string{hipGetErrorName(err)} + ": " + hipGetErrorString(err);
  }

  gpu::result device_count(int& n) override {
    n = 0;
    return rc(hipGetDeviceCount(&n));
  }

  gpu::result get_properties(int dev, gpu::properties& out) override {
    hipDeviceProp_t p{};
    if (auto err = hipGetDeviceProperties(&p, dev); err != hipSuccess)
      return rc(err);
    out.name = p.name;
    out.cc_major = p.major;
    out.cc_minor = p.minor;
    out.memory_bytes = p.totalGlobalMem;
    out.multiprocessors = p.multiProcessorCount;
    std::string arch = p.gcnArchName;
    out.arch = arch.substr(0, arch.find(':'));
    hipUUID id{};
    if (hipDeviceGetUuid(&id, dev) == hipSuccess) {
      const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
      char buf[40];
      for (int i = 0; i < 16; ++i)
        std::snprintf(buf + 2 * i, 3, "%02x", b[i]);
      out.uuid = buf;
    }
    char bus[64] = {};
    if (auto err = hipDeviceGetPCIBusId(bus, sizeof(bus), dev);
        err != hipSuccess)
      return rc(err);
    out.pci_bus_id = bus;
    return {};
  }

  gpu::result set_device(int dev) override { return rc(hipSetDevice(dev)); }

  gpu::result stream_create(gpu::stream_t& s) override {
    hipStream_t stream = nullptr;
    auto err = hipStreamCreateWithFlags(&stream, hipStreamNonBlocking);
    s = stream;
    return rc(err);
  }

  gpu::result stream_destroy(gpu::stream_t s) override {
    return rc(hipStreamDestroy(stream_of(s)));
  }

  gpu::result stream_synchronize(gpu::stream_t s) override {
    return rc(hipStreamSynchronize(stream_of(s)));
  }

  gpu::result stream_query(gpu::stream_t s) override {
    auto err = hipStreamQuery(stream_of(s));
    return rc(err == hipErrorNotReady ? hipSuccess : err);
  }

  gpu::result malloc_device(void*& p, size_t bytes) override {
    return rc(hipMalloc(&p, bytes));
  }

  gpu::result free_device(void* p) override { return rc(hipFree(p)); }

  // Interprocess sharing: the handle is hipIpcMemHandle_t's bytes, 64 of them.
  gpu::result ipc_get_handle(void* base,
                             std::array<uint8_t, 64>& out) override {
    hipIpcMemHandle_t h{};
    static_assert(sizeof h == 64);
    auto r = rc(hipIpcGetMemHandle(&h, base));
    if (!r.failed())
      std::memcpy(out.data(), &h, sizeof h);
    return r;
  }

  gpu::result ipc_open_handle(const std::array<uint8_t, 64>& handle,
                              void*& base) override {
    hipIpcMemHandle_t h{};
    std::memcpy(&h, handle.data(), sizeof h);
    return rc(hipIpcOpenMemHandle(&base, h, hipIpcMemLazyEnablePeerAccess));
  }

  gpu::result ipc_close_handle(void* base) override {
    return rc(hipIpcCloseMemHandle(base));
  }

  gpu::result host_register(void* p, size_t bytes) override {
    return rc(hipHostRegister(p, bytes, hipHostRegisterDefault));
  }

  gpu::result host_unregister(void* p) override {
    return rc(hipHostUnregister(p));
  }

  gpu::result copy_to_device(void* dst, const void* src, size_t bytes,
                             gpu::stream_t s) override {
    return rc(
        hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, stream_of(s)));
  }

  gpu::result copy_to_host(void* dst, const void* src, size_t bytes,
                           gpu::stream_t s) override {
    return rc(
        hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, stream_of(s)));
  }

  gpu::result zero_device(void* p, size_t bytes, gpu::stream_t s) override {
    return rc(hipMemsetAsync(p, 0, bytes, stream_of(s)));
  }

  gpu::result event_create(gpu::event_t& e, bool timing) override {
    hipEvent_t ev = nullptr;
    auto err = hipEventCreateWithFlags(&ev, timing ? hipEventDefault
                                                   : hipEventDisableTiming);
    e = ev;
    return rc(err);
  }

  gpu::result event_destroy(gpu::event_t e) override {
    return rc(hipEventDestroy(event_of(e)));
  }

  gpu::result event_record(gpu::event_t e, gpu::stream_t s) override {
    return rc(hipEventRecord(event_of(e), stream_of(s)));
  }

  gpu::result event_query(gpu::event_t e, bool& done) override {
    auto err = hipEventQuery(event_of(e));
    done = err == hipSuccess;
    return rc(err == hipErrorNotReady ? hipSuccess : err);
  }

  gpu::result stream_wait_event(gpu::stream_t s, gpu::event_t e) override {
    return rc(hipStreamWaitEvent(stream_of(s), event_of(e), 0));
  }

  gpu::result event_elapsed_ns(gpu::event_t start, gpu::event_t stop,
                               int64_t& ns) override {
    float ms = 0;
    auto err = hipEventElapsedTime(&ms, event_of(start), event_of(stop));
    ns = static_cast<int64_t>(double(ms) * 1e6);
    return rc(err);
  }

  gpu::result scratch_bytes(const kernels::gpu::launch_args& a,
                            size_t& bytes) override {
    return rc(kernels::hip::scratch_bytes(a, bytes));
  }

  gpu::result launch(const kernels::gpu::launch_args& a,
                     gpu::stream_t s) override {
    // A failed call before (an OOM, say) leaves a per-thread error that the
    // kernels' own checks would report as theirs.
    static_cast<void>(hipGetLastError());
    kernels::hip::stream_context ctx;
    ctx.stream = stream_of(s);
    return rc(kernels::hip::launch(a, ctx));
  }

  gpu::result module_load(const void* image, size_t bytes, gpu::module_t& m,
                          std::string& log) override {
    static_cast<void>(bytes); // a code object (ELF) carries its size
    log.clear();
    hipModule_t mod = nullptr;
    auto err = hipModuleLoadData(&mod, image);
    m = mod;
    return rc(err);
  }

  gpu::result module_function(gpu::module_t m, const char* name,
                              gpu::function_t& f) override {
    hipFunction_t fn = nullptr;
    auto err = hipModuleGetFunction(&fn, static_cast<hipModule_t>(m), name);
    f = fn;
    return rc(err);
  }

  gpu::result module_unload(gpu::module_t m) override {
    return rc(hipModuleUnload(static_cast<hipModule_t>(m)));
  }

  gpu::result launch_function(gpu::function_t f, uint32_t grid, uint32_t block,
                              const void* args, size_t bytes,
                              gpu::stream_t s) override {
    // The argument as one packed buffer (`extra`): the form every HIP
    // release takes.
    size_t size = bytes;
    void* config[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(args),
                      HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
                      HIP_LAUNCH_PARAM_END};
    return rc(hipModuleLaunchKernel(static_cast<hipFunction_t>(f), grid, 1, 1,
                                    block, 1, 1, 0, stream_of(s), nullptr,
                                    config));
  }

  gpu::result on_stream_done(gpu::stream_t s, gpu::host_fn fn,
                             void* user) override {
    auto* cb = new callback{fn, user};
    auto err = hipStreamAddCallback(stream_of(s), run_callback, cb, 0);
    if (err != hipSuccess)
      delete cb;
    return rc(err);
  }

  gpu::result last_error() override { return rc(hipGetLastError()); }

  gpu::result device_reset() override { return rc(hipDeviceReset()); }
};

} // namespace

std::shared_ptr<gpu::api> make_runtime_api() {
  return std::make_shared<runtime_api>();
}

} // namespace cohort::devices::hip
