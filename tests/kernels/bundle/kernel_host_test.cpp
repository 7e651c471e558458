// Kernel hosts (kernels/bundle/kernel_host.hpp): a bundle's CPU kernel that
// crashes, aborts, exits, overflows its stack, spins or allocates without
// end ends its own call with a kernel_failure naming what happened; the
// next call gets a new host; a node keeps serving. IN_PROCESS runs the code
// in the caller's process.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "actors/runtime.hpp"
#include "kernels/bundle/kernel_host.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/registry.hpp"
#include "tests/kernels/bundle/bundle_fixture.hpp"

using namespace cohort;
using namespace cohort::kernels;
using namespace cohort::kernels::bundle;
using cohort::test::temp_dir;

namespace {

// One kernel of the hostile shared object: f64 x in, f64 x out.
std::string hostile_kernel(const std::string& name, const std::string& symbol) {
  return "kernel { name: \"" + name +
         "\" input { name: \"x\" dtype: \"f64\" } output { dtype: \"f64\" } "
         "output_size: \"x\" cpu_blob: \"cpu/libacme.so\" cpu_symbol: \"" +
         symbol + "\" }\n";
}

// A signed bundle `name` of the hostile kernels as PREFIX.ok, .null,
// .abort, .exit, .stack, .spin, .hog.
std::string hostile_bundle(const temp_dir& dir, const std::string& prefix,
                           const private_key& key) {
  std::string kernels;
  for (auto* k : {"ok", "null", "abort", "exit", "stack", "spin", "hog"})
    kernels += hostile_kernel(prefix + "." + k, std::string{"hostile_"} + k);
  auto b = dir.file(prefix);
  test::make_bundle(b, prefix, kernels, &key, COHORT_HOSTILE_KERNELS);
  return b;
}

private_key new_key() {
  auto k = private_key::generate();
  REQUIRE(k);
  return std::move(*k);
}

kernel_id id_of(const std::string& name) {
  auto id = parse_kernel(name);
  REQUIRE(id);
  return *id;
}

kernel_output call(const std::string& name, kernel_args a = {},
                   std::chrono::milliseconds limit = std::chrono::seconds{20}) {
  std::vector<double> x{1, 2, 3};
  std::vector<typed_view> in{{x.data(), x.size(), dtype::f64}};
  return run_cpu(id_of(name), a, typed_inputs{in}, limit);
}

// Kills (SIGKILL) the kernel hosts of bundle `name`: the children of this
// process holding its shared objects' memory files. Returns how many.
int kill_hosts_of(const std::string& name) {
  namespace fs = std::filesystem;
  auto label = "memfd:cohort-kernel-host:" + name + ":";
  int n = 0;
  std::error_code ec;
  for (auto& proc : fs::directory_iterator{"/proc", ec}) {
    auto pid = std::atoi(proc.path().filename().c_str());
    if (pid <= 0)
      continue;
    std::ifstream stat{proc.path() / "stat"};
    std::string line;
    std::getline(stat, line);
    auto close = line.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream rest{line.substr(close + 2)};
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid != ::getpid())
      continue;
    for (auto& fd : fs::directory_iterator{proc.path() / "fd", ec})
      if (fs::read_symlink(fd.path(), ec).string().find(label) !=
          std::string::npos) {
        n += ::kill(pid, SIGKILL) == 0 ? 1 : 0;
        break;
      }
  }
  return n;
}

bool ok_answers(const std::string& prefix) {
  auto out = call(prefix + ".ok");
  return out.as<double>().size() == 3 && out.as<double>()[2] == 4.0;
}

} // namespace

TEST_CASE("a bundle kernel that crashes, aborts, exits or overflows its "
          "stack ends its own call, and the next call gets a new host",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  trust_store trust;
  trust.keys.push_back(key.public_key());
  auto b = hostile_bundle(dir, "kh1", key);
  test::loaded_of(test::load_here(b, trust, false));
  auto before = hosts_counted();
  CHECK(ok_answers("kh1"));
  // Each would have ended this process; here each ends its call.
  CHECK_THROWS_WITH(call("kh1.null"),
                    Catch::Contains("kh1.null: it crashed its kernel host "
                                    "process (SIGSEGV)"));
  CHECK(ok_answers("kh1"));
  CHECK_THROWS_WITH(call("kh1.abort"),
                    Catch::Contains("(SIGABRT)") &&
                        Catch::Contains("it wrote: hostile_abort: giving up"));
  CHECK_THROWS_WITH(call("kh1.exit"),
                    Catch::Contains("kh1.exit: it ended its kernel host "
                                    "process (exit status 3)"));
  CHECK_THROWS_WITH(call("kh1.stack"),
                    Catch::Contains("kh1.stack: it crashed its kernel host "
                                    "process (SIGSEGV)"));
  CHECK(ok_answers("kh1"));
  auto after = hosts_counted();
  CHECK(after.crashed - before.crashed == 4);
  // The first host, and one new one after each of the four.
  CHECK(after.started - before.started == 5);
}

TEST_CASE("a bundle kernel that spins is killed at its time limit",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  trust_store trust;
  trust.keys.push_back(key.public_key());
  auto b = hostile_bundle(dir, "kh2", key);
  test::loaded_of(test::load_here(b, trust, false));
  auto before = hosts_counted();
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      call("kh2.spin", {}, std::chrono::milliseconds{300}),
      Catch::Contains("kh2.spin: ran past its 300 ms kernel timeout; its "
                      "kernel host process was killed"));
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= std::chrono::milliseconds{300});
  CHECK(took < std::chrono::seconds{10});
  CHECK(hosts_counted().timed_out - before.timed_out == 1);
  CHECK(ok_answers("kh2"));
}

TEST_CASE("a bundle kernel's allocations stop at its host's memory limit",
          "[kernels][bundle]") {
  if (!kernel_hosts::notes().empty()) {
    WARN("skipped: " << kernel_hosts::notes());
    return;
  }
  temp_dir dir;
  auto key = new_key();
  trust_store trust;
  trust.keys.push_back(key.public_key());
  auto b = hostile_bundle(dir, "kh3", key);
  auto iso = devices::gpu::bundle_isolation();
  iso.plugins.clear();
  iso.host_memory_limit = uint64_t{512} << 20;
  test::loaded_of(load_bundle(b, trust, iso));
  // Asked for 10 GiB, it gets less than 512 MiB and says so. What it took
  // goes with its host: the next call gets a new one.
  CHECK(ok_answers("kh3"));
  kernel_args a;
  a.m = 10240;
  auto before = hosts_counted();
  CHECK_THROWS_WITH(call("kh3.hog", a),
                    Catch::Contains("kh3.hog: malloc refused after"));
  CHECK(ok_answers("kh3"));
  CHECK(hosts_counted().started == before.started + 1);
  CHECK(hosts_counted().crashed == before.crashed);
  // Within the limit it gets what it asked for.
  a.m = 128;
  CHECK(call("kh3.hog", a).as<double>().size() == 3);
}

TEST_CASE("calls run in as many hosts as run at once, and a host killed "
          "while idle is replaced before the next call",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  trust_store trust;
  trust.keys.push_back(key.public_key());
  auto b = hostile_bundle(dir, "kh4", key);
  test::loaded_of(test::load_here(b, trust, false));
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i)
        good += ok_answers("kh4") ? 1 : 0;
    });
  for (auto& t : threads)
    t.join();
  CHECK(good == 100);
  // Every host of this process that is idle now is killed from outside:
  // the next call is sent to a new one, and runs once.
  auto before = hosts_counted();
  auto killed = kill_hosts_of("kh4");
  CHECK(killed >= 1);
  std::this_thread::sleep_for(std::chrono::milliseconds{100});
  CHECK(ok_answers("kh4"));
  CHECK(hosts_counted().crashed == before.crashed);
  CHECK(hosts_counted().started > before.started);
}

TEST_CASE("IN_PROCESS runs a trusted bundle's CPU code in the calling "
          "process, without hosts",
          "[kernels][bundle]") {
  temp_dir dir;
  auto key = new_key();
  trust_store trust;
  trust.keys.push_back(key.public_key());
  auto b = dir.file("kh5");
  test::make_bundle(b, "kh5", test::acme_kernels_text("kh5"), &key);
  auto iso = devices::gpu::bundle_isolation();
  iso.plugins.clear();
  iso.cpu_in_process = true;
  test::loaded_of(load_bundle(b, trust, iso));
  auto before = hosts_counted();
  std::vector<double> x{1, 2}, y{10, 20};
  std::vector<typed_view> in{{x.data(), 2, dtype::f64},
                             {y.data(), 2, dtype::f64}};
  kernel_args a;
  a.alpha = 3;
  auto out = run_cpu(id_of("kh5.scale_add"), a, typed_inputs{in},
                     std::chrono::milliseconds{100});
  CHECK(out.as<double>()[1] == 26);
  CHECK(hosts_counted().started == before.started);
  // Its own error still ends the call with its message.
  std::vector<int32_t> vals{4, -2};
  std::vector<typed_view> neg{{vals.data(), 2, dtype::i32}};
  CHECK_THROWS_WITH(run_cpu(id_of("kh5.checked_sum"), {}, typed_inputs{neg}),
                    Catch::Contains("value -2 at 1 is negative"));
}

TEST_CASE("a node whose bundle kernels crash and spin keeps serving: each "
          "item ends once with kernel_error, audited, and counted",
          "[kernels][bundle][actors]") {
  test::actor_fixture f;
  auto key = new_key();
  auto b = hostile_bundle(f.dir, "kh6", key);
  auto cfg = test::make_config(f.dir, 2, {});
  auto* kb = cfg.mutable_kernel_bundles();
  kb->add_trusted_key(test::write_public_key(f.dir, key));
  kb->add_load(b);
  auto* kt = cfg.mutable_supervision()->add_kernel_timeout();
  kt->set_kernel("kh6.spin");
  kt->set_timeout_ms(400);
  // A built-in kernel's timeout beside a bundle's: each resolves.
  kt = cfg.mutable_supervision()->add_kernel_timeout();
  kt->set_kernel("axpy");
  kt->set_timeout_ms(9000);
  auto rt = actors::runtime::start(f.sys, cfg);
  REQUIRE(rt);
  auto item = [](uint64_t id, const std::string& kernel) {
    work_item w;
    w.id = id;
    w.tenant = "t";
    w.kernel = id_of(kernel);
    w.inputs.push_back(host_buffer{std::vector<double>{1, 2, 3}});
    return w;
  };
  std::vector<actors::work_future> futures;
  uint64_t id = 1;
  for (auto* k : {"kh6.null", "kh6.spin", "kh6.abort", "kh6.ok", "kh6.spin",
                  "kh6.exit", "kh6.ok"})
    futures.push_back((*rt)->submit(item(id++, k)));
  std::vector<std::string> ends;
  for (auto& fut : futures) {
    auto r = fut.get();
    ends.push_back(r ? "ok" : describe(r.error()));
  }
  REQUIRE(ends.size() == 7);
  CHECK_THAT(ends[0], Catch::Contains("kernel_error") &&
                          Catch::Contains("kh6.null: it crashed its kernel "
                                          "host process (SIGSEGV)"));
  CHECK_THAT(ends[1], Catch::Contains("kernel_error") &&
                          Catch::Contains("ran past its 400 ms kernel "
                                          "timeout"));
  CHECK_THAT(ends[2], Catch::Contains("(SIGABRT)"));
  CHECK(ends[3] == "ok");
  CHECK_THAT(ends[4], Catch::Contains("ran past its 400 ms"));
  CHECK_THAT(ends[5], Catch::Contains("exit status 3"));
  CHECK(ends[6] == "ok");
  // The node still serves and counts what happened.
  auto more = (*rt)->run(item(100, "kh6.ok"));
  REQUIRE(more);
  CHECK(more->output.as<double>()[0] == 2.0);
  auto counts = (*rt)->kernel_bundles();
  CHECK(counts.host_crashes >= 3);
  CHECK(counts.host_timeouts >= 2);
  (*rt)->stop();
  // Every item's end is in the audit log once, a failure with its error.
  std::map<uint64_t, int> ends_of;
  size_t faults = 0;
  for (auto& rec : test::read_audit(cfg.audit_path())) {
    if (rec.kind() != pb::COMPLETED && rec.kind() != pb::FAILED)
      continue;
    ++ends_of[rec.work_id()];
    if (rec.kind() == pb::FAILED &&
        rec.detail().find("kernel host process") != std::string::npos)
      ++faults;
  }
  CHECK(ends_of.size() == 8);
  for (auto& [w, n] : ends_of) {
    INFO("item " << w);
    CHECK(n == 1);
  }
  CHECK(faults == 5);
}
