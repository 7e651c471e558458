// Where the runtime delivers the end of each work item.
#pragma once

#include <caf/typed_actor.hpp>

#include "messages/atoms.hpp"
#include "messages/work.hpp"

namespace cohort::actors {

/// Implemented by anything that submits work: each submitted item ends here
/// exactly once, with one of these two messages.
using client_sink = caf::typed_actor<
    /// The item ended with its result.
    caf::reacts_to<result_atom, work_result>,
    /// The item ended with a definitive error: rejected, or failed after
    /// admission.
    caf::reacts_to<failed_atom, uint64_t, caf::error>>;

} // namespace cohort::actors
