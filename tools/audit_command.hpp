// `cohort audit verify|show|query`: reads an audit log (its rotated segments,
// oldest first, then the active file) and verifies its hash chain as it goes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/cohort.pb.h"
#include "tools/cli.hpp"

namespace cohort::tools {

/// Which records `cohort audit query` prints: those matching every filter
/// set. Time bounds are nanoseconds since the epoch, `since` inclusive,
/// `until` exclusive.
struct audit_query {
  std::optional<std::string> tenant;
  std::optional<uint64_t> work_id;
  std::optional<std::string> device;
  std::optional<pb::AuditKind> kind;
  std::optional<int64_t> since;
  std::optional<int64_t> until;

  bool matches(const pb::AuditRecord& r) const;
};

/// Parses a time: nanoseconds since the epoch ("1795000000000000000") or an
/// ISO-8601 UTC time ("2026-11-24T10:00:00Z", up to nine fractional digits
/// of seconds). Errors are invalid_arguments.
caf::expected<int64_t> parse_time(const std::string& text);

/// An audit kind by name, in any case ("completed", "DEVICE_EVENT"), or by
/// number. Errors are invalid_arguments listing the names.
caf::expected<pb::AuditKind> parse_kind(const std::string& text);

/// `time_ns` as ISO-8601 UTC with nanoseconds
/// ("2026-11-24T10:00:00.000000001Z").
std::string iso_time(int64_t time_ns);

/// `cohort audit verify|show|query` as CLI11 parsed it.
struct audit_cli {
  CLI::App* verify = nullptr;
  CLI::App* show = nullptr;
  CLI::App* query = nullptr;
  std::string path;
  /// --tenant, --work-id, --device, --kind, --since, --until.
  string_options filters;
  bool json = false;
};

/// Adds `audit` and its subcommands to `parent`, filling `a`.
void add_audit_command(CLI::App& parent, audit_cli& a);

/// Runs the parsed command, printing to `out` and errors to stderr.
/// Returns 0 when the chain verifies, 1 when it does not, 2 for bad input.
int run_audit(const audit_cli& a, std::FILE* out);

/// Parses and runs `cohort audit ARGS` (ARGS without "audit").
int run_audit(const std::vector<std::string>& args, std::FILE* out);

} // namespace cohort::tools
