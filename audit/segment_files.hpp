// The files of an audit log, internal to the audit library: its numbered
// segments (PATH.1, PATH.2, ...), durable directory entries, and a file
// mapped read-only for verification.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cohort::audit::detail {

/// `what` and the text of errno.
std::string io_failure(const std::string& what);

std::string file_name(const std::string& path);

std::string dir_name(const std::string& path);

/// The segments of `path` with their numbers, oldest first.
std::vector<std::pair<uint64_t, std::string>>
numbered_segments(const std::string& path);

/// Makes a created, renamed or removed file's name durable.
void sync_dir(const std::string& path);

/// A whole file, mapped read-only.
struct mapped_file {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::string error;

  explicit mapped_file(const std::string& path);
  ~mapped_file();

  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
};

} // namespace cohort::audit::detail
