// A helper of the audit crash test: appends records through the real audit
// log and actor as fast as it can until it is killed, printing each
// acknowledged record count ("ack N") once its flush has replied.
// usage: audit_crash_writer PATH [every_batch|never]
#include <cstdio>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/audit.hpp"
#include "audit/audit_log.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

using namespace cohort;
using namespace cohort::audit;

int main(int argc, char** argv) {
  std::string policy = argc > 2 ? argv[2] : "every_batch";
  if (argc < 2 || argc > 3 || (policy != "every_batch" && policy != "never")) {
    std::fprintf(stderr,
                 "usage: audit_crash_writer PATH [every_batch|never]\n");
    return 2;
  }
  // Large batches: a write(2) spans many pages, so a SIGKILL can land in
  // the middle of one and leave a torn record. Without fdatasync the writer
  // spends most of its time in write(2), and a kill tears one more often; a
  // flush then acknowledges what the kernel holds, which outlives the
  // process.
  audit::audit_options opts;
  opts.batch = 2048;
  opts.fsync = policy == "never" ? audit::audit_fsync::never
                                 : audit::audit_fsync::every_batch;
  auto log = audit::audit_log::open(argv[1], opts);
  if (!log) {
    std::printf("error %s\n", describe(log.error()).c_str());
    return 1;
  }
  std::printf("open %llu %llu\n", (unsigned long long)(*log)->records(),
              (unsigned long long)(*log)->stats().recoveries);
  std::fflush(stdout);
  system_config cfg;
  caf::actor_system sys{cfg};
  auto audit = sys.spawn<caf::detached>(
      actors::audit_impl, std::shared_ptr<audit::audit_log>{std::move(*log)});
  caf::scoped_actor self{sys};
  std::string detail(96, 'x');
  for (uint64_t id = 0;;) {
    // Several batches between flushes: most writes are batch writes, each
    // followed by fdatasync.
    for (int b = 0; b < 4; ++b) {
      std::vector<audit_event> evs;
      for (int i = 0; i < 1024; ++i, ++id)
        evs.push_back(
            {audit_kind::completed, "crash", id, "sim0", "axpy", detail, 0});
      self->send(audit, record_atom::value, std::move(evs));
    }
    self->request(audit, caf::infinite, flush_atom::value)
        .receive(
            [&](uint64_t n) {
              std::printf("ack %llu\n", (unsigned long long)n);
              std::fflush(stdout);
            },
            [&](caf::error& err) {
              std::printf("error %s\n", describe(err).c_str());
              std::fflush(stdout);
              std::exit(1);
            });
  }
}
