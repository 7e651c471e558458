// Device rescan at run time (actors/device_rescan.hpp, docs/gpu.md): the
// rescanner's decisions against scripted scans, and a node (`cohort serve`
// on the fake GPU plugin) whose GPUs leave, move, come back and appear.
#include <csignal>
#include <fstream>
#include <iterator>
#include <thread>

#include <catch2/catch.hpp>

#include "actors/device_rescan.hpp"
#include "messages/errc.hpp"
#include "tests/runtime_fixture.hpp"
#include "tests/temp_dir.hpp"
#include "tests/tools/cli_fixture.hpp"

using namespace cohort;
using namespace std::chrono_literals;
using actors::device_rescanner;
using actors::rescan_gpu;
using devices::gpu::gpu_scan;
using devices::gpu::scanned_gpu;

namespace {

device_info fleet_gpu(const std::string& name, const std::string& uuid) {
  device_info d;
  d.name = name;
  d.kind = device_kind::cuda_gpu;
  d.model = "Fake GPU";
  d.uuid = uuid;
  return d;
}

scanned_gpu scan_of(int ordinal, const std::string& uuid) {
  return {"CUDA", ordinal, "",
          fleet_gpu("cuda" + std::to_string(ordinal), uuid)};
}

rescan_gpu ours(size_t index, int ordinal, const std::string& uuid,
                bool hosted = true) {
  rescan_gpu g;
  g.index = index;
  g.vendor = "CUDA";
  g.ordinal = ordinal;
  g.info = fleet_gpu("cuda" + std::to_string(ordinal), uuid);
  g.hosted = hosted;
  return g;
}

// What the rescanner did, and the scans it is given in turn.
struct scripted {
  std::vector<std::string> calls;
  std::vector<std::string> audits;
  std::vector<caf::expected<gpu_scan>> scans;
  size_t next = 0;

  actors::rescan_actions actions() {
    actors::rescan_actions act;
    act.remove = [this](size_t i, const std::string&) {
      calls.push_back("remove " + std::to_string(i));
    };
    act.move = [this](size_t i, int ordinal, const std::string&) {
      calls.push_back("move " + std::to_string(i) + " to " +
                      std::to_string(ordinal));
    };
    act.restore = [this](size_t i) {
      calls.push_back("restore " + std::to_string(i));
    };
    act.audit = [this](const std::string& device, const std::string& what) {
      audits.push_back(device + ": " + what);
    };
    act.scan = [this](std::chrono::milliseconds,
                      const std::function<bool()>&) -> caf::expected<gpu_scan> {
      REQUIRE(next < scans.size());
      return scans[next++];
    };
    return act;
  }
};

// A scan that listed CUDA's GPUs and MIG instances.
gpu_scan scan_of(std::vector<scanned_gpu> gpus) {
  gpu_scan s;
  s.gpus = std::move(gpus);
  s.listed = s.mig_listed = {"CUDA"};
  return s;
}

} // namespace

TEST_CASE("a GPU missing from enough rescans is removed, and comes back in "
          "a new host process when found again",
          "[actors][rescan]") {
  scripted s;
  s.scans = {scan_of({scan_of(0, "GPU-b")}), scan_of({scan_of(0, "GPU-b")}),
             scan_of({scan_of(0, "GPU-b")}),
             scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-b")})};
  actors::rescan_settings cfg;
  cfg.missing_scans = 2;
  device_rescanner r{
      {ours(2, 0, "GPU-a"), ours(3, 1, "GPU-b")}, cfg, s.actions()};
  // First miss: counted, not removed. GPU-b moved to ordinal 0: its next
  // host process opens it there.
  auto first = r.rescan();
  REQUIRE(first);
  CHECK(first->scan == 1);
  CHECK(first->removed.empty());
  REQUIRE(first->missing.size() == 1);
  CHECK_THAT(first->missing[0],
             Catch::StartsWith("cuda0: missing from 1 of 2"));
  REQUIRE(first->moved.size() == 1);
  CHECK_THAT(first->moved[0],
             Catch::StartsWith("cuda1: now at CUDA ordinal 0"));
  CHECK(s.calls == std::vector<std::string>{"move 3 to 0"});
  // Second miss: removed, once.
  auto second = r.rescan();
  REQUIRE(second);
  REQUIRE(second->removed.size() == 1);
  CHECK_THAT(second->removed[0], Catch::StartsWith("cuda0: missing from 2"));
  CHECK(s.calls.back() == "remove 2");
  CHECK(r.removed().count("cuda0") == 1);
  auto third = r.rescan();
  REQUIRE(third);
  CHECK(third->removed.empty());
  CHECK(third->missing.empty());
  CHECK(std::count(s.calls.begin(), s.calls.end(), "remove 2") == 1);
  // Back at ordinal 0 (GPU-b at 1 again): moved, then restarted.
  auto back = r.rescan();
  REQUIRE(back);
  REQUIRE(back->returned.size() == 1);
  CHECK_THAT(back->returned[0],
             Catch::Contains("cuda0: found again at CUDA ordinal 0"));
  CHECK(r.removed().empty());
  CHECK(s.calls == std::vector<std::string>{"move 3 to 0", "remove 2",
                                            "move 2 to 0", "restore 2",
                                            "move 3 to 1"});
  auto n = r.counts();
  CHECK(n.scans == 4);
  CHECK(n.failed == 0);
  CHECK(n.removed == 1);
  CHECK(n.returned == 1);
}

TEST_CASE("a GPU in the node's process is removed but not brought back",
          "[actors][rescan]") {
  scripted s;
  s.scans = {scan_of({}), scan_of({scan_of(3, "GPU-a")}),
             scan_of({scan_of(3, "GPU-a")})};
  actors::rescan_settings cfg;
  cfg.missing_scans = 1;
  device_rescanner r{{ours(0, 0, "GPU-a", false)}, cfg, s.actions()};
  REQUIRE(r.rescan());
  CHECK(s.calls == std::vector<std::string>{"remove 0"});
  // Found again, at another ordinal: its process's runtime cannot open it.
  auto again = r.rescan();
  REQUIRE(again);
  REQUIRE(again->returned.size() == 1);
  CHECK_THAT(again->returned[0], Catch::Contains("restart the node"));
  CHECK(again->moved.empty());
  CHECK(s.calls == std::vector<std::string>{"remove 0"});
  CHECK(r.removed().count("cuda0") == 1);
  REQUIRE(r.rescan());
  // Audited once, not once per scan.
  CHECK(std::count_if(s.audits.begin(), s.audits.end(), [](auto& a) {
          return a.find("restart the node") != std::string::npos;
        }) == 1);
}

TEST_CASE("a GPU that appears is reported once per appearance; a failed "
          "scan changes nothing",
          "[actors][rescan]") {
  scripted s;
  s.scans = {scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-new")}),
             scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-new")}),
             caf::expected<gpu_scan>{make_error(errc::io_error, "it crashed")},
             scan_of({scan_of(0, "GPU-a")}),
             scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-new")})};
  actors::rescan_settings cfg;
  cfg.missing_scans = 1;
  device_rescanner r{{ours(0, 0, "GPU-a")}, cfg, s.actions()};
  auto first = r.rescan();
  REQUIRE(first);
  REQUIRE(first->found.size() == 1);
  CHECK_THAT(first->found[0],
             Catch::Contains("GPU-new") && Catch::Contains("CUDA ordinal 1"));
  CHECK(r.counts().found == 1);
  REQUIRE(r.rescan());
  CHECK(r.counts().found == 1);
  // A failed scan: an error, audited and counted; nothing is removed.
  auto failed = r.rescan();
  REQUIRE_FALSE(failed);
  CHECK(code_of(failed.error()) == errc::io_error);
  CHECK(r.counts().failed == 1);
  CHECK(s.calls.empty());
  CHECK_THAT(s.audits.back(), Catch::Contains("rescan failed"));
  // It leaves and comes back: counted again.
  REQUIRE(r.rescan());
  REQUIRE(r.rescan());
  CHECK(r.counts().found == 2);
  CHECK(r.counts().scans == 5);
  CHECK(s.calls.empty());
}

TEST_CASE("a GPU that appears is added when it can be; from then on it is "
          "the fleet's: moved and removed like the others",
          "[actors][rescan]") {
  scripted s;
  s.scans = {scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-new")}),
             scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-new")}),
             scan_of({scan_of(0, "GPU-a"), scan_of(1, "GPU-new")}),
             scan_of({scan_of(0, "GPU-new"), scan_of(1, "GPU-a")}),
             scan_of({scan_of(1, "GPU-a")})};
  actors::rescan_settings cfg;
  cfg.missing_scans = 1;
  auto act = s.actions();
  // The first try is refused (as a node that cannot host it would); the
  // second adds it as device 1, "cuda7".
  size_t tries = 0;
  act.add = [&](const scanned_gpu& g) -> caf::expected<rescan_gpu> {
    s.calls.push_back("add " + g.info.uuid);
    if (++tries == 1)
      return make_error(errc::invalid_transition, "the fleet is full");
    auto out = ours(1, g.ordinal, g.info.uuid);
    out.info.name = "cuda7";
    return out;
  };
  device_rescanner r{{ours(0, 0, "GPU-a")}, cfg, std::move(act)};
  auto refused = r.rescan();
  REQUIRE(refused);
  CHECK(refused->added.empty());
  REQUIRE(refused->found.size() == 1);
  CHECK_THAT(refused->found[0], Catch::Contains("GPU-new") &&
                                    Catch::Contains("not added") &&
                                    Catch::Contains("the fleet is full"));
  CHECK(r.counts().found == 1);
  CHECK(r.counts().added == 0);
  // Tried again by the next scan: added, and counted as found once.
  auto added = r.rescan();
  REQUIRE(added);
  REQUIRE(added->added.size() == 1);
  CHECK_THAT(added->added[0], Catch::StartsWith("cuda7: ") &&
                                  Catch::Contains("added to the fleet as "
                                                  "device 1"));
  CHECK(added->found.empty());
  CHECK(r.counts().found == 1);
  CHECK(r.counts().added == 1);
  CHECK_THAT(s.audits.back(), Catch::StartsWith("cuda7: rescan: found"));
  // Known now: not added again.
  auto same = r.rescan();
  REQUIRE(same);
  CHECK(same->added.empty());
  CHECK(same->found.empty());
  CHECK(s.calls == std::vector<std::string>{"add GPU-new", "add GPU-new"});
  // The two swap ordinals: both move, the added one by its index.
  auto swapped = r.rescan();
  REQUIRE(swapped);
  CHECK(swapped->moved.size() == 2);
  CHECK(std::count(s.calls.begin(), s.calls.end(), "move 1 to 0") == 1);
  CHECK(std::count(s.calls.begin(), s.calls.end(), "move 0 to 1") == 1);
  // It leaves: removed like any GPU of the fleet.
  auto gone = r.rescan();
  REQUIRE(gone);
  REQUIRE(gone->removed.size() == 1);
  CHECK_THAT(gone->removed[0], Catch::StartsWith("cuda7: "));
  CHECK(s.calls.back() == "remove 1");
  CHECK(r.removed().contains("cuda7"));
}

TEST_CASE("a GPU found on the bus of one the fleet runs is never added",
          "[actors][rescan]") {
  // The fleet's GPU, and the same card seen another way: without its UUID
  // (a side that could not read it), or as the runtime's view of a GPU
  // whose MIG instances the fleet runs.
  auto known = ours(0, 0, "GPU-a");
  known.info.pci_bus_id = "0000:3b:00.0";
  auto same = scan_of(1, "GPU-other-view");
  same.info.pci_bus_id = "00000000:3B:00.0";
  auto elsewhere = scan_of(2, "GPU-b");
  elsewhere.info.pci_bus_id = "0000:5e:00.0";
  auto mine = scan_of(0, "GPU-a");
  mine.info.pci_bus_id = "0000:3b:00.0";
  scripted s;
  s.scans = {scan_of({mine, same, elsewhere})};
  auto act = s.actions();
  act.add = [&](const scanned_gpu& g) -> caf::expected<rescan_gpu> {
    s.calls.push_back("add " + g.info.uuid);
    auto out = ours(1, g.ordinal, g.info.uuid);
    out.info.name = "cuda1";
    return out;
  };
  device_rescanner r{{known}, {}, std::move(act)};
  auto rep = r.rescan();
  REQUIRE(rep);
  CHECK(s.calls == std::vector<std::string>{"add GPU-b"});
  REQUIRE(rep->added.size() == 1);
  REQUIRE(rep->found.size() == 1);
  CHECK_THAT(rep->found[0],
             Catch::Contains("GPU-other-view") &&
                 Catch::Contains("not added") &&
                 Catch::Contains("on bus 0000:3b:00.0, as cuda0 is"));
}

TEST_CASE("a MIG instance that appears beside the instances of its card is "
          "added; the card's whole-GPU view is not",
          "[actors][rescan]") {
  auto instance = [](int index, const std::string& uuid) {
    scanned_gpu g = scan_of(0, uuid);
    g.visible = uuid;
    g.info.name = "mig0." + std::to_string(index);
    g.info.pci_bus_id = "0000:3b:00.0";
    return g;
  };
  auto first = instance(0, "MIG-a");
  rescan_gpu known;
  known.index = 0;
  known.vendor = "CUDA";
  known.visible = "MIG-a";
  known.info = first.info;
  known.hosted = true;
  auto whole = scan_of(0, "GPU-card");
  whole.info.pci_bus_id = "0000:3b:00.0";
  scripted s;
  s.scans = {scan_of({first, instance(1, "MIG-b"), whole})};
  auto act = s.actions();
  act.add = [&](const scanned_gpu& g) -> caf::expected<rescan_gpu> {
    s.calls.push_back("add " + g.info.uuid);
    rescan_gpu out;
    out.index = 1;
    out.vendor = g.vendor;
    out.visible = g.visible;
    out.info = g.info;
    out.hosted = true;
    return out;
  };
  device_rescanner r{{known}, {}, std::move(act)};
  auto rep = r.rescan();
  REQUIRE(rep);
  CHECK(s.calls == std::vector<std::string>{"add MIG-b"});
  REQUIRE(rep->added.size() == 1);
  CHECK_THAT(rep->added[0], Catch::StartsWith("mig0.1: "));
  REQUIRE(rep->found.size() == 1);
  CHECK_THAT(rep->found[0],
             Catch::Contains("GPU-card") && Catch::Contains("as mig0.0 is"));
}

TEST_CASE("rescans run one at a time and stop with the node",
          "[actors][rescan]") {
  std::atomic<int> scans{0};
  std::atomic<bool> in_scan{false};
  actors::rescan_actions act;
  act.remove = [](size_t, const std::string&) {};
  act.move = [](size_t, int, const std::string&) {};
  act.restore = [](size_t) {};
  act.audit = [](const std::string&, const std::string&) {};
  // Each scan hangs until it is cancelled.
  act.scan = [&](std::chrono::milliseconds,
                 const std::function<bool()>& stop) -> caf::expected<gpu_scan> {
    ++scans;
    in_scan = true;
    while (!stop())
      std::this_thread::sleep_for(1ms);
    return make_error(errc::shutting_down, "stopped");
  };
  actors::rescan_settings cfg;
  cfg.interval = 100ms;
  device_rescanner r{{}, cfg, std::move(act)};
  r.start();
  for (int i = 0; i < 2000 && !in_scan; ++i)
    std::this_thread::sleep_for(5ms);
  REQUIRE(in_scan);
  // Another scan is refused at once while one runs.
  auto busy = r.rescan();
  REQUIRE_FALSE(busy);
  CHECK(code_of(busy.error()) == errc::invalid_transition);
  // Stopping ends the hanging scan and the thread.
  auto start = std::chrono::steady_clock::now();
  r.stop();
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(scans == 1);
}

namespace {

using test::slurp;

using test::has;

// `cohort serve` on the fake GPU plugin, whose GPUs are the bus lines of
// the file `present` ("98" is FAKE-98 at 0000:98:00.0), rescanning only
// when asked; stopped (SIGTERM) at the end.
struct fake_gpu_node {
  test::temp_dir& dir;
  std::string present;
  std::string tok;
  std::string out;
  int pid = 0;
  std::string admin;

  fake_gpu_node(test::temp_dir& d, const std::string& gpus,
                const std::string& devices_extra)
      : dir(d), present(d.file("present")) {
    std::ofstream{present} << gpus;
    tok = test::write(dir, "token", "rescan-admin-token-0123456789\n");
    auto cfg = test::write(
        dir, "node.textproto",
        "devices { cpu_workers: 1 gpu_streams: 2 " + devices_extra +
            " host_binary: \"" + COHORT_BINARY +
            "\" rescan_interval_ms: 0 rescan_missing_scans: 1 }\n"
            "tenant { tenant: \"t\" kernels: \"*\" devices: \"*\" }\n");
    out = dir.file("serve.out");
    auto env = std::string{"COHORT_PLUGIN_PATH="} + COHORT_FAKE_PLUGIN_DIR +
               " COHORT_FAKE_GPU_PRESENT=" + present + " ";
    auto cmd = env + COHORT_BINARY + " serve --listen 127.0.0.1:0 --config " +
               cfg + " --token-file " + tok + " --audit " +
               dir.file("audit.log") + " > " + out + " 2>&1 & echo $!";
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    REQUIRE(std::fscanf(p, "%d", &pid) == 1);
    ::pclose(p);
    int port = 0;
    for (int i = 0; i < 1500 && port == 0; ++i) {
      auto text = slurp(out);
      auto at = text.find("http://127.0.0.1:");
      if (at != std::string::npos)
        port = std::atoi(text.c_str() + at + 17);
      else
        std::this_thread::sleep_for(20ms);
    }
    INFO(slurp(out));
    REQUIRE(port > 0);
    admin = "admin --url http://127.0.0.1:" + std::to_string(port) +
            " --token-file " + tok + " ";
  }

  ~fake_gpu_node() {
    if (pid > 0)
      ::kill(pid, SIGTERM);
  }

  void set_present(const std::string& gpus) {
    std::ofstream{present, std::ios::trunc} << gpus;
  }

  // Device `name`'s entry in `cohort admin devices`.
  std::string device(const std::string& name) {
    auto list = test::cohort_cli(admin + "devices").output;
    auto at = list.find("\"name\": \"" + name + "\"");
    if (at == std::string::npos)
      return std::string{"(missing)"};
    auto end = list.find("\"index\"", at);
    return list.substr(at, end == std::string::npos ? end : end - at);
  }

  bool wait_for(const std::string& name, const std::string& what) {
    for (int i = 0; i < 1500; ++i) {
      if (has(device(name), what))
        return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Stops the node and returns its audit log's device events, one per
  // line as "device: detail".
  std::string stop() {
    REQUIRE(::kill(pid, SIGTERM) == 0);
    std::string text;
    for (int i = 0; i < 1500 && !has(text, "cohort serve: stopped"); ++i) {
      std::this_thread::sleep_for(20ms);
      text = slurp(out);
    }
    pid = 0;
    INFO(text);
    CHECK(has(text, "cohort serve: stopped"));
    std::string events;
    for (auto& rec : test::read_audit(dir.file("audit.log")))
      if (rec.kind() == pb::DEVICE_EVENT)
        events += rec.device() + ": " + rec.detail() + "\n";
    return events;
  }
};

} // namespace

TEST_CASE("a node removes a GPU that left the machine and brings it back "
          "when it returns",
          "[actors][rescan][host][gpu]") {
  test::temp_dir dir;
  fake_gpu_node node{dir, "98\n99\n", "gpu_host_processes: true"};
  auto& admin = node.admin;
  auto device = [&](const std::string& name) { return node.device(name); };
  auto wait_for = [&](const std::string& name, const std::string& what) {
    return node.wait_for(name, what);
  };
  CHECK(wait_for("cuda0", "\"status\": \"available\""));
  CHECK(wait_for("cuda1", "\"status\": \"available\""));

  // 98 leaves, 9a comes: cuda0 is removed, cuda1 (99) is now ordinal 0,
  // and the new GPU joins the fleet as cuda2 (the name it was listed
  // under, cuda1, is taken), device 3 after cpu0, cuda0 and cuda1.
  node.set_present("99\n9a\n");
  auto gone = test::cohort_cli(admin + "rescan");
  INFO(gone.output);
  CHECK(gone.status == 0);
  CHECK(has(gone.output,
            "cuda0: missing from 1 scan(s) in a row (CUDA/FAKE-98)"));
  CHECK(has(gone.output, "cuda1: now at CUDA ordinal 0 (was CUDA ordinal 1)"));
  CHECK(has(gone.output, "cuda2: Fake GPU (test plugin) (CUDA ordinal 1, "
                         "bus 0000:9a:00.0, FAKE-9a): added to the fleet as "
                         "device 3"));
  CHECK(wait_for("cuda0", "\"removed\": true"));
  // Its host process opened FAKE-9a at ordinal 1 and it takes work.
  CHECK(wait_for("cuda2", "\"status\": \"available\""));
  CHECK(has(device("cuda2"), "\"location\": \"host process\""));
  CHECK(has(device("cuda0"), "\"status\": \"offline\""));
  CHECK(has(device("cuda1"), "\"status\": \"available\""));
  // An operator cannot bring it online; a rescan that finds it can.
  auto online = test::cohort_cli(admin + "online cuda0");
  CHECK(online.status == 1);
  CHECK(has(online.output, "was removed from the machine"));

  // Back, with the new one between: cuda0 starts in a new host process at
  // ordinal 0 (the host checks it finds FAKE-98 there).
  node.set_present("98\n99\n9a\n");
  auto back = test::cohort_cli(admin + "rescan");
  INFO(back.output);
  CHECK(back.status == 0);
  CHECK(has(back.output, "cuda0: found again at CUDA ordinal 0: started in a "
                         "new host process"));
  CHECK(has(back.output, "cuda1: now at CUDA ordinal 1 (was CUDA ordinal 0)"));
  CHECK(has(back.output, "cuda2: now at CUDA ordinal 2 (was CUDA ordinal 1)"));
  CHECK(wait_for("cuda0", "\"status\": \"available\""));
  CHECK(has(device("cuda0"), "\"removed\": false"));

  auto metrics = test::cohort_cli(admin + "metrics").output;
  CHECK(has(metrics, "cohort_device_rescans_total{result=\"ok\"} 2"));
  CHECK(has(metrics, "cohort_devices_removed_total 1"));
  CHECK(has(metrics, "cohort_devices_returned_total 1"));
  CHECK(has(metrics, "cohort_devices_found_total 1"));
  CHECK(has(metrics, "cohort_devices_added_total 1"));

  auto devices_events = node.stop();
  INFO(devices_events);
  CHECK(has(devices_events, "cuda0: rescan: removed from the machine"));
  CHECK(has(devices_events, "cuda0: supervisor: available -> offline"));
  CHECK(has(devices_events, "cuda2: rescan: found Fake GPU (test plugin) (CUDA "
                            "ordinal 1, bus 0000:9a:00.0, FAKE-9a): added to "
                            "the fleet as device 3"));
  CHECK(has(devices_events, "cuda2: balancer: joined the fleet as device 3"));
  CHECK(has(devices_events, "cuda0: rescan: found again at CUDA ordinal 0"));
}

TEST_CASE("a GPU that appears joins a node that started with none",
          "[actors][rescan][host][gpu]") {
  test::temp_dir dir;
  // No GPU on the machine at start: the node runs its CPU worker only (its
  // actor system loads CAF's middleman for host processes as a node with
  // a GPU driver does).
  fake_gpu_node node{dir, "", "gpu_host_processes: true"};
  CHECK(has(node.device("cpu0"), "\"status\": \"available\""));
  CHECK(node.device("cuda0") == "(missing)");
  node.set_present("98\n");
  auto r = test::cohort_cli(node.admin + "rescan");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(has(r.output, "cuda0: Fake GPU (test plugin) (CUDA ordinal 0, bus "
                      "0000:98:00.0, FAKE-98): added to the fleet as device "
                      "1, started in a device host process of its own"));
  // Its host process opened FAKE-98; tenant t's grant ("*") covers it.
  CHECK(node.wait_for("cuda0", "\"status\": \"available\""));
  CHECK(has(node.device("cuda0"), "\"location\": \"host process\""));
  auto tenants = test::cohort_cli(node.admin + "tenants").output;
  CHECK(has(tenants, "\"device\": \"cuda0\""));
  // Found again by the next scan: known now, not added twice.
  auto again = test::cohort_cli(node.admin + "rescan");
  CHECK(again.status == 0);
  CHECK_FALSE(has(again.output, "added to the fleet"));
  auto metrics = test::cohort_cli(node.admin + "metrics").output;
  CHECK(has(metrics, "cohort_devices_added_total 1"));
  auto events = node.stop();
  INFO(events);
  CHECK(has(events, "cuda0: rescan: found Fake GPU (test plugin)"));
  CHECK(has(events, "cuda0: balancer: joined the fleet as device 1"));
}
