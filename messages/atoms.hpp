// Every atom Cohort's actors exchange, in one place.
#pragma once

#include <caf/atom.hpp>

namespace cohort {

using submit_atom = caf::atom_constant<caf::atom("submit")>;
using admit_atom = caf::atom_constant<caf::atom("admit")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using result_atom = caf::atom_constant<caf::atom("result")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using record_atom = caf::atom_constant<caf::atom("record")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using info_atom = caf::atom_constant<caf::atom("info")>;
using up_atom = caf::atom_constant<caf::atom("up")>;
using down_atom = caf::atom_constant<caf::atom("down")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using complete_atom = caf::atom_constant<caf::atom("complete")>;
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using event_atom = caf::atom_constant<caf::atom("event")>;
using state_atom = caf::atom_constant<caf::atom("state")>;
using memory_atom = caf::atom_constant<caf::atom("memory")>;
using headroom_atom = caf::atom_constant<caf::atom("headroom")>;
using simulate_atom = caf::atom_constant<caf::atom("simulate")>;
using lease_atom = caf::atom_constant<caf::atom("lease")>;
using usage_atom = caf::atom_constant<caf::atom("usage")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using health_atom = caf::atom_constant<caf::atom("health")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using offline_atom = caf::atom_constant<caf::atom("offline")>;
using online_atom = caf::atom_constant<caf::atom("online")>;
using remove_atom = caf::atom_constant<caf::atom("remove")>;
using move_atom = caf::atom_constant<caf::atom("move")>;
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using add_atom = caf::atom_constant<caf::atom("add")>;
using crash_atom = caf::atom_constant<caf::atom("crash")>;
using alerts_atom = caf::atom_constant<caf::atom("alerts")>;
using batch_atom = caf::atom_constant<caf::atom("batch")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using cancel_id_atom = caf::atom_constant<caf::atom("cancelid")>;
using halt_atom = caf::atom_constant<caf::atom("halt")>;
using watch_atom = caf::atom_constant<caf::atom("watch")>;
using device_atom = caf::atom_constant<caf::atom("device")>;
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;
using audit_atom = caf::atom_constant<caf::atom("audit")>;
using bundle_atom = caf::atom_constant<caf::atom("bundle")>;
using object_atom = caf::atom_constant<caf::atom("object")>;
using put_atom = caf::atom_constant<caf::atom("put")>;
using get_atom = caf::atom_constant<caf::atom("get")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using store_atom = caf::atom_constant<caf::atom("store")>;
using read_atom = caf::atom_constant<caf::atom("read")>;
using drop_atom = caf::atom_constant<caf::atom("drop")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using fault_atom = caf::atom_constant<caf::atom("fault")>;
using launched_atom = caf::atom_constant<caf::atom("launched")>;
using code_atom = caf::atom_constant<caf::atom("code")>;
using jobs_atom = caf::atom_constant<caf::atom("jobs")>;
using trace_atom = caf::atom_constant<caf::atom("trace")>;
using heat_atom = caf::atom_constant<caf::atom("heat")>;

} // namespace cohort
