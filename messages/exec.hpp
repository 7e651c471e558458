// The messages of `cohort exec`'s sessions (docs/exec.md) between the exec
// socket's server and the balancer, which keeps the quota book.
#pragma once

#include <caf/atom.hpp>

namespace cohort {

using exec_atom = caf::atom_constant<caf::atom("exec")>;
using charge_atom = caf::atom_constant<caf::atom("charge")>;
using refund_atom = caf::atom_constant<caf::atom("refund")>;

} // namespace cohort
