// Device rescan (devices/gpu/rescan.hpp): a scan in a fresh process
// (cohort-gpu-scan over the fake plugin) sees GPUs come and go; the plan
// matches GPUs by identity through shifted ordinals, added, missed,
// vanished after enough scans, found again, and scans that cannot be
// trusted for a GPU; the helper's child process (ipc/child.hpp) is killed
// past its deadline and its crash is told apart from a clean end.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <catch2/catch.hpp>

#include "devices/gpu/rescan.hpp"
#include "ipc/child.hpp"
#include "messages/errc.hpp"

using namespace cohort;
using devices::gpu::known_gpu;
using devices::gpu::scanned_gpu;

namespace {

device_info gpu_info(const std::string& name, const std::string& uuid,
                     const std::string& bus) {
  device_info d;
  d.name = name;
  d.kind = device_kind::cuda_gpu;
  d.uuid = uuid;
  d.pci_bus_id = bus;
  return d;
}

scanned_gpu seen(int ordinal, const std::string& uuid,
                 const std::string& bus = "") {
  return {"NVIDIA", ordinal, "",
          gpu_info("cuda" + std::to_string(ordinal), uuid, bus)};
}

known_gpu have(size_t index, int ordinal, const std::string& uuid,
               const std::string& bus = "") {
  known_gpu k;
  k.index = index;
  k.vendor = "NVIDIA";
  k.ordinal = ordinal;
  k.info = gpu_info("cuda" + std::to_string(ordinal), uuid, bus);
  return k;
}

// plan_rescan with every vendor's GPUs and MIG instances listed.
devices::gpu::rescan_plan plan_of(const std::vector<known_gpu>& known,
                                  const std::vector<scanned_gpu>& scanned,
                                  uint32_t missing_scans) {
  std::set<std::string> all{"NVIDIA", "AMD", "CUDA", "HIP"};
  return devices::gpu::plan_rescan(known, scanned, missing_scans, all, all);
}

} // namespace

TEST_CASE("a rescan that finds the same GPUs changes nothing",
          "[devices][rescan]") {
  auto plan = plan_of({have(2, 0, "GPU-a"), have(3, 1, "GPU-b")},
                      {seen(0, "GPU-a"), seen(1, "GPU-b")}, 2);
  CHECK(plan.added.empty());
  CHECK(plan.vanished.empty());
  CHECK(plan.moved.empty());
  CHECK(plan.returned.empty());
  CHECK(plan.missed == std::vector<uint32_t>{0, 0});
}

TEST_CASE("a GPU that appears is added, and the ordinals it shifts are "
          "moves, not new GPUs",
          "[devices][rescan]") {
  // GPU-n took ordinal 0: the known ones are now 1 and 2.
  auto plan =
      plan_of({have(2, 0, "GPU-a"), have(3, 1, "GPU-b")},
              {seen(0, "GPU-n"), seen(1, "GPU-a"), seen(2, "GPU-b")}, 2);
  CHECK(plan.added == std::vector<size_t>{0});
  CHECK(plan.vanished.empty());
  CHECK(plan.moved == std::vector<std::pair<size_t, size_t>>{{2, 1}, {3, 2}});
}

TEST_CASE("a GPU missing from a scan vanishes only after enough scans in a "
          "row",
          "[devices][rescan]") {
  std::vector<known_gpu> fleet{have(2, 0, "GPU-a"), have(3, 1, "GPU-b")};
  // GPU-a gone: GPU-b is ordinal 0 now.
  std::vector<scanned_gpu> scan{seen(0, "GPU-b")};
  auto first = plan_of(fleet, scan, 2);
  CHECK(first.vanished.empty());
  CHECK(first.missed == std::vector<uint32_t>{1, 0});
  CHECK(first.moved == std::vector<std::pair<size_t, size_t>>{{3, 0}});
  fleet[0].missed = first.missed[0];
  fleet[1].ordinal = 0;
  auto second = plan_of(fleet, scan, 2);
  CHECK(second.vanished == std::vector<size_t>{2});
  CHECK(second.missed == std::vector<uint32_t>{2, 0});
  CHECK(second.moved.empty());
  // Found again before the threshold: the count starts over.
  fleet[0].missed = 1;
  auto back = plan_of(fleet, {seen(0, "GPU-a"), seen(1, "GPU-b")}, 2);
  CHECK(back.vanished.empty());
  CHECK(back.missed == std::vector<uint32_t>{0, 0});
  // One scan is enough when so configured; 0 counts as 1.
  fleet[0].missed = 0;
  CHECK(plan_of(fleet, scan, 0).vanished == std::vector<size_t>{2});
}

TEST_CASE("a GPU that was lost and comes back takes its old index",
          "[devices][rescan]") {
  std::vector<known_gpu> fleet{have(2, 0, "GPU-a"), have(3, 1, "GPU-b")};
  fleet[0].removed = true;
  fleet[0].missed = 2;
  auto plan = plan_of(fleet, {seen(0, "GPU-b"), seen(1, "GPU-a")}, 2);
  CHECK(plan.added.empty());
  CHECK(plan.returned == std::vector<std::pair<size_t, size_t>>{{2, 1}});
  CHECK(plan.moved == std::vector<std::pair<size_t, size_t>>{{3, 0}});
  // A removed GPU still missing is not lost again.
  auto still = plan_of(fleet, {seen(0, "GPU-b")}, 2);
  CHECK(still.vanished.empty());
  CHECK(still.returned.empty());
}

TEST_CASE("GPUs without a UUID are known by their PCI bus id, and a GPU "
          "without either is left out",
          "[devices][rescan]") {
  auto plan = plan_of({have(1, 0, "", "0000:98:00.0")},
                      {seen(0, "", "98:00.0"), seen(1, "", "")}, 2);
  CHECK(plan.added.empty());
  CHECK(plan.missed == std::vector<uint32_t>{0});
  REQUIRE(plan.ignored.size() == 1);
  CHECK_THAT(plan.ignored[0], Catch::Contains("no UUID and no PCI bus id"));
  CHECK(devices::gpu::identity("NVIDIA", gpu_info("x", "GPU-a", "98:00.0")) ==
        "NVIDIA/GPU-a");
  CHECK(devices::gpu::identity("AMD", gpu_info("x", "", "0000:98:00.0")) ==
        devices::gpu::identity("AMD", gpu_info("x", "", "98:00.0")));
}

TEST_CASE("a scan that shows one identity twice is not trusted for it",
          "[devices][rescan]") {
  auto plan =
      plan_of({have(2, 0, "GPU-a")},
              {seen(0, "GPU-a"), seen(1, "GPU-a"), seen(2, "GPU-c")}, 1);
  // Neither added nor counted missing.
  CHECK(plan.added == std::vector<size_t>{2});
  CHECK(plan.vanished.empty());
  CHECK(plan.missed == std::vector<uint32_t>{0});
  REQUIRE(plan.ignored.size() == 1);
  CHECK_THAT(plan.ignored[0], Catch::Contains("NVIDIA/GPU-a: found twice"));
}

namespace {

// The fake plugin's GPUs follow the file COHORT_FAKE_GPU_PRESENT names.
struct fake_machine {
  std::filesystem::path file;
  fake_machine() {
    file = std::filesystem::temp_directory_path() /
           ("cohort-present-" + std::to_string(::getpid()));
    ::setenv("COHORT_PLUGIN_PATH", COHORT_FAKE_PLUGIN_DIR, 1);
    ::setenv("COHORT_FAKE_GPU_PRESENT", file.c_str(), 1);
  }
  ~fake_machine() {
    ::unsetenv("COHORT_FAKE_GPU_PRESENT");
    ::unsetenv("COHORT_PLUGIN_PATH");
    std::filesystem::remove(file);
  }
  void present(const std::string& buses) {
    std::ofstream{file, std::ios::trunc} << buses;
  }
};

std::vector<known_gpu> fleet_of(const devices::gpu::gpu_scan& s) {
  std::vector<known_gpu> out;
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    known_gpu k;
    k.index = i;
    k.vendor = s.gpus[i].vendor;
    k.ordinal = s.gpus[i].ordinal;
    k.visible = s.gpus[i].visible;
    k.info = s.gpus[i].info;
    out.push_back(std::move(k));
  }
  return out;
}

} // namespace

TEST_CASE("a scan in a fresh process sees the GPUs present now",
          "[devices][rescan]") {
  using namespace std::chrono_literals;
  fake_machine machine;
  machine.present("98\n99\n");
  auto first = devices::gpu::scan_gpus(30s);
  REQUIRE(first);
  REQUIRE(first->gpus.size() == 2);
  CHECK(first->gpus[0].vendor == "CUDA");
  CHECK(first->gpus[0].ordinal == 0);
  CHECK(first->gpus[0].info.uuid == "FAKE-98");
  CHECK(first->gpus[0].info.pci_bus_id == "0000:98:00.0");
  CHECK(first->gpus[0].info.kind == device_kind::cuda_gpu);
  CHECK(first->gpus[0].info.memory_bytes > 0);
  CHECK(first->gpus[1].info.uuid == "FAKE-99");

  // 98 leaves and 9a comes: 99 is now ordinal 0, and this process's own
  // runtime (had it made one) would still list the first two.
  machine.present("99\n9a\n");
  auto second = devices::gpu::scan_gpus(30s);
  REQUIRE(second);
  REQUIRE(second->gpus.size() == 2);
  CHECK(second->gpus[0].info.uuid == "FAKE-99");
  CHECK(second->gpus[1].info.uuid == "FAKE-9a");
  auto plan = plan_of(fleet_of(*first), second->gpus, 1);
  CHECK(plan.added == std::vector<size_t>{1});
  CHECK(plan.vanished == std::vector<size_t>{0});
  REQUIRE(plan.moved.size() == 1);
  CHECK(plan.moved[0] == std::pair<size_t, size_t>{1, 0});

  // None left: a scan that finds nothing, with the backend's word for it.
  machine.present("");
  auto none = devices::gpu::scan_gpus(30s);
  REQUIRE(none);
  CHECK(none->gpus.empty());
  CHECK_FALSE(none->notes.empty());
}

TEST_CASE("a helper child is killed at its deadline and its end is told",
          "[devices][rescan]") {
  using namespace std::chrono_literals;
  cohort::ipc::child_request req;
  req.program = "/bin/sh";
  req.args = {"-c", "read x; echo \"got $x\"; echo oops >&2"};
  req.input = "hello\n";
  req.timeout = 10s;
  auto ok = cohort::ipc::run_child(req);
  CHECK(ok.clean());
  CHECK(ok.output == "got hello\n");
  CHECK(ok.stderr_tail == "oops");
  CHECK(ok.describe(req.timeout).empty());

  req.args = {"-c", "exec sleep 30"};
  req.timeout = 100ms;
  auto start = std::chrono::steady_clock::now();
  auto hung = cohort::ipc::run_child(req);
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  CHECK(hung.timed_out);
  CHECK_FALSE(hung.clean());
  CHECK(hung.describe(req.timeout) ==
        "did not finish in 100 ms; it was killed");

  req.timeout = 30s;
  req.cancelled = [] { return true; };
  auto stopped = cohort::ipc::run_child(req);
  CHECK(stopped.cancelled);
  CHECK_FALSE(stopped.timed_out);
  CHECK(stopped.describe(req.timeout) == "was stopped");
  req.cancelled = nullptr;

  req.args = {"-c", "kill -SEGV $$"};
  req.timeout = 10s;
  auto crashed = cohort::ipc::run_child(req);
  CHECK(crashed.describe(req.timeout) == "crashed (SIGSEGV)");

  req.args = {"-c", "exit 7"};
  CHECK(cohort::ipc::run_child(req).describe(req.timeout) ==
        "exited with status 7");

  req.program = "/nonexistent/cohort-helper";
  auto missing = cohort::ipc::run_child(req);
  CHECK_FALSE(missing.clean());
  CHECK_THAT(missing.describe(req.timeout),
             Catch::StartsWith("could not be started: "));
}

TEST_CASE("a GPU counts as missing only where the scan could see it",
          "[devices][rescan]") {
  auto mig = have(1, 0, "MIG-x");
  mig.visible = "MIG-x";
  std::vector<known_gpu> known{have(0, 0, "GPU-a"), mig, have(2, 1, "", "")};
  // The backend did not list its GPUs (no driver, a failed call): nothing
  // is missing, whatever the scan lacks.
  auto blind = devices::gpu::plan_rescan(known, {}, 1, {}, {});
  CHECK(blind.vanished.empty());
  CHECK(blind.missed == std::vector<uint32_t>{0, 0, 0});
  // It listed the GPUs, not the MIG instances (no health library).
  auto no_mig = devices::gpu::plan_rescan(known, {}, 1, {"NVIDIA"}, {});
  CHECK(no_mig.vanished == std::vector<size_t>{0});
  CHECK(no_mig.missed == std::vector<uint32_t>{1, 0, 0});
  // Everything listed: the instance goes too; the GPU with neither UUID
  // nor bus id is never looked for, so never removed.
  auto all = devices::gpu::plan_rescan(known, {}, 1, {"NVIDIA"}, {"NVIDIA"});
  CHECK(all.vanished == std::vector<size_t>{0, 1});
  CHECK(all.missed[2] == 0);
}
