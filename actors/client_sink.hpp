// Where the runtime delivers the end of each work item.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
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

/// A sink for clients that stream many items: the ends of its items arrive
/// coalesced, several per message, in the order they happened. The
/// balancer sends what ended while it handled its current messages as one
/// batch (at most max_end_batch ends each). Every submitted item ends here
/// exactly once.
using batch_sink =
    caf::typed_actor<caf::reacts_to<result_atom, std::vector<work_end>>>;

/// The most ends one message to a batch_sink carries.
inline constexpr size_t max_end_batch = 1024;

/// The most items one batched submit may carry: the balancer admits them
/// in one go, so a larger batch would hold up every other client. Each
/// item of a larger batch ends with invalid_arguments.
inline constexpr size_t max_submit_batch = 65536;

/// Where an item's end goes, as the balancer keeps it: a client_sink (one
/// message per end) or a batch_sink (ends coalesced).
struct end_sink {
  caf::actor handle;
  bool batched = false;

  end_sink() = default;

  end_sink(const client_sink& sink) // NOLINT: implicit on purpose
      : handle(caf::actor_cast<caf::actor>(sink)) {
    // nop
  }

  end_sink(const batch_sink& sink) // NOLINT: implicit on purpose
      : handle(caf::actor_cast<caf::actor>(sink)), batched(true) {
    // nop
  }

  explicit operator bool() const { return static_cast<bool>(handle); }

  caf::actor_addr address() const { return handle.address(); }

  bool operator==(const end_sink& other) const {
    return handle == other.handle;
  }
};

} // namespace cohort::actors
