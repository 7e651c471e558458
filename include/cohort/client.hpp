// The client library of objects shared across processes (docs/objects.md,
// "Sharing across processes"): a process attaches to an object that a
// runtime on this node exported (runtime::share), through the runtime's
// share socket and with the export's token, and reads (or, when granted,
// writes) it where it lives: a simulated GPU's memory or a host snapshot
// through a memfd mapped here, a CUDA or HIP GPU's memory through the
// vendor's IPC handle. No copy is made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "cohort/cohort.hpp"

namespace cohort::client {

/// Where an attachment's memory is.
enum class memory_kind : uint8_t {
  /// Mapped into this process: data() is a host pointer (a simulated GPU's
  /// memory, or a snapshot of an object's host copy).
  host,
  /// On a GPU: data() is a device pointer of that vendor's runtime in this
  /// process, on the GPU with pci_bus_id().
  cuda,
  hip,
};

/// One attachment to a shared object. Move-only; it holds the object (the
/// runtime frees it only once every attachment and handle is gone) until
/// detach() or destruction, and the runtime reclaims it should this process
/// die first. Not thread-safe.
class attachment {
public:
  /// Attaches through the share socket at `socket_path` with `token`
  /// (read-write when `write`). Throws cohort::error: not_granted (an
  /// unknown or revoked token, another user's export, write under a
  /// read-only export, the export's limit of attachments reached),
  /// io_error (no runtime listens there; mapping failed), invalid_arguments
  /// (a device copy this process cannot open: no such GPU or runtime here),
  /// object_lost, shutting_down.
  static attachment attach(const std::string& socket_path,
                           const std::string& token, bool write = false);

  attachment(attachment&& other) noexcept;
  attachment& operator=(attachment&& other) noexcept;
  attachment(const attachment&) = delete;
  attachment& operator=(const attachment&) = delete;
  ~attachment();

  /// The attachment's id, and the object's id, tenant, type and size.
  uint64_t id() const;
  uint64_t object() const;
  const std::string& tenant() const;
  dtype type() const;
  size_t size() const;
  size_t bytes() const;

  memory_kind where() const;
  /// The device holding the copy it maps ("sim0", "cuda0"; "host" for a
  /// snapshot), and a real GPU's PCI bus id.
  const std::string& device() const;
  const std::string& pci_bus_id() const;
  bool writable() const;

  /// The object's first element: a host pointer (memory_kind::host) or a
  /// device pointer. Null once detached.
  const void* data() const;
  /// As data(), to write; throws cohort::error (not_granted) for a
  /// read-only attachment.
  void* mutable_data();

  /// The elements, for host memory; throws cohort::error
  /// (invalid_arguments) for device memory, another element type, or once
  /// detached.
  template <class T> std::span<const T> view() const {
    check_view(dtype_of<T>::value);
    return {static_cast<const T*>(data()), size()};
  }

  /// Unmaps the memory and ends the attachment; nothing once detached.
  void detach();
  bool attached() const;

  struct impl;

private:
  explicit attachment(std::unique_ptr<impl> p);
  void check_view(dtype t) const;
  std::unique_ptr<impl> impl_;
};

} // namespace cohort::client
