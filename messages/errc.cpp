#include "messages/errc.hpp"

#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace cohort {

std::string to_string(errc x) {
  switch (x) {
  case errc::none:
    return "none";
  case errc::unknown_kernel:
    return "unknown_kernel";
  case errc::invalid_arguments:
    return "invalid_arguments";
  case errc::unknown_tenant:
    return "unknown_tenant";
  case errc::not_granted:
    return "not_granted";
  case errc::over_inflight_quota:
    return "over_inflight_quota";
  case errc::over_memory_quota:
    return "over_memory_quota";
  case errc::out_of_memory:
    return "out_of_memory";
  case errc::device_lost:
    return "device_lost";
  case errc::kernel_fault:
    return "kernel_fault";
  case errc::kernel_timeout:
    return "kernel_timeout";
  case errc::no_device_available:
    return "no_device_available";
  case errc::retries_exhausted:
    return "retries_exhausted";
  case errc::malformed_config:
    return "malformed_config";
  case errc::malformed_pipeline:
    return "malformed_pipeline";
  case errc::io_error:
    return "io_error";
  case errc::audit_chain_broken:
    return "audit_chain_broken";
  case errc::shutting_down:
    return "shutting_down";
  case errc::invalid_fault:
    return "invalid_fault";
  case errc::memory_limit:
    return "memory_limit";
  case errc::invalid_free:
    return "invalid_free";
  case errc::over_rate_limit:
    return "over_rate_limit";
  case errc::unknown_device:
    return "unknown_device";
  case errc::invalid_transition:
    return "invalid_transition";
  case errc::context_poisoned:
    return "context_poisoned";
  case errc::device_offline:
    return "device_offline";
  case errc::device_restarted:
    return "device_restarted";
  case errc::duplicate_id:
    return "duplicate_id";
  case errc::queue_full:
    return "queue_full";
  case errc::cancelled:
    return "cancelled";
  case errc::timed_out:
    return "timed_out";
  case errc::audit_unavailable:
    return "audit_unavailable";
  case errc::kernel_error:
    return "kernel_error";
  case errc::bundle_refused:
    return "bundle_refused";
  case errc::object_lost:
    return "object_lost";
  case errc::unknown_item:
    return "unknown_item";
  case errc::over_fallback_budget:
    return "over_fallback_budget";
  }
  return "errc(" + std::to_string(static_cast<int>(x)) + ")";
}

caf::error make_error(errc x) {
  return {static_cast<uint8_t>(x), errc_category};
}

caf::error no_grant(const std::string& tenant, const std::string& where) {
  return make_error(errc::unknown_tenant,
                    (where.empty() ? "" : where + ": ") + "tenant '" + tenant +
                        "' has no grant (grants are default-deny)");
}

caf::error make_error(errc x, std::string detail) {
  return {static_cast<uint8_t>(x), errc_category,
          caf::make_message(std::move(detail))};
}

errc code_of(const caf::error& err) {
  if (!err || err.category() != errc_category)
    return errc::none;
  return static_cast<errc>(err.code());
}

bool is_device_fault(errc code) {
  switch (code) {
  case errc::device_lost:
  case errc::kernel_fault:
  case errc::kernel_timeout:
  case errc::context_poisoned:
    return true;
  default:
    return false;
  }
}

std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  std::string out;
  if (err.category() == errc_category)
    out = to_string(static_cast<errc>(err.code()));
  else if (err.category() == caf::atom("system"))
    out = caf::to_string(static_cast<caf::sec>(err.code()));
  else
    out = caf::to_string(err.category()) + "/" + std::to_string(err.code());
  auto& ctx = err.context();
  if (ctx.match_elements<std::string>())
    out += ": " + ctx.get_as<std::string>(0);
  else if (!ctx.empty())
    out += ": " + caf::to_string(ctx);
  return out;
}

std::string detail_of(const caf::error& err) {
  if (err && err.context().match_elements<std::string>())
    return err.context().get_as<std::string>(0);
  return describe(err);
}

} // namespace cohort
