// One device's circuit breaker, as the balancer keeps it: it opens after too
// many launch failures in a window, lets a few probe items through once the
// open period is over, and closes again when they pass.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

#include "messages/stats.hpp"

namespace cohort::actors::balancer {

/// Thresholds of a circuit breaker.
struct circuit_config {
  /// Failures within `window` that open the circuit.
  uint32_t failures = 5;
  std::chrono::milliseconds window{10000};
  /// How long an open circuit refuses work before it probes.
  std::chrono::milliseconds open_for{500};
  /// Probe items that must pass, one after the other, to close it.
  uint32_t probes = 2;
};

/// Not thread-safe: lives in the balancer's state. Time is passed in, so
/// that tests drive it without sleeping.
class circuit_breaker {
public:
  using clock = std::chrono::steady_clock;

  circuit_breaker() = default;

  explicit circuit_breaker(circuit_config cfg) : cfg_(cfg) {
    // nop
  }

  /// The state at `now` (an open circuit whose period ended is half-open).
  circuit_state state(clock::time_point now);

  /// True while closed: the hot path needs no clock then.
  bool closed() const { return state_ == circuit_state::closed; }

  /// True if an item may be placed on the device now. In half-open state
  /// only `probes` items may be out at once.
  bool allows(clock::time_point now);

  /// An item was placed on the device (counts probes in half-open state).
  void placed(clock::time_point now);

  /// An item placed on the device ended there with its result. Returns true
  /// if this closed the circuit.
  bool succeeded(clock::time_point now);

  /// A placement on the device failed (a kernel fault, a hard OOM, a hang,
  /// a loss). Returns true if this opened the circuit.
  bool failed(clock::time_point now);

  /// An item placed there moved on without an outcome (its probe slot is
  /// freed).
  void abandoned();

  /// When an open circuit starts probing.
  clock::time_point reopens_at() const { return open_until_; }

  const circuit_config& config() const { return cfg_; }

private:
  void open(clock::time_point now);

  circuit_config cfg_;
  circuit_state state_ = circuit_state::closed;
  std::deque<clock::time_point> failures_;
  clock::time_point open_until_{};
  uint32_t probes_out_ = 0;
  uint32_t probes_passed_ = 0;
};

} // namespace cohort::actors::balancer
