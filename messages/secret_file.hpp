// Files that hold a secret on their first line: the admin token of `cohort
// serve` and `cohort admin` (--token-file), and the network section's token
// and key passphrase files. Read the same way at every door, and bounded:
// what is not a regular file (a FIFO, /dev/zero, a directory) is refused
// without being read or waited on, and so is a file too large to be one.
#pragma once

#include <cstddef>
#include <string>

#include <caf/expected.hpp>

#include "cohort/errc.hpp"

namespace cohort {

/// The most bytes a secret file may have.
inline constexpr size_t secret_file_max_bytes = 64 * 1024;
/// The most characters its secret may have.
inline constexpr size_t secret_max_chars = 4096;

/// The first line of `path` without its line end and the blanks around it.
/// Refused with `code` and a message that starts with `what`: a path that
/// cannot be opened, anything but a regular file, a file over
/// secret_file_max_bytes, an empty or blank first line, a secret over
/// secret_max_chars or with a control character in it (it travels in an
/// HTTP header).
caf::expected<std::string> read_secret_file(const std::string& what,
                                            const std::string& path, errc code);

} // namespace cohort
