// Loading a checked bundle: its CPU shared objects into the process, its
// kernels into the registry, all or none.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernels/bundle/bundle.hpp"
#include "kernels/bundle/isolation.hpp"
#include "kernels/kernel_args.hpp"

namespace cohort::kernels::bundle {

/// A bundle whose kernels are registered.
struct loaded_bundle {
  std::string name;
  std::string version;
  std::string key_id;
  std::string manifest_sha256;
  /// Its kernels' names and ids, in the manifest's order.
  std::vector<std::pair<std::string, kernel_id>> kernels;
  /// False when an earlier load of the same manifest had registered them.
  bool fresh = true;
  /// What loading it in isolation checked (empty when not fresh).
  probe_report probed;
};

/// Loads `b`'s code in isolation first (probe, as `iso` says); then its
/// shared objects (from memory: the bytes whose digests were checked,
/// never the files again) and registers its kernels. A bundle loaded
/// before (the same manifest) gets its kernels back without loading
/// anything. Thread-safe.
std::variant<loaded_bundle, refused> load_checked(const checked_bundle& b,
                                                  const isolation& iso);

/// check_bundle, then load_checked.
std::variant<loaded_bundle, refused> load_bundle(const std::string& dir,
                                                 const trust_store& trust,
                                                 const isolation& iso);

} // namespace cohort::kernels::bundle
