#include "actors/balancer/circuit_breaker.hpp"

namespace cohort::actors::balancer {

circuit_state circuit_breaker::state(clock::time_point now) {
  if (state_ == circuit_state::open && now >= open_until_) {
    state_ = circuit_state::half_open;
    probes_out_ = 0;
    probes_passed_ = 0;
  }
  return state_;
}

bool circuit_breaker::allows(clock::time_point now) {
  switch (state(now)) {
  case circuit_state::closed:
    return true;
  case circuit_state::open:
    return false;
  case circuit_state::half_open:
    return probes_out_ + probes_passed_ < cfg_.probes;
  }
  return false;
}

void circuit_breaker::placed(clock::time_point now) {
  if (state(now) == circuit_state::half_open)
    ++probes_out_;
}

bool circuit_breaker::succeeded(clock::time_point now) {
  if (state(now) != circuit_state::half_open)
    return false;
  if (probes_out_ > 0)
    --probes_out_;
  if (++probes_passed_ < cfg_.probes)
    return false;
  state_ = circuit_state::closed;
  failures_.clear();
  return true;
}

bool circuit_breaker::failed(clock::time_point now) {
  switch (state(now)) {
  case circuit_state::open:
    return false;
  case circuit_state::half_open:
    // A failed probe: back to open for another period.
    open(now);
    return true;
  case circuit_state::closed:
    break;
  }
  failures_.push_back(now);
  while (!failures_.empty() && now - failures_.front() > cfg_.window)
    failures_.pop_front();
  if (failures_.size() < cfg_.failures)
    return false;
  open(now);
  return true;
}

void circuit_breaker::abandoned() {
  if (state_ == circuit_state::half_open && probes_out_ > 0)
    --probes_out_;
}

void circuit_breaker::open(clock::time_point now) {
  state_ = circuit_state::open;
  open_until_ = now + cfg_.open_for;
  failures_.clear();
  probes_out_ = 0;
  probes_passed_ = 0;
}

} // namespace cohort::actors::balancer
