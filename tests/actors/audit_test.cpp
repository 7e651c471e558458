// The audit actor: stats, fsync policies through the runtime, config checks,
// and a writer killed with SIGKILL mid-writes.
#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <random>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "audit/audit_log.hpp"
#include "tests/runtime_fixture.hpp"

using namespace cohort;
using namespace cohort::actors;
using namespace cohort::audit;
using namespace std::chrono_literals;

namespace {

using test::gemv_items;

using fixture = test::actor_fixture;

} // namespace

TEST_CASE_METHOD(fixture, "the runtime reports the audit log's counters",
                 "[actors][audit]") {
  auto cfg = test::make_config(dir, 2, {{"sim0", 1}});
  cfg.set_audit_batch(16);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto items = gemv_items(50);
  auto ends = test::submit_all(sys, **rt, items, [] {});
  test::check_exactly_once(items, ends);
  auto n = (*rt)->flush_audit();
  REQUIRE(n);
  auto s = (*rt)->audit_stats();
  REQUIRE(s);
  // admitted, placed and completed per item, at least.
  CHECK(s->records_appended >= 150);
  CHECK(s->records_appended == *n);
  CHECK(s->records_written == *n);
  // FSYNC_EVERY_BATCH by default: everything written was synced.
  CHECK(s->records_synced == *n);
  CHECK(s->fsyncs >= 1);
  CHECK(s->pending == 0);
  CHECK(s->last_seq == *n);
  CHECK(s->segment == (*rt)->audit_path());
  CHECK(s->segment_bytes == std::filesystem::file_size(s->segment));
  CHECK(s->bytes_written == s->segment_bytes);
  CHECK(s->write_errors == 0);
  CHECK(s->rotations == 0);
  CHECK(s->recoveries == 0);
}

TEST_CASE_METHOD(fixture, "each fsync policy runs through the runtime",
                 "[actors][audit]") {
  for (auto policy : {pb::FSYNC_EVERY_BATCH, pb::FSYNC_INTERVAL,
                      pb::FSYNC_ON_FLUSH_ONLY, pb::FSYNC_NEVER}) {
    INFO(pb::AuditFsync_Name(policy));
    test::temp_dir d;
    auto cfg = test::make_config(d, 2, {});
    cfg.set_audit_batch(8);
    cfg.mutable_audit()->set_fsync(policy);
    if (policy == pb::FSYNC_INTERVAL)
      cfg.mutable_audit()->set_fsync_interval_ms(20);
    auto rt = runtime::start(sys, cfg);
    REQUIRE(rt);
    auto items = gemv_items(20);
    auto ends = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, ends);
    if (policy == pb::FSYNC_INTERVAL) {
      // Written records are synced within the interval, without a flush.
      auto deadline = std::chrono::steady_clock::now() + 5s;
      for (;;) {
        auto s = (*rt)->audit_stats();
        REQUIRE(s);
        if ((s->records_written >= 60 &&
             s->records_synced == s->records_written) ||
            std::chrono::steady_clock::now() > deadline)
          break;
        std::this_thread::sleep_for(5ms);
      }
      auto s = (*rt)->audit_stats();
      CHECK(s->records_written >= 60);
      CHECK(s->records_synced == s->records_written);
    }
    auto n = (*rt)->flush_audit();
    REQUIRE(n);
    auto s = (*rt)->audit_stats();
    REQUIRE(s);
    CHECK(s->records_written == *n);
    CHECK(s->records_synced == (policy == pb::FSYNC_NEVER ? 0 : *n));
    (*rt)->stop();
    auto v = audit_log::verify(d.file("audit.log"));
    CHECK(v.ok);
    CHECK(v.good_records >= *n);
  }
}

TEST_CASE("bad audit options are malformed_config", "[actors][audit]") {
  struct bad_case {
    std::function<void(pb::RuntimeConfig&)> set;
    std::string says;
  };
  std::vector<bad_case> cases{
      {[](auto& c) { c.mutable_audit()->set_rotate_bytes(100); },
       "rotate_bytes is 100, at least 4096"},
      {[](auto& c) { c.mutable_audit()->set_keep_files(3); },
       "keep_files is 3 but rotate_bytes is 0"},
      {[](auto& c) { c.mutable_audit()->set_fsync_interval_ms(10); },
       "applies to FSYNC_INTERVAL only"},
      {[](auto& c) {
         c.mutable_audit()->set_fsync(pb::FSYNC_INTERVAL);
         c.mutable_audit()->set_fsync_interval_ms(700000);
       },
       "fsync_interval_ms is 700000, at most 600000"},
      {[](auto& c) {
         c.mutable_audit()->set_fsync(static_cast<pb::AuditFsync>(9));
       },
       "fsync is 9"},
      {[](auto& c) { c.set_audit_batch(100000); },
       "audit_batch is 100000, at most 65536"},
  };
  for (auto& bc : cases) {
    INFO(bc.says);
    pb::RuntimeConfig cfg;
    bc.set(cfg);
    auto opts = audit_options_of(cfg);
    REQUIRE_FALSE(opts);
    CHECK(code_of(opts.error()) == errc::malformed_config);
    CHECK_THAT(describe(opts.error()), Catch::Contains(bc.says));
  }
  for (auto [policy, expected] :
       {std::pair{pb::FSYNC_EVERY_BATCH, audit_fsync::every_batch},
        std::pair{pb::FSYNC_INTERVAL, audit_fsync::interval},
        std::pair{pb::FSYNC_ON_FLUSH_ONLY, audit_fsync::on_flush_only},
        std::pair{pb::FSYNC_NEVER, audit_fsync::never}}) {
    pb::RuntimeConfig cfg;
    cfg.mutable_audit()->set_fsync(policy);
    auto opts = audit_options_of(cfg);
    REQUIRE(opts);
    CHECK(opts->fsync == expected);
  }
  pb::RuntimeConfig good;
  good.set_audit_batch(32);
  good.mutable_audit()->set_fsync(pb::FSYNC_INTERVAL);
  good.mutable_audit()->set_fsync_interval_ms(250);
  good.mutable_audit()->set_rotate_bytes(1 << 20);
  good.mutable_audit()->set_keep_files(4);
  auto opts = audit_options_of(good);
  REQUIRE(opts);
  CHECK(opts->batch == 32);
  CHECK(opts->fsync == audit_fsync::interval);
  CHECK(opts->fsync_interval == 250ms);
  CHECK(opts->rotate_bytes == 1 << 20);
  CHECK(opts->keep_files == 4);
  auto defaults = audit_options_of(pb::RuntimeConfig{});
  REQUIRE(defaults);
  CHECK(defaults->batch == 256);
  CHECK(defaults->fsync == audit_fsync::every_batch);
  CHECK(defaults->rotate_bytes == 0);
}

TEST_CASE_METHOD(fixture, "the runtime refuses to start with bad audit options",
                 "[actors][audit]") {
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_audit()->set_rotate_bytes(10);
  auto rt = runtime::start(sys, cfg);
  REQUIRE_FALSE(rt);
  CHECK(code_of(rt.error()) == errc::malformed_config);
  CHECK_THAT(describe(rt.error()), Catch::Contains("audit: rotate_bytes"));
}

TEST_CASE_METHOD(fixture, "the runtime rotates its audit log",
                 "[actors][audit]") {
  auto cfg = test::make_config(dir, 2, {});
  cfg.set_audit_batch(16);
  cfg.mutable_audit()->set_rotate_bytes(4096);
  cfg.mutable_audit()->set_keep_files(2);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  // A file rotates after a write that fills it: common-path records reach
  // the log 32 bytes each in BATCH records, so each round of 60 items and
  // its flush (at least one write) is more than a file.
  for (int round = 0; round < 5; ++round) {
    auto items = gemv_items(60);
    for (auto& item : items)
      item.id += uint64_t(round) * 1000;
    auto ends = test::submit_all(sys, **rt, items, [] {});
    test::check_exactly_once(items, ends);
    REQUIRE((*rt)->flush_audit());
  }
  auto s = (*rt)->audit_stats();
  REQUIRE(s);
  CHECK(s->rotations >= 3);
  CHECK(s->segments == 2);
  (*rt)->stop();
  auto v = audit_log::verify((*rt)->audit_path());
  CHECK(v.ok);
  CHECK(v.mid_chain);
  CHECK(v.files.size() == 3);
}

namespace {

// One run of the crash writer: what it said before it was killed.
struct writer_run {
  uint64_t opened_with = 0;
  uint64_t recoveries = 0;
  uint64_t last_ack = 0;
  uint64_t acks = 0;
  std::string errors;
};

// Starts the writer on `path`, lets it write for `run_for` after its first
// acknowledgement, then kills it with SIGKILL.
writer_run run_and_kill(const std::string& path, const char* policy,
                        std::chrono::milliseconds run_for) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(COHORT_AUDIT_WRITER, COHORT_AUDIT_WRITER, path.c_str(), policy,
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  writer_run out;
  std::string buf;
  auto parse = [&] {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      auto line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      unsigned long long a = 0, b = 0;
      if (std::sscanf(line.c_str(), "ack %llu", &a) == 1) {
        out.last_ack = a;
        ++out.acks;
      } else if (std::sscanf(line.c_str(), "open %llu %llu", &a, &b) == 2) {
        out.opened_with = a;
        out.recoveries = b;
      } else {
        out.errors += line + "\n";
      }
    }
  };
  // Reads what the writer prints until `until` (or its first ack, when
  // `until` is unset); a pipe that fills up would stall it.
  auto read_until =
      [&](std::optional<std::chrono::steady_clock::time_point> until) {
        auto hard_stop = std::chrono::steady_clock::now() + 10s;
        for (;;) {
          auto now = std::chrono::steady_clock::now();
          if ((until && now >= *until) || (!until && out.acks > 0) ||
              now >= hard_stop)
            return;
          pollfd p{fds[0], POLLIN, 0};
          if (::poll(&p, 1, 1) <= 0)
            continue;
          char chunk[4096];
          auto n = ::read(fds[0], chunk, sizeof(chunk));
          if (n <= 0)
            return;
          buf.append(chunk, size_t(n));
          parse();
        }
      };
  read_until(std::nullopt);
  read_until(std::chrono::steady_clock::now() + run_for);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  // A line the writer finished before it died is an acknowledgement it got.
  char chunk[4096];
  ssize_t n;
  while ((n = ::read(fds[0], chunk, sizeof(chunk))) > 0)
    buf.append(chunk, size_t(n));
  parse();
  ::close(fds[0]);
  CHECK(WIFSIGNALED(status));
  return out;
}

} // namespace

TEST_CASE("kill -9 during heavy writes loses no acknowledged record",
          "[actors][audit]") {
  test::temp_dir dir;
  auto path = dir.file("crash.log");
  auto seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng{seed};
  std::uniform_int_distribution<int> ms{0, 80};
  uint64_t acked = 0;
  int torn = 0;
  int kills = 8;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kills; ++i) {
    // FSYNC_EVERY_BATCH, the default, and runs without fdatasync, which
    // spend their time in write(2) and so are more often torn by the kill.
    auto policy = i % 2 == 0 ? "every_batch" : "never";
    INFO("kill " << i << ", " << policy);
    auto run = run_and_kill(path, policy, std::chrono::milliseconds(ms(rng)));
    CHECK(run.errors.empty());
    REQUIRE(run.acks > 0);
    // Recovery at open kept every acknowledged record of the run before.
    CHECK(run.opened_with >= acked);
    CHECK(run.last_ack > acked);
    acked = run.last_ack;
    auto v = audit_log::verify(path);
    // On disk now: at least every acknowledged record, the chain whole but
    // for at most a torn write at the end.
    CHECK(v.last_seq >= acked);
    if (!v.ok) {
      CHECK(v.torn_tail);
      ++torn;
    }
  }
  // The last recovery, by a plain open.
  {
    auto log = audit_log::open(path, 8);
    REQUIRE(log);
    CHECK((*log)->records() >= acked);
  }
  uint64_t recoveries = 0;
  uint64_t last_seq = 0;
  auto v = audit_log::verify(path, [&](const pb::AuditRecord& r) {
    recoveries += r.kind() == pb::RECOVERY;
    last_seq = r.seq();
  });
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  // One chain across every restart, one RECOVERY record per torn write.
  CHECK(v.ok);
  CHECK(v.first_seq == 1);
  CHECK(last_seq >= acked);
  CHECK(recoveries == uint64_t(torn));
  WARN("audit crash test: " << kills << " kills in " << took.count() << " ms, "
                            << torn << " torn write(s) recovered, "
                            << v.good_records << " records, last ack "
                            << acked);
}

TEST_CASE_METHOD(fixture,
                 "the runtime fails closed while the audit log cannot be "
                 "written, and resumes when it can",
                 "[actors][audit]") {
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_alerts()->set_eval_interval_ms(20);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(r.run(test::gemv_item(1)));
  REQUIRE(r.flush_audit());
  uint64_t id = 1;
  {
    test::full_disk full{r.audit_path()};
    // Admission stops once the audit actor finds that it cannot write.
    caf::error refused;
    for (int i = 0; i < 200 && !refused; ++i) {
      auto res = r.run(test::gemv_item(++id));
      if (!res)
        refused = res.error();
      std::this_thread::sleep_for(5ms);
    }
    INFO(describe(refused));
    CHECK(code_of(refused) == errc::audit_unavailable);
    CHECK(code_of(r.flush_audit().error()) == errc::io_error);
    CHECK(r.audit_stats()->failing);
    bool alerted = false;
    for (int i = 0; i < 200 && !alerted; ++i) {
      auto firing = r.alerts();
      REQUIRE(firing);
      for (auto& a : *firing)
        alerted |= a.name == "audit_unavailable" && a.severity == "critical";
      std::this_thread::sleep_for(5ms);
    }
    CHECK(alerted);
    CHECK(r.admission_stats()->rejected_by_reason["audit_unavailable"] > 0);
  }
  // Room again: within a retry or two admission resumes.
  caf::expected<work_result> res{caf::error{}};
  for (int i = 0; i < 200; ++i) {
    res = r.run(test::gemv_item(++id));
    if (res)
      break;
    std::this_thread::sleep_for(5ms);
  }
  CHECK(res);
  REQUIRE(r.flush_audit());
  r.stop();
  // Every admitted item ended, and the records of those that ran while the
  // disk was full are in the chain.
  std::map<uint64_t, int> admitted, ended;
  auto v = audit_log::verify(r.audit_path(), [&](const pb::AuditRecord& rec) {
    if (rec.kind() == pb::ADMITTED)
      ++admitted[rec.work_id()];
    if (rec.kind() == pb::COMPLETED || rec.kind() == pb::FAILED)
      ++ended[rec.work_id()];
  });
  CHECK(v.ok);
  CHECK(admitted.size() >= 3);
  CHECK(admitted == ended);
}

TEST_CASE_METHOD(fixture,
                 "AUDIT_KEEP_RUNNING admits while the audit log cannot be "
                 "written",
                 "[actors][audit]") {
  auto cfg = test::make_config(dir, 1, {});
  cfg.mutable_audit()->set_on_write_failure(pb::AUDIT_KEEP_RUNNING);
  auto rt = runtime::start(sys, cfg);
  REQUIRE(rt);
  auto& r = **rt;
  REQUIRE(r.run(test::gemv_item(1)));
  test::full_disk full{r.audit_path()};
  for (uint64_t id = 2; id < 30; ++id) {
    auto res = r.run(test::gemv_item(id));
    INFO(describe(res ? caf::error{} : res.error()));
    CHECK(res);
    std::this_thread::sleep_for(2ms);
  }
  CHECK(r.audit_stats()->failing);
}

TEST_CASE_METHOD(fixture, "two runtimes cannot share one audit log",
                 "[actors][audit]") {
  auto cfg = test::make_config(dir, 1, {});
  auto first = runtime::start(sys, cfg);
  REQUIRE(first);
  auto second = runtime::start(sys, cfg);
  REQUIRE_FALSE(second);
  CHECK_THAT(describe(second.error()),
             Catch::Contains("in use by another writer"));
}
