#include "actors/quota.hpp"

#include <caf/all.hpp>

#include "quota/simulation.hpp"
#include "messages/errc.hpp"

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
  };
}

} // namespace cohort::actors
