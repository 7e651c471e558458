// The GPU plugin loader (devices/gpu/plugin.hpp) with plugins built over the
// fake runtime: found, loaded and used; refused for the wrong ABI; a file
// that is no shared object; a folder without one; and `cohort devices`
// reporting each case.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "devices/gpu/discover.hpp"
#include "devices/gpu/plugin.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using namespace cohort::devices;

TEST_CASE("a GPU plugin is found, checked and makes its runtime",
          "[devices][gpu][plugin]") {
  auto p =
      gpu::load_plugin("CUDA", {"/nonexistent/cohort", COHORT_FAKE_PLUGIN_DIR});
  INFO(p.note);
  REQUIRE(p.entry != nullptr);
  CHECK(p.note.empty());
  CHECK(p.file == "libcohort-cuda.so");
  CHECK(p.path == std::string{COHORT_FAKE_PLUGIN_DIR} + "/libcohort-cuda.so");
  CHECK(std::string{p.entry->vendor} == "CUDA");
  auto rt = p.entry->make_runtime();
  REQUIRE(rt);
  int n = 0;
  REQUIRE_FALSE(rt->device_count(n).failed());
  CHECK(n == 2);
  gpu::properties props;
  REQUIRE_FALSE(rt->get_properties(1, props).failed());
  CHECK(props.name == "Fake GPU (test plugin)");
  CHECK(props.pci_bus_id == "0000:99:00.0");
  // The host logic of the core drives the plugin's runtime.
  auto dev = gpu::gpu_device::open(rt, 0, device_kind::cuda_gpu, "cuda0", {});
  REQUIRE(dev);
  CHECK((*dev)->info().name == "cuda0");
  CHECK_FALSE((*dev)->info().simulated);
}

TEST_CASE("GPU plugins that cannot be used are refused with the reason",
          "[devices][gpu][plugin]") {
  SECTION("no plugin in any folder") {
    auto p = gpu::load_plugin("HIP", {"/nonexistent/a", "/nonexistent/b"});
    CHECK(p.entry == nullptr);
    CHECK(p.path.empty());
    CHECK_THAT(p.note, Catch::Contains("libcohort-hip.so not found"));
    CHECK_THAT(p.note, Catch::Contains("/nonexistent/a, /nonexistent/b"));
    CHECK_THAT(p.note, Catch::Contains("COHORT_PLUGIN_PATH"));
  }
  SECTION("built for another ABI") {
    auto p = gpu::load_plugin("CUDA", {COHORT_BAD_PLUGIN_DIR});
    CHECK(p.entry == nullptr);
    CHECK_THAT(p.note, Catch::Contains("refused"));
    CHECK_THAT(p.note, Catch::Contains("plugin ABI 999"));
  }
  SECTION("a file that is no shared object") {
    test::temp_dir dir;
    std::ofstream{dir.file("libcohort-cuda.so")} << "not an ELF file\n";
    auto p = gpu::load_plugin("CUDA", {dir.path.string()});
    CHECK(p.entry == nullptr);
    CHECK_THAT(p.note, Catch::Contains("cannot load"));
    CHECK_THAT(p.note, Catch::Contains(dir.path.string()));
  }
  SECTION("a plugin of another vendor under this vendor's name") {
    // The fake plugin says CUDA; asked for as HIP it is refused.
    test::temp_dir dir;
    std::filesystem::copy_file(std::string{COHORT_FAKE_PLUGIN_DIR} +
                                   "/libcohort-cuda.so",
                               dir.file("libcohort-hip.so"));
    auto p = gpu::load_plugin("HIP", {dir.path.string()});
    CHECK(p.entry == nullptr);
    CHECK_THAT(p.note, Catch::Contains("a CUDA plugin, not HIP"));
  }
}

TEST_CASE("plugin folders: COHORT_PLUGIN_PATH first, then the install and "
          "build folders",
          "[devices][gpu][plugin]") {
  ::setenv("COHORT_PLUGIN_PATH", "/opt/a::/opt/b/", 1);
  auto dirs = gpu::plugin_dirs();
  ::unsetenv("COHORT_PLUGIN_PATH");
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == "/opt/a");
  CHECK(dirs[1] == "/opt/b");
  // This test program holds the core and lives in the build tree, so the
  // tree's devices/ folder (where the real plugins are built) is searched.
  bool build_tree = false;
  for (auto& d : dirs)
    build_tree = build_tree || d.find("/devices") == d.size() - 8;
  CHECK(build_tree);
}

TEST_CASE("cohort devices says which GPU plugins loaded and why one did not",
          "[tools][plugin]") {
  auto ok = test::run_command(std::string{"COHORT_PLUGIN_PATH="} +
                              COHORT_FAKE_PLUGIN_DIR + " " + COHORT_BINARY +
                              " devices");
  INFO(ok.output);
  CHECK(ok.status == 0);
  CHECK_THAT(ok.output,
             Catch::Contains(std::string{"CUDA plugin loaded from "} +
                             COHORT_FAKE_PLUGIN_DIR +
                             "/libcohort-cuda.so, 2 GPU(s)"));
  CHECK_THAT(ok.output, Catch::Contains("cuda1: Fake GPU (test plugin)"));
  CHECK_THAT(ok.output, Catch::Contains("HIP  plugin"));

  auto bad = test::run_command(std::string{"COHORT_PLUGIN_PATH="} +
                               COHORT_BAD_PLUGIN_DIR + " " + COHORT_BINARY +
                               " devices");
  INFO(bad.output);
  CHECK(bad.status == 0);
  CHECK_THAT(bad.output, Catch::Contains("CUDA plugin not loaded: "));
  CHECK_THAT(bad.output, Catch::Contains("refused: plugin ABI 999"));
}

TEST_CASE("cohort devices shows the links between GPUs that the health "
          "library reports",
          "[tools][plugin]") {
  auto devices = [](const std::string& link) {
    return test::run_command(
        (link.empty() ? "" : "COHORT_FAKE_GPU_LINK=" + link + " ") +
        "COHORT_PLUGIN_PATH=" + COHORT_FAKE_PLUGIN_DIR + " " + COHORT_BINARY +
        " devices");
  };
  auto nvlink = devices("nvlink");
  INFO(nvlink.output);
  CHECK(nvlink.status == 0);
  CHECK_THAT(nvlink.output, Catch::Contains("Links between GPUs") &&
                                Catch::Contains("cuda0 <-> cuda1: NVLink\n"));
  auto pcie = devices("pcie");
  INFO(pcie.output);
  CHECK_THAT(pcie.output, Catch::Contains("cuda0 <-> cuda1: PCIe P2P\n"));
  auto none = devices("");
  INFO(none.output);
  CHECK(none.status == 0);
  CHECK_THAT(none.output, !Catch::Contains("Links between GPUs"));
  // A simulated GPU may not take a real GPU's name.
  test::temp_dir dir;
  auto cfg = dir.file("c.textproto");
  std::ofstream{cfg} << "devices { cpu_workers: 0 sim_gpu { name: \"cuda1\" "
                        "memory_mib: 64 streams: 1 speed: 1 } }\n";
  auto clash = test::run_command(std::string{"COHORT_PLUGIN_PATH="} +
                                 COHORT_FAKE_PLUGIN_DIR + " " + COHORT_BINARY +
                                 " devices --config " + cfg);
  INFO(clash.output);
  CHECK(clash.status == 2);
  CHECK_THAT(clash.output,
             Catch::Contains("simulated GPU name 'cuda1' is used twice or "
                             "clashes with a CPU worker or a GPU"));
}

TEST_CASE("a program found on PATH still finds the plugin folders",
          "[tools][plugin]") {
  // argv[0] is then a bare name: the folders come from the program's file.
  std::string bin = COHORT_BINARY;
  auto dir = bin.substr(0, bin.rfind('/'));
  auto r = test::run_command("cd / && env -u COHORT_PLUGIN_PATH PATH=" + dir +
                             ":/usr/bin:/bin cohort devices");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, !Catch::Contains("searched: no folder"));
  // The build tree's devices/ folder: searched, or where a plugin loaded.
  auto build_root = dir.substr(0, dir.rfind('/'));
  CHECK_THAT(r.output, Catch::Contains(build_root + "/devices"));
}
