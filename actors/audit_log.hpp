// The audit log's earlier path: the log is the audit library
// (audit/audit_log.hpp, namespace cohort::audit); its names stay reachable
// from cohort::actors for code written against that path.
#pragma once

#include "audit/audit_log.hpp"

namespace cohort::actors {

using audit::audit_file;
using audit::audit_fsync;
using audit::audit_log;
using audit::audit_options;
using audit::audit_options_of;
using audit::audit_segments;
using audit::audit_verdict;
using audit::digest;
using audit::to_hex;

} // namespace cohort::actors
