// Objects shared with other processes of the node (docs/objects.md,
// "Sharing across processes"): what an export grants, who attaches, and
// how the attached process maps the memory. These travel between the
// actors of one process only (a descriptor in `share_handle` is a number of
// this process).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include "messages/objects.hpp"

namespace cohort {

using export_atom = caf::atom_constant<caf::atom("export")>;
using unexport_atom = caf::atom_constant<caf::atom("unexport")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using detach_atom = caf::atom_constant<caf::atom("detach")>;
using share_atom = caf::atom_constant<caf::atom("share")>;

/// What an export lets the processes that hold its token do.
struct share_grant {
  /// Attach read-write (the attached process may write the object in
  /// place); read-only otherwise.
  bool write = false;
  /// Only processes of this user may attach; -1: the runtime's own user.
  int64_t uid = -1;
  /// At most this many attachments at once (0: no limit).
  uint32_t max_attached = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, share_grant& x) {
  return f(caf::meta::type_name("share_grant"), x.write, x.uid, x.max_attached);
}

/// The process at the other end of the share socket (SO_PEERCRED).
struct share_peer {
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, share_peer& x) {
  return f(caf::meta::type_name("share_peer"), x.pid, x.uid, x.gid);
}

/// How the attached process maps an object.
struct share_handle {
  /// "memfd" (a simulated GPU's memory, or a sealed snapshot of a host
  /// copy), "cuda_ipc" or "hip_ipc".
  std::string kind;
  /// memfd: a descriptor of this process that the receiver owns (and must
  /// close, or hand over); -1 otherwise.
  int32_t fd = -1;
  /// The vendor IPC handle (64 bytes) of the allocation holding it.
  std::vector<uint8_t> ipc;
  /// The object's offset in the region, and the region's size.
  uint64_t offset = 0;
  uint64_t region_bytes = 0;
  /// The device holding it ("sim0", "cuda0"; "host" for a snapshot) and,
  /// for real GPUs, its PCI bus id (the attaching process may number its
  /// GPUs differently).
  std::string device;
  std::string pci_bus_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, share_handle& x) {
  return f(caf::meta::type_name("share_handle"), x.kind, x.fd, x.ipc, x.offset,
           x.region_bytes, x.device, x.pci_bus_id);
}

/// An attachment the balancer granted.
struct attachment_info {
  uint64_t id = 0;
  object_info object;
  share_handle handle;
  bool writable = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, attachment_info& x) {
  return f(caf::meta::type_name("attachment_info"), x.id, x.object, x.handle,
           x.writable);
}

} // namespace cohort
