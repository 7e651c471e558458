#include "tools/audit_command.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <unistd.h>

#include <caf/message.hpp>
#include <google/protobuf/util/json_util.h>

#include "audit/audit_log.hpp"
#include "messages/admin.pb.h"
#include "messages/errc.hpp"
#include "tools/terminal_text.hpp"

namespace cohort::tools {

namespace {

int audit_bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort: audit: %s\n", terminal_text(msg).c_str());
  return exit_bad_input;
}

caf::error bad_argument(const std::string& msg) {
  return make_error(errc::invalid_arguments, msg);
}

// The human-readable part of an error of ours.
std::string detail(const caf::error& err) {
  auto& ctx = err.context();
  return ctx.match_elements<std::string>() ? ctx.get_as<std::string>(0)
                                           : describe(err);
}

std::string or_dash(const std::string& s) {
  return s.empty() ? "-" : s;
}

using ull = unsigned long long;

// The file name of `path`, for output that names segments.
std::string base(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where the first bad record is, for humans.
std::string where_bad(const audit::audit_verdict& v) {
  auto out = "record seq " + std::to_string(v.first_bad) + " in " + v.bad_file +
             " (record " + std::to_string(v.bad_index) +
             " of the file, byte offset " + std::to_string(v.bad_offset) +
             "): " + v.reason;
  if (v.torn_tail)
    out += " [a torn write at the end of the log: the writer crashed or is "
           "writing now; opening the log for writing cuts it off]";
  return out;
}

void print_mid_chain(std::FILE* out, const std::string& path,
                     const audit::audit_verdict& v) {
  if (v.mid_chain)
    std::fprintf(out,
                 "%s: starts mid-chain at seq %llu (older segments were "
                 "pruned): its first record links to a hash that is not on "
                 "disk\n",
                 path.c_str(), ull(v.first_seq));
}

void print_verdict(std::FILE* out, const std::string& path,
                   const audit::audit_verdict& v) {
  if (v.ok)
    std::fprintf(out,
                 "%s: OK, %llu records in %zu file(s) (seq %llu..%llu), "
                 "chain head %s\n",
                 path.c_str(), ull(v.good_records), v.files.size(),
                 ull(v.first_seq), ull(v.last_seq),
                 audit::to_hex(v.head).c_str());
  else
    std::fprintf(out, "%s: BROKEN at %s; %llu records before it verify\n",
                 path.c_str(), where_bad(v).c_str(), ull(v.good_records));
}

// One line of JSON in protobuf's mapping (proto field names, every field,
// 64-bit integers as strings), as the admin API writes its bodies.
void print_json_line(std::FILE* out, const google::protobuf::Message& msg) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  std::string line;
  if (!google::protobuf::util::MessageToJsonString(msg, &line, opts).ok())
    line = "{\"error\":\"cannot encode\"}";
  std::fprintf(out, "%s\n", line.c_str());
}

void print_json_verdict(std::FILE* out, const audit::audit_verdict& v,
                        uint64_t matched) {
  pb::AuditQueryVerdict verdict;
  auto* chain = verdict.mutable_chain();
  chain->set_ok(v.ok);
  chain->set_records(v.good_records);
  chain->set_files(uint32_t(v.files.size()));
  chain->set_first_seq(v.first_seq);
  chain->set_last_seq(v.last_seq);
  chain->set_mid_chain(v.mid_chain);
  chain->set_head(audit::to_hex(v.head));
  if (!v.ok) {
    auto* bad = chain->mutable_first_bad();
    bad->set_seq(v.first_bad);
    bad->set_file(v.bad_file);
    bad->set_offset(v.bad_offset);
    bad->set_index(v.bad_index);
    bad->set_reason(v.reason);
    bad->set_torn_tail(v.torn_tail);
  }
  verdict.set_matched(matched);
  print_json_line(out, verdict);
}

// The log exists: its active file or at least one segment.
bool log_exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0 ||
         !audit::audit_segments(path).empty();
}

int cmd_verify(const std::string& path, std::FILE* out) {
  auto v = audit::audit_log::verify(path);
  for (auto& f : v.files) {
    if (f.records > 0)
      std::fprintf(out, "  %s: seq %llu..%llu, %llu records, %llu bytes\n",
                   f.path.c_str(), ull(f.first_seq), ull(f.last_seq),
                   ull(f.records), ull(f.bytes));
    else
      std::fprintf(out, "  %s: no records that verify, %llu bytes\n",
                   f.path.c_str(), ull(f.bytes));
  }
  print_mid_chain(out, path, v);
  print_verdict(out, path, v);
  return v.ok ? exit_ok : exit_failed;
}

int cmd_show(const std::string& path, std::FILE* out) {
  auto v = audit::audit_log::verify(path, [&](const pb::AuditRecord& r) {
    std::fprintf(out, "%llu %lld %s %s %llu %s %s %s\n", ull(r.seq()),
                 (long long)r.time_ns(), pb::AuditKind_Name(r.kind()).c_str(),
                 terminal_text(r.tenant()).c_str(), ull(r.work_id()),
                 terminal_text(r.device()).c_str(),
                 terminal_text(r.kernel()).c_str(),
                 terminal_text(r.detail()).c_str());
  });
  print_mid_chain(out, path, v);
  print_verdict(out, path, v);
  return v.ok ? exit_ok : exit_failed;
}

caf::expected<audit_query>
query_of(const std::map<std::string, std::string>& values) {
  audit_query q;
  for (auto& [k, v] : values) {
    if (k == "--tenant") {
      q.tenant = v;
    } else if (k == "--device") {
      q.device = v;
    } else if (k == "--work-id") {
      char* end = nullptr;
      errno = 0;
      auto n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0])) ||
          *end != '\0' || errno != 0)
        return bad_argument("--work-id needs a non-negative integer, got '" +
                            v + "'");
      q.work_id = n;
    } else if (k == "--kind") {
      auto kind = parse_kind(v);
      if (!kind)
        return kind.error();
      q.kind = *kind;
    } else {
      auto t = parse_time(v);
      if (!t)
        return bad_argument(k + ": " + detail(t.error()));
      (k == "--since" ? q.since : q.until) = *t;
    }
  }
  if (q.since && q.until && *q.since >= *q.until)
    return bad_argument("--since must be before --until");
  return q;
}

int cmd_query(const std::string& path, const audit_query& q, bool json,
              std::FILE* out) {
  uint64_t matched = 0;
  std::string file;
  if (!json)
    std::fprintf(out, "%-8s %-30s %-12s %-12s %8s %-8s %-12s %s\n", "seq",
                 "time (UTC)", "kind", "tenant", "work", "device", "kernel",
                 "detail");
  auto v = audit::audit_log::verify(
      path,
      [&](const pb::AuditRecord& r) {
        if (!q.matches(r))
          return;
        ++matched;
        if (json) {
          pb::AuditQueryRecord line;
          line.set_seq(r.seq());
          line.set_time_ns(r.time_ns());
          line.set_time(iso_time(r.time_ns()));
          line.set_kind(pb::AuditKind_Name(r.kind()));
          line.set_tenant(r.tenant());
          line.set_work_id(r.work_id());
          line.set_device(r.device());
          line.set_kernel(r.kernel());
          line.set_detail(r.detail());
          line.set_file(base(file));
          print_json_line(out, line);
        } else {
          std::fprintf(out, "%-8llu %-30s %-12s %-12s %8llu %-8s %-12s %s\n",
                       ull(r.seq()), iso_time(r.time_ns()).c_str(),
                       pb::AuditKind_Name(r.kind()).c_str(),
                       terminal_text(or_dash(r.tenant())).c_str(),
                       ull(r.work_id()),
                       terminal_text(or_dash(r.device())).c_str(),
                       terminal_text(or_dash(r.kernel())).c_str(),
                       terminal_text(r.detail()).c_str());
        }
      },
      [&](const std::string& f) { file = f; });
  if (json) {
    print_json_verdict(out, v, matched);
  } else {
    std::fprintf(out,
                 "\n%llu of %llu records matched%s; the chain was "
                 "verified while reading\n",
                 ull(matched), ull(v.good_records),
                 v.ok ? "" : " before the chain broke");
    print_mid_chain(out, path, v);
    print_verdict(out, path, v);
  }
  return v.ok ? exit_ok : exit_failed;
}

} // namespace

bool audit_query::matches(const pb::AuditRecord& r) const {
  return (!tenant || r.tenant() == *tenant) &&
         (!work_id || r.work_id() == *work_id) &&
         (!device || r.device() == *device) && (!kind || r.kind() == *kind) &&
         (!since || r.time_ns() >= *since) && (!until || r.time_ns() < *until);
}

caf::expected<int64_t> parse_time(const std::string& text) {
  auto bad = [&] {
    return bad_argument("'" + text +
                        "' is not a time: give nanoseconds since the epoch "
                        "or an ISO-8601 UTC time like 2026-11-24T10:00:00Z");
  };
  if (text.empty())
    return bad();
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return c >= '0' && c <= '9'; })) {
    errno = 0;
    char* end = nullptr;
    auto n = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0)
      return bad();
    return int64_t(n);
  }
  // YYYY-MM-DDTHH:MM:SS[.fraction]Z
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0, used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h,
                  &mi, &s, &used) != 6 ||
      used != 19 || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 ||
      h > 23 || mi > 59 || s > 60)
    return bad();
  int64_t frac = 0;
  size_t i = 19;
  if (i < text.size() && text[i] == '.') {
    size_t digits = 0;
    for (++i; i < text.size() && std::isdigit((unsigned char)text[i]); ++i) {
      if (++digits > 9)
        return bad();
      frac = frac * 10 + (text[i] - '0');
    }
    if (digits == 0)
      return bad();
    for (; digits < 9; ++digits)
      frac *= 10;
  }
  if (i + 1 != text.size() || (text[i] != 'Z' && text[i] != 'z'))
    return bad();
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  auto secs = ::timegm(&tm);
  // timegm normalizes 2026-02-31 to March: a date that changed was invalid.
  if (secs == time_t(-1) || tm.tm_mday != d || tm.tm_mon != mo - 1)
    return bad();
  if (int64_t(secs) > (INT64_MAX - frac) / 1000000000)
    return bad();
  return int64_t(secs) * 1000000000 + frac;
}

caf::expected<pb::AuditKind> parse_kind(const std::string& text) {
  std::string upper;
  for (char c : text)
    upper += char(std::toupper(static_cast<unsigned char>(c)));
  // BATCH is how records are stored, never a record's kind once read.
  auto shown = [](int n) {
    return n != pb::AUDIT_UNSPECIFIED && n != pb::BATCH;
  };
  pb::AuditKind kind;
  if (pb::AuditKind_Parse(upper, &kind) && shown(kind))
    return kind;
  if (!text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    auto n = std::atoi(text.c_str());
    if (text.size() < 4 && pb::AuditKind_IsValid(n) && shown(n))
      return static_cast<pb::AuditKind>(n);
  }
  std::string names;
  auto* desc = pb::AuditKind_descriptor();
  for (int i = 0; i < desc->value_count(); ++i)
    if (shown(desc->value(i)->number()))
      names += (names.empty() ? "" : ", ") + desc->value(i)->name();
  return bad_argument("--kind: unknown kind '" + text + "' (one of " + names +
                      ")");
}

std::string iso_time(int64_t time_ns) {
  auto secs = time_t(time_ns / 1000000000);
  auto frac = time_ns % 1000000000;
  if (frac < 0) {
    frac += 1000000000;
    --secs;
  }
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[64];
  auto n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%09lldZ", (long long)frac);
  return buf;
}

int run_audit(const audit_cli& a, std::FILE* out) {
  auto& path = a.path;
  if (!log_exists(path))
    return audit_bad_input("cannot read '" + path +
                           "': " + std::strerror(ENOENT) +
                           " (and no rotated segments " + path + ".N)");
  if (parsed(a.verify))
    return cmd_verify(path, out);
  if (parsed(a.show))
    return cmd_show(path, out);
  auto q = query_of(a.filters.given());
  if (!q)
    return audit_bad_input("query: " + detail(q.error()));
  return cmd_query(path, *q, a.json, out);
}

} // namespace cohort::tools
