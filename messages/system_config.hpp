// The one place where Cohort's message types and error category meet CAF.
#pragma once

#include <caf/actor_system_config.hpp>

namespace cohort {

/// Registers every Cohort message type and the "cohort" error category on
/// `cfg`.
void register_types(caf::actor_system_config& cfg);

/// An actor system config with Cohort's types registered.
class system_config : public caf::actor_system_config {
public:
  system_config();
};

} // namespace cohort
