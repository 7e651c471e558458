#include "actors/quota.hpp"

#include <caf/all.hpp>

#include "messages/errc.hpp"
#include "quota/simulation.hpp"

namespace cohort::actors {

quota_actor::behavior_type
quota_impl(quota_actor::stateful_pointer<quota_state> self, quota_lease lease,
           balancer_actor balancer) {
  self->state.lease = std::move(lease);
  self->state.balancer = std::move(balancer);
  return {
      // The balancer keeps the live book: what depends on use now is its
      // to answer.
      [=](headroom_atom, std::string& tenant) {
        return self->delegate(self->state.balancer, headroom_atom::value,
                              std::move(tenant));
      },
      [=](simulate_atom, allocation_plan& plan) {
        return self->delegate(self->state.balancer, simulate_atom::value,
                              std::move(plan));
      },
      [=](lease_atom) { return self->state.lease; },
      [=](lease_atom, quota_lease& lease) {
        self->state.lease = lease;
        self->send(self->state.balancer, lease_atom::value, std::move(lease));
        return true;
      },
      [=](add_atom, device_info& info, quota_lease& lease,
          devices::memory::pool_options& pool) -> caf::result<uint32_t> {
        auto rp = self->make_response_promise<uint32_t>();
        self->request(self->state.balancer, caf::infinite, add_atom::value,
                      std::move(info), lease, std::move(pool))
            .then(
                [=](uint32_t index) mutable {
                  self->state.lease = std::move(lease);
                  rp.deliver(index);
                },
                [=](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
  };
}

} // namespace cohort::actors
