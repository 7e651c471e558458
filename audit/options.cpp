// The audit section of a runtime config, checked and compiled into the
// log's options.
#include "audit/audit_log.hpp"
#include "audit/record_format.hpp"
#include "messages/cohort.pb.h"
#include "messages/errc.hpp"

namespace cohort::audit {

using namespace detail;

const char* to_string(audit_fsync x) {
  switch (x) {
  case audit_fsync::every_batch:
    return "every_batch";
  case audit_fsync::interval:
    return "interval";
  case audit_fsync::on_flush_only:
    return "on_flush_only";
  case audit_fsync::never:
    return "never";
  }
  return "unknown";
}

caf::expected<audit_options> audit_options_of(const pb::RuntimeConfig& cfg) {
  auto bad = [](const std::string& what) {
    return make_error(errc::malformed_config, "audit: " + what);
  };
  audit_options out;
  if (cfg.audit_batch() > max_audit_batch)
    return bad("audit_batch is " + std::to_string(cfg.audit_batch()) +
               ", at most " + std::to_string(max_audit_batch));
  if (cfg.audit_batch() > 0)
    out.batch = cfg.audit_batch();
  auto& a = cfg.audit();
  switch (a.fsync()) {
  case pb::FSYNC_EVERY_BATCH:
    out.fsync = audit_fsync::every_batch;
    break;
  case pb::FSYNC_INTERVAL:
    out.fsync = audit_fsync::interval;
    break;
  case pb::FSYNC_ON_FLUSH_ONLY:
    out.fsync = audit_fsync::on_flush_only;
    break;
  case pb::FSYNC_NEVER:
    out.fsync = audit_fsync::never;
    break;
  default:
    return bad("fsync is " + std::to_string(int(a.fsync())) +
               ", not one of FSYNC_EVERY_BATCH, FSYNC_INTERVAL, "
               "FSYNC_ON_FLUSH_ONLY, FSYNC_NEVER");
  }
  if (a.fsync_interval_ms() > 0 && a.fsync() != pb::FSYNC_INTERVAL)
    return bad("fsync_interval_ms is set but fsync is " +
               pb::AuditFsync_Name(a.fsync()) +
               "; it applies to FSYNC_INTERVAL only");
  if (a.fsync_interval_ms() > 600000)
    return bad("fsync_interval_ms is " + std::to_string(a.fsync_interval_ms()) +
               ", at most 600000");
  if (a.fsync_interval_ms() > 0)
    out.fsync_interval = std::chrono::milliseconds{a.fsync_interval_ms()};
  if (a.rotate_bytes() > 0 && a.rotate_bytes() < min_rotate_bytes)
    return bad("rotate_bytes is " + std::to_string(a.rotate_bytes()) +
               ", at least " + std::to_string(min_rotate_bytes) +
               " (or 0: never rotate)");
  if (a.keep_files() > 0 && a.rotate_bytes() == 0)
    return bad("keep_files is " + std::to_string(a.keep_files()) +
               " but rotate_bytes is 0: nothing rotates, so there are no "
               "segments to keep");
  out.rotate_bytes = a.rotate_bytes();
  out.keep_files = a.keep_files();
  if (a.on_write_failure() != pb::AUDIT_FAIL_CLOSED &&
      a.on_write_failure() != pb::AUDIT_KEEP_RUNNING)
    return bad("on_write_failure is " +
               std::to_string(int(a.on_write_failure())) +
               ", not AUDIT_FAIL_CLOSED (0) or AUDIT_KEEP_RUNNING (1)");
  if (a.max_unwritten_mib() > 4096)
    return bad("max_unwritten_mib is " + std::to_string(a.max_unwritten_mib()) +
               ", at most 4096");
  if (a.max_unwritten_mib() > 0)
    out.max_unwritten_bytes = uint64_t{a.max_unwritten_mib()} << 20;
  return out;
}

} // namespace cohort::audit
