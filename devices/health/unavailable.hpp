// The monitor a vendor's health library gives when it cannot be used: the
// library is absent, fails to initialize, or its backend was not built.
// Internal to devices/health.
#pragma once

#include <string>
#include <utility>

#include "devices/health/health.hpp"

namespace cohort::devices::health {

/// Reports every GPU as unavailable, with the same reason. Immutable, so
/// thread-safe.
class unavailable_monitor final : public gpu_monitor {
public:
  unavailable_monitor(const char* library, std::string reason)
      : library_(library), reason_(std::move(reason)) {}

  const char* library() const override { return library_; }

  bool available() const override { return false; }

  std::string unavailable_reason() const override { return reason_; }

  gpu_sample sample(const std::string&) override {
    gpu_sample out;
    out.unavailable_reason = reason_;
    return out;
  }

  bool watch(const std::string&, std::function<void(gpu_event)>) override {
    return false;
  }

  void unwatch(const std::string&) override {
    // Nothing is ever watched.
  }

private:
  const char* library_;
  std::string reason_;
};

} // namespace cohort::devices::health
