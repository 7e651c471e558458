// Unix domain sockets of the node's local servers: the share socket
// (docs/objects.md) and the exec socket (docs/exec.md). Both take
// SOCK_SEQPACKET connections from other processes of the machine, know
// each peer by its credentials, and watch its process through a pidfd, so
// that what a killed process held is reclaimed.
#pragma once

#include <sys/types.h>

#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace cohort::ipc {

/// A listening SOCK_SEQPACKET socket at `path`, non-blocking and
/// close-on-exec, with permissions `mode`. A socket left there by a process
/// that died is replaced; a live one, or another file, is an error.
/// `what` names it in errors ("the share socket"). Errors: io_error,
/// invalid_arguments (a path too long for a Unix socket).
caf::expected<int> listen_seqpacket(const std::string& path,
                                    const std::string& what, mode_t mode);

/// A pidfd of process `pid`, readable once it exits; -1 where the kernel
/// refuses one (then a connection's hangup alone tells).
int open_pidfd(pid_t pid);

/// Whether the process of `pidfd` has exited, asked without waiting.
bool pid_exited(int pidfd);

/// io_error: `what` and strerror(errno).
caf::error io_failure(const std::string& what);

} // namespace cohort::ipc
