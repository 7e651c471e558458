// A fake of a vendor GPU runtime, for tests only: "device memory" is host
// memory, each stream is a thread running its operations in order, kernels
// run the CPU implementations, and faults can be injected. It drives the
// host-side GPU logic (devices/gpu) without hardware; it is never used
// outside tests and never reported as a GPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cohort/kernel_abi.h"
#include "devices/gpu/api.hpp"
#include "devices/health/health.hpp"

namespace cohort::testing {

/// One device of the fake runtime.
struct fake_device_spec {
  std::string name = "Fake GPU (test double)";
  uint64_t memory_bytes = uint64_t{256} << 20;
  std::string pci_bus_id = "0000:99:00.0";
  int multiprocessors = 8;
  /// Empty: "FAKE-" and the device's ordinal.
  std::string uuid;
};

class fake_gpu_api final : public devices::gpu::api {
public:
  using device_spec = fake_device_spec;

  /// One device with the default spec.
  fake_gpu_api();
  explicit fake_gpu_api(std::vector<device_spec> devices);
  ~fake_gpu_api() override;

  // -- faults -----------------------------------------------------------------

  /// The next `n` device allocations fail with out_of_memory.
  void fail_next_mallocs(int n);
  /// The next kernel to run fails with `sticky`; every later call of the
  /// device returns it (until a reset that clears it).
  void fault_next_launch(devices::gpu::status sticky);
  /// The next kernel to run blocks its stream until `release_hung`.
  void hang_next_launch();
  void release_hung();
  /// device_count reports a missing driver.
  void set_driver_missing(bool missing);
  /// device_count fails with no_device, as CUDA does when
  /// CUDA_VISIBLE_DEVICES names nothing it has.
  void set_no_device(bool none);
  /// Like CUDA: a reset does not clear a sticky error (a new process does).
  void set_sticky_survives_reset(bool survives);

  // -- observers --------------------------------------------------------------

  size_t live_allocations() const;
  size_t registered_host_ranges() const;
  uint64_t kernels_run() const { return kernels_run_; }
  /// Bytes copied device -> host (a chain copies only its last output).
  uint64_t bytes_to_host() const { return bytes_to_host_; }
  /// Frees of pointers that were not live (double or foreign frees).
  uint64_t bad_frees() const { return bad_frees_; }
  uint64_t resets() const { return resets_; }
  /// Device-side waits of one stream for another's event.
  uint64_t stream_waits() const { return stream_waits_; }
  /// Bytes zeroed on streams (zero_device).
  uint64_t bytes_zeroed() const { return bytes_zeroed_; }
  /// Device allocations made so far (malloc_device calls that succeeded).
  uint64_t device_mallocs() const { return device_mallocs_; }
  /// The device memory at `p` (tests read what kernels left there).
  bool is_zero(const void* p, size_t bytes) const;

  // -- modules ----------------------------------------------------------------

  /// A fake module image: this line, then one entry point's name per line.
  /// A line `!crash` makes loading it crash the process (SIGSEGV), `!hang`
  /// makes it never return: a JIT or loader gone wrong, for the tests of
  /// loading in isolation (only ever loaded in a child process).
  static constexpr const char* module_magic = "FAKE MODULE\n";
  /// What a module function does when launched: the fake's stand-in for
  /// device code, run on the stream's thread over fake device memory (host
  /// memory), once per launch (not per thread).
  using fake_function = std::function<void(const cohort_gpu_call&)>;
  /// Defines the stand-in for entry point `name` (launching an entry point
  /// without one runs nothing).
  void define_function(const std::string& name, fake_function fn);
  /// One launch of a module function, as the runtime was asked for it.
  struct function_launch {
    std::string function;
    uint32_t grid = 0;
    uint32_t block = 0;
    size_t arg_bytes = 0;
    cohort_gpu_call call{};
  };
  std::vector<function_launch> function_launches() const;
  /// Modules loaded (module_load) and not unloaded or reset away.
  size_t live_modules() const;
  /// Module loads so far, successful or not.
  uint64_t module_loads() const { return module_loads_; }

  // -- api ----------------------------------------------------------------

  const char* vendor() const override { return "FAKE"; }
  std::string describe(int raw) const override;
  devices::gpu::result device_count(int& n) override;
  devices::gpu::result get_properties(int dev,
                                      devices::gpu::properties& out) override;
  devices::gpu::result set_device(int dev) override;
  devices::gpu::result stream_create(devices::gpu::stream_t& s) override;
  devices::gpu::result stream_destroy(devices::gpu::stream_t s) override;
  devices::gpu::result stream_synchronize(devices::gpu::stream_t s) override;
  devices::gpu::result stream_query(devices::gpu::stream_t s) override;
  devices::gpu::result malloc_device(void*& p, size_t bytes) override;
  devices::gpu::result free_device(void* p) override;
  devices::gpu::result host_register(void* p, size_t bytes) override;
  devices::gpu::result host_unregister(void* p) override;
  devices::gpu::result copy_to_device(void* dst, const void* src, size_t bytes,
                                      devices::gpu::stream_t s) override;
  devices::gpu::result copy_to_host(void* dst, const void* src, size_t bytes,
                                    devices::gpu::stream_t s) override;
  devices::gpu::result zero_device(void* p, size_t bytes,
                                   devices::gpu::stream_t s) override;
  devices::gpu::result event_create(devices::gpu::event_t& e,
                                    bool timing) override;
  devices::gpu::result event_destroy(devices::gpu::event_t e) override;
  devices::gpu::result event_record(devices::gpu::event_t e,
                                    devices::gpu::stream_t s) override;
  devices::gpu::result event_query(devices::gpu::event_t e,
                                   bool& done) override;
  devices::gpu::result stream_wait_event(devices::gpu::stream_t s,
                                         devices::gpu::event_t e) override;
  devices::gpu::result event_elapsed_ns(devices::gpu::event_t start,
                                        devices::gpu::event_t stop,
                                        int64_t& ns) override;
  devices::gpu::result scratch_bytes(const kernels::gpu::launch_args& a,
                                     size_t& bytes) override;
  devices::gpu::result launch(const kernels::gpu::launch_args& a,
                              devices::gpu::stream_t s) override;
  devices::gpu::result module_load(const void* image, size_t bytes,
                                   devices::gpu::module_t& m,
                                   std::string& log) override;
  devices::gpu::result module_function(devices::gpu::module_t m,
                                       const char* name,
                                       devices::gpu::function_t& f) override;
  devices::gpu::result module_unload(devices::gpu::module_t m) override;
  devices::gpu::result launch_function(devices::gpu::function_t f,
                                       uint32_t grid, uint32_t block,
                                       const void* args, size_t bytes,
                                       devices::gpu::stream_t s) override;
  devices::gpu::result on_stream_done(devices::gpu::stream_t s,
                                      devices::gpu::host_fn fn,
                                      void* user) override;
  devices::gpu::result last_error() override;
  devices::gpu::result device_reset() override;

private:
  struct stream;
  struct event {
    std::atomic<int64_t> at_ns{-1};
    /// Records asked for (on the host) and done (on the stream): a wait
    /// enqueued after record k waits for record k, as in CUDA.
    std::atomic<uint64_t> recorded{0};
    std::atomic<uint64_t> completed{0};
  };
  struct device_state {
    device_spec spec;
    uint64_t used = 0;
    devices::gpu::status sticky = devices::gpu::status::ok;
    std::map<void*, size_t> blocks;
    /// Events live in the device's context: a reset destroys them, as it
    /// does on a real GPU (the caller forgets its handles without a destroy).
    std::set<event*> events;
  };

  devices::gpu::result enqueue(devices::gpu::stream_t s,
                               std::function<void()> op);
  devices::gpu::result sticky_of(int dev) const;
  int current() const;

  struct fake_module {
    int dev = 0;
    /// Entry points; function_t handles point at these strings.
    std::vector<std::unique_ptr<std::string>> functions;
  };
  /// Whether [p, p + bytes) lies inside one live block of `dev` (mtx_ held).
  bool inside(int dev, const void* p, size_t bytes) const;

  std::vector<device_state> devs_;
  std::map<fake_module*, std::unique_ptr<fake_module>> modules_;
  std::map<std::string, fake_function> functions_;
  std::vector<function_launch> function_launches_;
  std::atomic<uint64_t> module_loads_{0};
  mutable std::mutex mtx_;
  std::condition_variable hung_cv_;
  bool hung_released_ = false;
  int failing_mallocs_ = 0;
  devices::gpu::status next_fault_ = devices::gpu::status::ok;
  bool hang_next_ = false;
  bool driver_missing_ = false;
  bool no_device_ = false;
  bool sticky_survives_reset_ = false;
  std::map<void*, size_t> registered_;
  std::vector<std::unique_ptr<stream>> streams_;
  std::atomic<uint64_t> kernels_run_{0};
  std::atomic<uint64_t> resets_{0};
  std::atomic<uint64_t> bytes_to_host_{0};
  std::atomic<uint64_t> bad_frees_{0};
  std::atomic<uint64_t> stream_waits_{0};
  std::atomic<uint64_t> bytes_zeroed_{0};
  std::atomic<uint64_t> device_mallocs_{0};
};

/// A health monitor the test steers: samples it is given, events it raises.
class fake_monitor final : public devices::health::gpu_monitor {
public:
  const char* library() const override { return "fake NVML"; }
  bool available() const override { return true; }
  std::string unavailable_reason() const override { return {}; }
  devices::health::gpu_sample sample(const std::string& pci_bus_id) override;
  bool watch(const std::string& pci_bus_id,
             std::function<void(devices::health::gpu_event)> on_event) override;
  void unwatch(const std::string& pci_bus_id) override;
  link_kind link_between(const std::string& a, const std::string& b) override;

  std::vector<devices::health::mig_gpu> mig_gpus() override;
  /// A MIG instance's sample is its GPU's without utilization, with the
  /// instance's memory.
  devices::health::gpu_sample sample_device(const std::string& pci_bus_id,
                                            const std::string& uuid) override;

  /// Links the GPUs at bus ids `a` and `b` both ways.
  void set_link(const std::string& a, const std::string& b, link_kind kind);

  /// Reports `gpu` in MIG mode.
  void add_mig_gpu(devices::health::mig_gpu gpu);

  /// Delivers an event to the watcher of `pci_bus_id`.
  void raise(const std::string& pci_bus_id, devices::health::gpu_event ev);

  /// Delivers `ev` to every watcher as it starts watching (from `watch`).
  void raise_on_watch(devices::health::gpu_event ev);

  /// Whether someone watches `pci_bus_id` now.
  bool watching(const std::string& pci_bus_id);

private:
  std::mutex mtx_;
  std::optional<devices::health::gpu_event> on_watch_;
  std::map<std::string, std::function<void(devices::health::gpu_event)>>
      watchers_;
  std::map<std::pair<std::string, std::string>, link_kind> links_;
  std::vector<devices::health::mig_gpu> migs_;
};

} // namespace cohort::testing
