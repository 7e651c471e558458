// libFuzzer target: a secret file (--token-file, network.token_file,
// network.passphrase_file) as read_secret_file reads it, from a regular
// file in memory. Whatever the bytes, the answer is a secret that holds the
// promises of messages/secret_file.hpp, or a refusal that names the door.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "messages/errc.hpp"
#include "messages/secret_file.hpp"

using namespace cohort;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = ::memfd_create("secret", MFD_CLOEXEC);
  if (fd < 0)
    std::abort();
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size))
    std::abort();
  auto path = "/proc/self/fd/" + std::to_string(fd);
  auto s = read_secret_file("--token-file", path, errc::invalid_arguments);
  if (!s) {
    if (detail_of(s.error()).rfind("--token-file: ", 0) != 0)
      std::abort();
    return 0;
  }
  if (size > secret_file_max_bytes || s->empty() ||
      s->size() > secret_max_chars)
    std::abort();
  std::string text{reinterpret_cast<const char*>(data), size};
  // The secret is the first line's, with no blank at either end.
  if (text.find(*s) == std::string::npos || text.find('\n') < text.find(*s) ||
      s->front() == ' ' || s->back() == ' ' || s->front() == '\t' ||
      s->back() == '\t')
    std::abort();
  for (unsigned char c : *s)
    if (c < 0x20 || c == 0x7f)
      std::abort();
  return 0;
}
