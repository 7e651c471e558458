// `cohort audit verify|show|query`: time and kind parsing, filters, rotated
// and broken logs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "audit/audit_log.hpp"
#include "tests/tools/cli_fixture.hpp"
#include "tools/audit_command.hpp"

using namespace cohort;
using namespace cohort::test;
using cohort::tools::parse_kind;
using cohort::tools::parse_time;

namespace {

// 2026-11-24T10:00:00Z in ns since the epoch.
constexpr int64_t t0 = 1795514400LL * 1000000000LL;

// A log of 60 records: tenants a/b/c in turn, work ids 0..59, devices sim0
// and sim1, kinds admitted/completed, one second apart from t0; rotated
// every 4 KiB when `rotate`.
std::string write_log(const temp_dir& dir, bool rotate) {
  auto path = dir.file("audit.log");
  audit::audit_options opts;
  opts.batch = 4;
  opts.fsync = audit::audit_fsync::never;
  if (rotate)
    opts.rotate_bytes = 4096;
  auto log = audit::audit_log::open(path, opts);
  REQUIRE(log);
  for (uint64_t i = 0; i < 60; ++i)
    REQUIRE_FALSE((*log)->append(
        {i % 2 == 0 ? audit_kind::admitted : audit_kind::completed,
         std::string(1, char('a' + i % 3)), i, i % 4 < 2 ? "sim0" : "sim1",
         "gemv", "detail of item " + std::to_string(i) + std::string(150, '.'),
         t0 + int64_t(i) * 1000000000}));
  return path;
}

// `cohort audit ARGS` in this process (words split at spaces): the same code
// as the binary's, without its start-up time. Errors go to stderr.
cli_result audit_in_process(const std::string& args) {
  std::vector<std::string> words;
  std::istringstream in{args};
  for (std::string w; in >> w;)
    words.push_back(w);
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buf, &size);
  REQUIRE(out != nullptr);
  cli_result res;
  res.status = tools::run_audit(words, out);
  std::fclose(out);
  res.output.assign(buf, size);
  std::free(buf);
  return res;
}

size_t lines_with(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(needle, at)) != std::string::npos;
       at += needle.size())
    ++n;
  return n;
}

} // namespace

TEST_CASE("audit query times: ns since the epoch or ISO-8601 UTC",
          "[tools][audit]") {
  CHECK(parse_time("0") == 0);
  CHECK(parse_time("1795514400000000000") == t0);
  CHECK(parse_time("2026-11-24T10:00:00Z") == t0);
  CHECK(parse_time("2026-11-24T10:00:00.5Z") == t0 + 500000000);
  CHECK(parse_time("2026-11-24T10:00:00.000000001Z") == t0 + 1);
  CHECK(parse_time("1970-01-01T00:00:00Z") == 0);
  for (auto bad :
       {"", "yesterday", "2026-11-24", "2026-11-24T10:00:00",
        "2026-11-24T10:00:00+01:00", "2026-02-30T10:00:00Z",
        "2026-11-24T25:00:00Z", "2026-11-24T10:00:00.Z",
        "2026-11-24T10:00:00.0000000001Z", "-5", "99999999999999999999"}) {
    INFO(bad);
    auto t = parse_time(bad);
    REQUIRE_FALSE(t);
    CHECK(code_of(t.error()) == errc::invalid_arguments);
  }
  CHECK(tools::iso_time(t0 + 1) == "2026-11-24T10:00:00.000000001Z");
  CHECK(parse_time(tools::iso_time(t0 + 123456789)) == t0 + 123456789);
}

TEST_CASE("audit query kinds by name in any case or by number",
          "[tools][audit]") {
  CHECK(parse_kind("completed") == pb::COMPLETED);
  CHECK(parse_kind("DEVICE_EVENT") == pb::DEVICE_EVENT);
  CHECK(parse_kind("Recovery") == pb::RECOVERY);
  CHECK(parse_kind("2") == pb::REJECTED);
  for (auto bad : {"", "done", "0", "99", "AUDIT_UNSPECIFIED"}) {
    INFO(bad);
    auto k = parse_kind(bad);
    REQUIRE_FALSE(k);
    CHECK_THAT(describe(k.error()), Catch::Contains("ROTATED"));
  }
}

TEST_CASE("audit query filters records", "[tools][audit]") {
  pb::AuditRecord r;
  r.set_tenant("a");
  r.set_work_id(7);
  r.set_device("sim0");
  r.set_kind(pb::PLACED);
  r.set_time_ns(t0);
  tools::audit_query q;
  CHECK(q.matches(r));
  q.tenant = "a";
  q.work_id = 7;
  q.device = "sim0";
  q.kind = pb::PLACED;
  q.since = t0;
  q.until = t0 + 1;
  CHECK(q.matches(r));
  // since is inclusive, until exclusive.
  auto later = q;
  later.since = t0 + 1;
  CHECK_FALSE(later.matches(r));
  auto earlier = q;
  earlier.until = t0;
  CHECK_FALSE(earlier.matches(r));
  auto other = q;
  other.tenant = "b";
  CHECK_FALSE(other.matches(r));
  other = q;
  other.work_id = 8;
  CHECK_FALSE(other.matches(r));
  other = q;
  other.device = "sim1";
  CHECK_FALSE(other.matches(r));
  other = q;
  other.kind = pb::COMPLETED;
  CHECK_FALSE(other.matches(r));
}

TEST_CASE("cohort audit query prints matching records from every segment",
          "[tools][audit][cli]") {
  temp_dir dir;
  auto path = write_log(dir, true);
  REQUIRE(audit::audit_segments(path).size() >= 2);
  auto q = [&](const std::string& args) {
    auto res = audit_in_process("query " + path + " " + args + " --json");
    INFO(args << "\n" << res.output);
    CHECK(res.status == 0);
    CHECK_THAT(res.output, Catch::Contains("\"chain\":{\"ok\":true"));
    return lines_with(res.output, "{\"seq\":");
  };
  CHECK(q("--tenant a") == 20);
  CHECK(q("--work-id 31") == 1);
  CHECK(q("--device sim1") == 30);
  CHECK(q("--kind completed") == 30);
  // The ROTATED record at the start of each later file.
  CHECK(q("--kind rotated") == audit::audit_segments(path).size());
  // Items 10..19 by time, in both forms.
  CHECK(q("--since 2026-11-24T10:00:10Z --until 2026-11-24T10:00:20Z") == 10);
  CHECK(q("--since " + std::to_string(t0 + 10000000000) + " --until " +
          std::to_string(t0 + 20000000000)) == 10);
  // i % 3 == 1, i % 4 < 2 and i even: i % 12 == 4.
  CHECK(q("--tenant b --device sim0 --kind admitted") == 5);
  CHECK(q("--tenant nobody") == 0);
  // Oldest first, across segments, with the file each came from.
  auto res = cohort_cli("audit query " + path + " --tenant a --json");
  auto first = res.output.find("\"work_id\":\"0\",");
  auto last = res.output.find("\"work_id\":\"57\",");
  CHECK(first < last);
  CHECK_THAT(res.output, Catch::Contains("\"file\":\"audit.log.1\""));
  CHECK_THAT(res.output, Catch::Contains("\"time\":\"2026-11-24T10:00:57."));
  // Text output: a table, then how many matched and the verdict.
  auto text = cohort_cli("audit query " + path + " --work-id 31");
  INFO(text.output);
  CHECK(text.status == 0);
  CHECK_THAT(text.output, Catch::Contains("2026-11-24T10:00:31.000000000Z"));
  CHECK_THAT(text.output, Catch::Contains("detail of item 31"));
  CHECK_THAT(text.output, Catch::Contains("1 of "));
  CHECK_THAT(text.output, Catch::Contains("verified while reading"));
  CHECK_THAT(text.output, Catch::Contains(": OK, "));
}

TEST_CASE("cohort audit query says when the chain is broken",
          "[tools][audit][cli]") {
  temp_dir dir;
  auto path = write_log(dir, true);
  auto segs = audit::audit_segments(path);
  std::filesystem::remove(segs[1]);
  auto res = cohort_cli("audit query " + path + " --tenant a");
  INFO(res.output);
  CHECK(res.status == 1);
  CHECK_THAT(res.output, Catch::Contains("before the chain broke"));
  CHECK_THAT(res.output, Catch::Contains("BROKEN at record seq"));
  CHECK_THAT(res.output, Catch::Contains("are missing"));
  auto json = cohort_cli("audit query " + path + " --json");
  CHECK(json.status == 1);
  CHECK_THAT(json.output, Catch::Contains("\"ok\":false"));
  CHECK_THAT(json.output, Catch::Contains("\"file\":\"" + segs[2] + "\""));
}

TEST_CASE("cohort audit query refuses bad input with exit 2",
          "[tools][audit][cli]") {
  temp_dir dir;
  auto path = write_log(dir, false);
  for (auto args : {std::string{"--since yesterday"},
                    std::string{"--kind done"}, std::string{"--work-id -1"},
                    std::string{"--tenant"}, std::string{"--bogus 1"},
                    std::string{"--since 2026-11-24T11:00:00Z --until "
                                "2026-11-24T10:00:00Z"}}) {
    auto res = audit_in_process("query " + path + " " + args);
    INFO(args);
    CHECK(res.status == 2);
    CHECK(res.output.empty());
  }
  CHECK(audit_in_process("").status == 2);
  CHECK(audit_in_process("frobnicate " + path).status == 2);
  CHECK(audit_in_process("verify").status == 2);
  CHECK(audit_in_process("verify " + path + " extra").status == 2);
  CHECK(audit_in_process("verify " + path + " --json").status == 2);
  // The binary says why, and exits 2.
  auto missing = cohort_cli("audit query " + dir.file("absent.log"));
  CHECK(missing.status == 2);
  CHECK_THAT(missing.output, Catch::Contains("cannot read"));
}

TEST_CASE("cohort audit verify reads every segment of a rotated log",
          "[tools][audit][cli]") {
  temp_dir dir;
  auto path = write_log(dir, true);
  auto segs = audit::audit_segments(path);
  auto res = cohort_cli("audit verify " + path);
  INFO(res.output);
  CHECK(res.status == 0);
  for (auto& s : segs)
    CHECK_THAT(res.output, Catch::Contains(s + ": seq "));
  CHECK_THAT(res.output,
             Catch::Contains("in " + std::to_string(segs.size() + 1) +
                             " file(s) (seq 1.."));
  // Pruned: verifies from where the kept segments start.
  std::filesystem::remove(segs[0]);
  auto pruned = cohort_cli("audit verify " + path);
  INFO(pruned.output);
  CHECK(pruned.status == 0);
  CHECK_THAT(pruned.output, Catch::Contains("starts mid-chain at seq"));
  // A middle segment removed: the next file does not follow.
  REQUIRE(segs.size() >= 3);
  std::filesystem::remove(segs[2]);
  auto broken = cohort_cli("audit verify " + path);
  INFO(broken.output);
  CHECK(broken.status == 1);
  auto next = segs.size() > 3 ? segs[3] : path;
  CHECK_THAT(broken.output, Catch::Contains("BROKEN at record seq"));
  CHECK_THAT(broken.output, Catch::Contains("in " + next +
                                            " (record 1 of the file, byte "
                                            "offset 0)"));
  CHECK_THAT(broken.output, Catch::Contains("are missing"));
}

TEST_CASE("cohort audit verify names a flipped record", "[tools][audit][cli]") {
  temp_dir dir;
  auto path = write_log(dir, false);
  std::string bytes;
  {
    std::ifstream in{path, std::ios::binary};
    bytes.assign(std::istreambuf_iterator<char>{in}, {});
  }
  auto at = bytes.find("detail of item 41");
  REQUIRE(at != std::string::npos);
  bytes[at + 3] = 'X';
  std::ofstream{path, std::ios::binary | std::ios::trunc} << bytes;
  auto res = cohort_cli("audit verify " + path);
  INFO(res.output);
  CHECK(res.status == 1);
  CHECK_THAT(res.output, Catch::Contains("BROKEN at record seq 42 in " + path +
                                         " (record 42 of the file, byte "
                                         "offset "));
  CHECK_THAT(res.output, Catch::Contains("hash mismatch"));
  CHECK_THAT(res.output, Catch::Contains("41 records before it verify"));
  auto show = cohort_cli("audit show " + path);
  CHECK(show.status == 1);
  CHECK(lines_with(show.output, "detail of item") == 41);
}

TEST_CASE("cohort audit verify passes after a torn write is recovered",
          "[tools][audit][cli]") {
  temp_dir dir;
  auto path = write_log(dir, false);
  std::string bytes;
  {
    std::ifstream in{path, std::ios::binary};
    bytes.assign(std::istreambuf_iterator<char>{in}, {});
  }
  // A crash in the middle of the last record.
  std::ofstream{path, std::ios::binary | std::ios::trunc}
      << bytes.substr(0, bytes.size() - 40);
  auto torn = cohort_cli("audit verify " + path);
  INFO(torn.output);
  CHECK(torn.status == 1);
  CHECK_THAT(torn.output, Catch::Contains("BROKEN at record seq 60"));
  CHECK_THAT(torn.output, Catch::Contains("a torn write"));
  // Opening the log for writing recovers it.
  REQUIRE(audit::audit_log::open(path, 8));
  auto ok = cohort_cli("audit verify " + path);
  INFO(ok.output);
  CHECK(ok.status == 0);
  auto q = cohort_cli("audit query " + path + " --kind recovery");
  INFO(q.output);
  CHECK(q.status == 0);
  CHECK_THAT(q.output, Catch::Contains("cut off a torn write"));
  CHECK_THAT(q.output, Catch::Contains("bytes after seq 59"));
}
