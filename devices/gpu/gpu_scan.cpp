// cohort-gpu-scan: lists the GPUs of this machine as a fresh process finds
// them, for a node's device rescan (devices/gpu/rescan.hpp). A GPU runtime
// lists its GPUs once per process, so a node that wants to know what
// appeared or left since it started asks a new process. Nothing is opened:
// each GPU's properties are read (and MIG instances listed through the
// health library), no context, stream or memory is made. The answer (a
// GpuScan) goes to standard output; the node kills this process after its
// timeout.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "devices/gpu/discover.hpp"
#include "ipc/child.hpp"
#include "messages/convert.hpp"
#include "messages/scan.pb.h"

int main(int argc, char** argv) {
  // Dies with the node; a crash in a driver leaves no core file behind.
  if (int status = cohort::ipc::enter_helper(
          argc, argv, "",
          "cohort-gpu-scan is started by a Cohort node to list the machine's "
          "GPUs afresh; it is not meant to be run by hand.");
      status >= 0)
    return status;

  namespace gpu = cohort::devices::gpu;
  auto found = gpu::discover({}, [](const std::string&) { return false; });
  cohort::pb::GpuScan scan;
  for (auto& p : found.probed) {
    auto* g = scan.add_gpu();
    g->set_vendor(p.vendor);
    g->set_ordinal(p.ordinal);
    g->set_visible(p.visible);
    *g->mutable_info() = cohort::to_proto(p.info);
  }
  for (auto& b : found.backends) {
    if (!b.note.empty())
      scan.add_note(b.vendor + ": " + b.note);
    if (b.listed)
      scan.add_listed(b.vendor);
    if (b.mig_listed)
      scan.add_mig_listed(b.vendor);
  }
  if (!scan.SerializeToFileDescriptor(1)) {
    std::fprintf(stderr, "cohort-gpu-scan: cannot write the answer\n");
    return 1;
  }
  // No destructors of the vendor libraries: the answer is written.
  std::fflush(nullptr);
  ::_exit(0);
}
