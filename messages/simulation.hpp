// A dry run of an allocation plan: the steps asked for and what would happen
// to each, against the grants, quotas, reservations and device memory of a
// runtime (plain C++ form of `cohort.pb.AllocationPlan`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace cohort {

/// One allocation, or the free of an earlier one.
struct plan_step {
  std::string tenant;
  std::string device;
  uint64_t bytes = 0;
  /// Optional: the kernel the memory is for (its grant is checked).
  std::string kernel;
  std::string label;
  /// When set, frees the allocation with this label instead.
  std::string free;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, plan_step& x) {
  return f(caf::meta::type_name("plan_step"), x.tenant, x.device, x.bytes,
           x.kernel, x.label, x.free);
}

/// A plan; `from_now` starts from the runtime's current usage instead of an
/// idle runtime.
struct allocation_plan {
  std::string name;
  std::vector<plan_step> steps;
  bool from_now = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, allocation_plan& x) {
  return f(caf::meta::type_name("allocation_plan"), x.name, x.steps,
           x.from_now);
}

/// What would happen to one step.
struct step_outcome {
  bool ok = false;
  /// The error's name ("over_memory_quota", "out_of_memory", ...) and text;
  /// empty when ok.
  std::string code;
  std::string detail;
  /// Soft: a quota or limit refused it (the tenant's policy would apply);
  /// hard: the device could not hold it.
  bool soft = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_outcome& x) {
  return f(caf::meta::type_name("step_outcome"), x.ok, x.code, x.detail,
           x.soft);
}

/// One device at the end of a dry run.
struct simulated_device {
  std::string name;
  uint64_t capacity = 0;
  uint64_t limit = 0;
  uint64_t used = 0;
  uint64_t peak_used = 0;
  /// The pool: bytes held from the device, its largest free block and its
  /// fragmentation at the peak.
  uint64_t held = 0;
  uint64_t largest_free = 0;
  double fragmentation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, simulated_device& x) {
  return f(caf::meta::type_name("simulated_device"), x.name, x.capacity,
           x.limit, x.used, x.peak_used, x.held, x.largest_free,
           x.fragmentation);
}

/// The dry run's answer.
struct simulation_report {
  std::string name;
  std::vector<step_outcome> steps;
  std::vector<simulated_device> devices;
  /// Per tenant: peak device memory during the plan.
  std::vector<std::pair<std::string, uint64_t>> tenant_peaks;

  /// True when every step would succeed.
  bool ok() const {
    for (auto& s : steps)
      if (!s.ok)
        return false;
    return true;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, simulation_report& x) {
  return f(caf::meta::type_name("simulation_report"), x.name, x.steps,
           x.devices, x.tenant_peaks);
}

} // namespace cohort
