// libFuzzer target: the audit log readers. The input is an audit log file
// (length-delimited, hash-chained records) that `cohort audit verify`,
// `show` and `query --json` read and that a writer re-opens (cutting a torn
// tail), BATCH records among them; or, with a first byte of 0 or 1, the text of
// `--since` / `--kind`. COHORT_FUZZ_WRITE_SEED=PATH writes a valid log of a few
// records to PATH and exits: the seed corpus' one file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "audit/audit_log.hpp"
#include "messages/errc.hpp"
#include "tools/audit_command.hpp"

using namespace cohort;

namespace {

void write_seed(const std::string& path) {
  std::filesystem::remove(path);
  audit::audit_options opts;
  opts.fsync = audit::audit_fsync::never;
  auto log = audit::audit_log::open(path, opts);
  if (!log) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(),
                 describe(log.error()).c_str());
    std::exit(1);
  }
  const audit_kind kinds[] = {audit_kind::admitted,     audit_kind::placed,
                              audit_kind::completed,    audit_kind::failed,
                              audit_kind::device_event, audit_kind::admin};
  uint64_t id = 1;
  for (auto k : kinds)
    (*log)->append({k, "tenant-a", id++, "sim0", "axpy", "seed record",
                    1795000000000000000 + int64_t(id)});
  // A BATCH record: the common path's fixed entries.
  (*log)->set_names({"tenant-a"}, {"cpu0", "sim0"});
  std::vector<audit_entry> entries;
  for (auto k :
       {audit_kind::admitted, audit_kind::placed, audit_kind::completed}) {
    audit_entry e;
    e.time_ns = 1795000000000000000 + int64_t(id);
    e.work_id = id;
    e.value = k == audit_kind::admitted ? 4096 : 0;
    e.device = k == audit_kind::admitted ? audit_entry::no_device : 1;
    e.kind = static_cast<uint8_t>(k);
    entries.push_back(e);
  }
  (*log)->append(std::span<const audit_entry>{entries});
  (*log)->flush(false);
  log->reset();
  std::filesystem::remove(path + ".lock");
}

std::string temp_path() {
  auto dir = std::filesystem::temp_directory_path();
  return (dir / ("cohort-fuzz-audit-" + std::to_string(::getpid()) + ".log"))
      .string();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (auto* seed = std::getenv("COHORT_FUZZ_WRITE_SEED")) {
    write_seed(seed);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] <= 1) {
    std::string text{reinterpret_cast<const char*>(data) + 1, size - 1};
    if (data[0] == 0) {
      if (auto t = tools::parse_time(text); t && *t >= 0)
        (void)tools::iso_time(*t);
    } else {
      (void)tools::parse_kind(text);
    }
    return 0;
  }
  static const std::string path = temp_path();
  static std::FILE* sink = std::fopen("/dev/null", "w");
  if (auto* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  (void)tools::run_audit({"verify", path}, sink);
  (void)tools::run_audit({"show", path}, sink);
  (void)tools::run_audit({"query", path, "--json", "--kind", "completed",
                          "--since", "1795000000000000000"},
                         sink);
  {
    // A writer opening the log: verifies it, cuts a torn tail.
    audit::audit_options opts;
    opts.fsync = audit::audit_fsync::never;
    auto log = audit::audit_log::open(path, opts);
    if (log)
      (void)(*log)->append({audit_kind::admin, "", 0, "", "", "fuzz", 1});
  }
  std::filesystem::remove(path + ".lock");
  for (auto& seg : audit::audit_segments(path))
    std::filesystem::remove(seg);
  return 0;
}
