#include "messages/secret_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "messages/errc.hpp"

namespace cohort {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a file";
}

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\r';
}

} // namespace

caf::expected<std::string>
read_secret_file(const std::string& what, const std::string& path, errc code) {
  auto refuse = [&](const std::string& why) {
    return make_error(code, what + ": '" + path + "' " + why);
  };
  // O_NONBLOCK: a FIFO named here must not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return make_error(code, what + ": cannot read '" + path +
                                "': " + std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_it{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return refuse(std::string{"cannot be read: "} + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return refuse(std::string{"is not a regular file; it is "} +
                  kind_of(st.st_mode));
  auto too_large = [&] {
    return refuse("has more than " + std::to_string(secret_file_max_bytes) +
                  " bytes; a secret file holds the secret on its first line");
  };
  if (size_t(st.st_size) > secret_file_max_bytes)
    return too_large();
  // Read at most one byte past the limit: a file that grows meanwhile is
  // refused, never read without end.
  std::string text(secret_file_max_bytes + 1, '\0');
  size_t have = 0;
  while (have < text.size()) {
    auto n = ::read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return refuse(std::string{"cannot be read: "} + std::strerror(errno));
    if (n == 0)
      break;
    have += size_t(n);
  }
  if (have > secret_file_max_bytes)
    return too_large();
  text.resize(have);
  auto line = text.substr(0, text.find('\n'));
  while (!line.empty() && blank(line.back()))
    line.pop_back();
  size_t lead = 0;
  while (lead < line.size() && blank(line[lead]))
    ++lead;
  line.erase(0, lead);
  if (line.empty())
    return refuse("is empty or blank on its first line");
  if (line.size() > secret_max_chars)
    return refuse("holds a secret of " + std::to_string(line.size()) +
                  " characters on its first line, at most " +
                  std::to_string(secret_max_chars));
  for (size_t i = 0; i < line.size(); ++i) {
    auto c = static_cast<unsigned char>(line[i]);
    if (c < 0x20 || c == 0x7f)
      return refuse("holds a control character (byte " + std::to_string(c) +
                    " at column " + std::to_string(i + 1) +
                    ") in its first line");
  }
  return line;
}

} // namespace cohort
