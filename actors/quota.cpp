#include "actors/quota.hpp"

#include <caf/all.hpp>

#include "messages/errc.hpp"

namespace cohort::actors {

namespace {

using self_ptr = quota_actor::stateful_pointer<quota_state>;

void audit(self_ptr self, audit_event ev) {
  auto& st = self->state;
  ev.time_ns = wall_clock_ns();
  st.audit.add(self, std::move(ev));
}

void reject(self_ptr self, const work_item& item, client_sink& sink,
            caf::error err) {
  auto& st = self->state;
  ++st.counters.rejected;
  ++st.counters.rejected_by_reason[to_string(code_of(err))];
  audit(self, {audit_kind::rejected, item.tenant, item.id, "",
               std::string{kernels::name(item.kernel)}, describe(err), 0});
  self->send(sink, failed_atom::value, item.id, std::move(err));
}

// Checks one grant entry against the catalog and devices.
caf::error compile_one(const pb::TenantGrant& g,
                       const std::vector<device_info>& devices,
                       tenant_policy& out) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::malformed_config,
                      "grant for tenant '" + g.tenant() + "': " + what);
  };
  out.tenant = g.tenant();
  for (auto& k : g.kernels()) {
    if (k == "*") {
      for (auto id : kernels::all_kernels)
        out.kernel_mask |= 1u << static_cast<uint32_t>(id);
    } else if (auto id = kernels::parse_kernel(k)) {
      out.kernel_mask |= 1u << static_cast<uint32_t>(*id);
    } else {
      return bad("unknown kernel '" + k + "'");
    }
  }
  for (auto& d : g.devices()) {
    uint64_t mask = 0;
    for (size_t i = 0; i < devices.size(); ++i)
      if (d == "*" || d == devices[i].name || d == to_string(devices[i].kind))
        mask |= uint64_t{1} << i;
    if (mask == 0)
      return bad("unknown device '" + d + "'");
    out.device_mask |= mask;
  }
  if (out.kernel_mask == 0)
    return bad("grants no kernel (default-deny: list kernels or \"*\")");
  if (out.device_mask == 0)
    return bad("grants no device (default-deny: list devices or \"*\")");
  if (g.max_inflight() > 0)
    out.max_inflight = g.max_inflight();
  out.memory_quota = g.memory_quota_bytes();
  return caf::none;
}

} // namespace

caf::expected<std::vector<tenant_policy>>
compile_grants(const pb::RuntimeConfig& cfg,
               const std::vector<device_info>& devices) {
  std::vector<tenant_policy> out;
  for (auto& g : cfg.tenant()) {
    if (g.tenant().empty())
      return make_error(errc::malformed_config, "a grant has no tenant name");
    for (auto& p : out)
      if (p.tenant == g.tenant())
        return make_error(errc::malformed_config,
                          "tenant '" + g.tenant() + "' is granted twice");
    tenant_policy p;
    if (auto err = compile_one(g, devices, p))
      return err;
    out.push_back(std::move(p));
  }
  return out;
}

quota_actor::behavior_type
quota_impl(quota_actor::stateful_pointer<quota_state> self,
           std::vector<tenant_policy> policies, balancer_actor balancer,
           audit_actor audit_dest) {
  auto& st = self->state;
  for (auto& p : policies)
    st.policies.emplace(p.tenant, p);
  st.balancer = std::move(balancer);
  st.audit = audit_buffer{std::move(audit_dest)};
  return {
      [=](submit_atom, work_item& item, client_sink& sink) {
        auto& st = self->state;
        if (st.closed)
          return reject(
              self, item, sink,
              make_error(errc::shutting_down, "the runtime is stopping"));
        auto p = st.policies.find(item.tenant);
        if (p == st.policies.end())
          return reject(
              self, item, sink,
              make_error(errc::unknown_tenant,
                         "tenant '" + item.tenant +
                             "' has no grant (grants are default-deny)"));
        auto raw = static_cast<uint8_t>(item.kernel);
        if (!kernels::is_known(raw))
          return reject(self, item, sink,
                        make_error(errc::unknown_kernel,
                                   "kernel id " + std::to_string(raw) +
                                       " is not in the catalog"));
        auto& pol = p->second;
        for (size_t i = 0; i <= item.then.size(); ++i) {
          auto k = i == 0 ? item.kernel : item.then[i - 1].kernel;
          if (!kernels::is_known(static_cast<uint8_t>(k)))
            return reject(
                self, item, sink,
                make_error(errc::unknown_kernel, "chained kernel id " +
                                                     std::to_string(int(k)) +
                                                     " is not in the catalog"));
          if (!(pol.kernel_mask & (1u << static_cast<uint8_t>(k))))
            return reject(self, item, sink,
                          make_error(errc::not_granted,
                                     "tenant '" + item.tenant +
                                         "' is not granted kernel " +
                                         std::string{kernels::name(k)}));
        }
        if (auto why = validate_item(item); !why.empty())
          return reject(self, item, sink,
                        make_error(errc::invalid_arguments, std::move(why)));
        auto& use = st.used[item.tenant];
        if (use.inflight >= pol.max_inflight)
          return reject(self, item, sink,
                        make_error(errc::over_inflight_quota,
                                   "tenant '" + item.tenant + "' has " +
                                       std::to_string(use.inflight) +
                                       " items in flight, its limit is " +
                                       std::to_string(pol.max_inflight)));
        uint64_t bytes = item_bytes(item);
        if (pol.memory_quota > 0 && use.bytes + bytes > pol.memory_quota)
          return reject(
              self, item, sink,
              make_error(errc::over_memory_quota,
                         "tenant '" + item.tenant + "' would hold " +
                             std::to_string(use.bytes + bytes) +
                             " bytes of device memory, its quota is " +
                             std::to_string(pol.memory_quota)));
        ++use.inflight;
        use.bytes += bytes;
        ++st.counters.admitted;
        audit(self, {audit_kind::admitted, item.tenant, item.id, "",
                     std::string{kernels::name(item.kernel)},
                     std::to_string(bytes) + " bytes", 0});
        self->send(st.balancer, admit_atom::value, ++st.next_ticket,
                   std::move(item), std::move(sink), pol.device_mask, bytes);
      },
      [=](release_atom, const std::string& tenant, uint64_t bytes) {
        auto& use = self->state.used[tenant];
        if (use.inflight > 0)
          --use.inflight;
        use.bytes -= std::min(use.bytes, bytes);
      },
      [=](stats_atom) {
        auto out = self->state.counters;
        for (auto& [tenant, use] : self->state.used)
          out.inflight[tenant] = use.inflight;
        return out;
      },
      [=](flush_atom) {
        self->state.audit.flush(self);
        return true;
      },
      [=](down_atom) {
        self->state.closed = true;
        return true;
      },
      [=](tick_atom) { self->state.audit.on_tick(self); },
  };
}

} // namespace cohort::actors
