// Shared helpers for tests that start a runtime: a fresh actor system, a
// temporary audit log, and a client that submits many items and collects ends.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "kernels/random_data.hpp"
#include "messages/cohort.pb.h"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
#include "tests/temp_dir.hpp"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <unistd.h>

namespace cohort::test {

/// Whether `done()` holds within `limit`, asked every 10 ms (a bound on a
/// wait, not a timing goal).
template <class F>
bool eventually(F&& done,
                std::chrono::milliseconds limit = std::chrono::seconds{5}) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return done();
}

/// Polls `rt` every 2 ms until `pred` holds for its live items, at most
/// 10 s; returns the last items seen.
template <class Pred>
std::vector<item_view> wait_items(actors::runtime& rt, Pred pred) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  for (;;) {
    auto items = rt.items();
    REQUIRE(items);
    if (pred(*items) || std::chrono::steady_clock::now() >= until)
      return *items;
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
}

/// A runtime config: `cpu` CPU workers and the given simulated GPUs, tenant
/// "t" granted everything, the audit log in `dir`.
inline pb::RuntimeConfig
make_config(const temp_dir& dir, uint32_t cpu,
            std::vector<std::pair<std::string, double>> sims) {
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(cpu);
  // Placement tests are about these devices only, also on a GPU machine.
  cfg.mutable_devices()->set_gpus(false);
  for (auto& [name, speed] : sims) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name(name);
    g->set_memory_mib(1024);
    g->set_streams(2);
    g->set_speed(speed);
  }
  auto* t = cfg.add_tenant();
  t->set_tenant("t");
  t->add_kernels("*");
  t->add_devices("*");
  cfg.set_audit_path(dir.file("audit.log"));
  return cfg;
}

/// A gemv item of tenant `tenant` with id `id`.
inline work_item gemv_item(uint64_t id, std::string tenant = "t",
                           uint64_t m = 64, uint64_t n = 64) {
  work_item item;
  item.id = id;
  item.tenant = std::move(tenant);
  item.kernel = kernel_id::gemv;
  item.args.m = m;
  item.args.n = n;
  item.inputs.emplace_back(kernels::random_floats(id, m * n));
  item.inputs.emplace_back(kernels::random_floats(id + 1000000, n));
  return item;
}

/// `n` gemv items of tenant "t", ids from `first_id` on.
inline std::vector<work_item> gemv_items(size_t n, uint64_t first_id = 1) {
  std::vector<work_item> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(gemv_item(first_id + i));
  return out;
}

/// Polls the balancer until device `index` reports `want`, for up to
/// `limit`; returns the status last seen.
inline device_status
wait_status(actors::runtime& rt, size_t index, device_status want,
            std::chrono::milliseconds limit = std::chrono::seconds{5}) {
  auto until = std::chrono::steady_clock::now() + limit;
  device_status now = device_status::resetting;
  for (;;) {
    auto s = rt.placement_stats();
    REQUIRE(s);
    now = s->devices[index].status;
    if (now == want || std::chrono::steady_clock::now() >= until)
      return now;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
}

/// The runtime's audit log as bytes, flushed first (its details are
/// searchable text).
inline std::string audit_text(actors::runtime& rt) {
  REQUIRE(rt.flush_audit());
  std::ifstream in{rt.audit_path(), std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// What happened to each submitted id.
struct ends {
  std::map<uint64_t, int> count;
  std::map<uint64_t, work_result> results;
  std::map<uint64_t, caf::error> errors;
  bool timed_out = false;
};

/// Submits `items` at once and collects one end per item (and any extra ends
/// that arrive within `linger`). Between submission and collection, `during`
/// runs (e.g. to inject faults).
template <class F>
ends submit_all(
    caf::actor_system& sys, actors::runtime& rt, std::vector<work_item> items,
    F during,
    std::chrono::milliseconds linger = std::chrono::milliseconds(50)) {
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::client_sink>(self);
  auto n = items.size();
  for (auto& item : items)
    self->send(rt.entry(), submit_atom::value, std::move(item), sink);
  during();
  ends out;
  size_t received = 0;
  auto on_result = [&](result_atom, work_result& res) {
    ++out.count[res.id];
    out.results[res.id] = std::move(res);
    ++received;
  };
  auto on_error = [&](failed_atom, uint64_t id, caf::error& err) {
    ++out.count[id];
    out.errors[id] = std::move(err);
    ++received;
  };
  while (received < n && !out.timed_out)
    self->receive(
        on_result, on_error,
        caf::after(std::chrono::seconds(60)) >> [&] { out.timed_out = true; });
  bool quiet = false;
  while (!quiet)
    self->receive(
        on_result, on_error, caf::after(linger) >> [&] { quiet = true; });
  return out;
}

/// Every record of an audit log file, in order, as readers see them (BATCH
/// records expanded), as far as the chain verifies.
inline std::vector<pb::AuditRecord> read_audit(const std::string& path) {
  std::vector<pb::AuditRecord> out;
  audit::audit_log::verify(path,
                           [&](const pb::AuditRecord& r) { out.push_back(r); });
  return out;
}

/// Makes writes to the open file `path` of this process fail (ENOSPC, as on
/// a full disk) until destroyed or `repair()`ed: the descriptor that has it
/// open is pointed at /dev/full, then back at the file.
class full_disk {
public:
  explicit full_disk(const std::string& path) {
    auto want = std::filesystem::canonical(path);
    for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      auto target = std::filesystem::read_symlink(e.path(), ec);
      if (!ec && target == want && fd_ < 0)
        fd_ = std::stoi(e.path().filename().string());
    }
    REQUIRE(fd_ >= 0);
    saved_ = ::dup(fd_);
    int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    REQUIRE(full >= 0);
    REQUIRE(::dup2(full, fd_) == fd_);
    ::close(full);
  }
  ~full_disk() { repair(); }
  void repair() {
    if (saved_ < 0)
      return;
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }

private:
  int fd_ = -1;
  int saved_ = -1;
};

/// An actor system with Cohort's types and a temporary directory.
struct actor_fixture {
  system_config cfg;
  caf::actor_system sys{cfg};
  temp_dir dir;
};

/// Checks every result of `ends` against the CPU reference.
inline void check_results(const std::vector<work_item>& items, const ends& e) {
  for (auto& item : items) {
    auto r = e.results.find(item.id);
    if (r == e.results.end())
      continue;
    INFO("item " << item.id << " on " << r->second.device);
    CHECK(check_result(item, r->second.output) == "");
  }
}

/// Every item ended exactly once (none lost, none twice, nothing left
/// waiting) and every result matches the CPU reference.
inline void check_exactly_once(const std::vector<work_item>& items,
                               const ends& e) {
  CHECK_FALSE(e.timed_out);
  CHECK(e.count.size() == items.size());
  for (auto& [id, n] : e.count) {
    INFO("item " << id);
    CHECK(n == 1);
  }
  check_results(items, e);
}

} // namespace cohort::test
