// How this process loads kernel bundles in isolation
// (kernels/bundle/isolation.hpp): the helper program found where the GPU
// plugins are looked for, and the plugins this process loaded.
#pragma once

#include <chrono>

#include "kernels/bundle/isolation.hpp"

namespace cohort::devices::gpu {

/// The helper in the first of plugin_dirs() that holds it, and every
/// plugin that loads here. Loads the plugins if nothing did yet.
kernels::bundle::isolation bundle_isolation(
    std::chrono::milliseconds timeout = kernels::bundle::default_probe_timeout);

} // namespace cohort::devices::gpu
