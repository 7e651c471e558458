// Cohort's one error enum (include/cohort/errc.hpp), registered with CAF
// under the category "cohort".
#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

#include "cohort/errc.hpp"

namespace cohort {

/// The atom under which the error category is registered.
inline constexpr caf::atom_value errc_category = caf::atom("cohort");

/// Wraps `x` into a CAF error without detail.
caf::error make_error(errc x);

/// Wraps `x` into a CAF error with a human-readable detail.
caf::error make_error(errc x, std::string detail);

/// Returns the errc of `err`, or none if it belongs to another category.
errc code_of(const caf::error& err);

/// Whether `code` speaks of a fault of the device (lost, a kernel fault or
/// timeout, a poisoned context), as opposed to a limit a tenant met there
/// or a full device: such failures count against its circuit, and an actor
/// that ends with one ended on a fault of its device.
bool is_device_fault(errc code);

/// Renders any error as "name: detail" without needing an actor system.
std::string describe(const caf::error& err);

/// The detail of `err` alone (its message without the code's name), to
/// wrap into another message; describe(err) when it has none.
std::string detail_of(const caf::error& err);

/// unknown_tenant for `tenant`, saying that grants are default-deny; `where`
/// (a device, say) prefixes the message when given.
caf::error no_grant(const std::string& tenant, const std::string& where = {});

} // namespace cohort
