#include "audit/segment_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <string_view>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit/audit_log.hpp"

namespace cohort::audit::detail {

std::string io_failure(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::string file_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The segments of `path` with their numbers, oldest first.
std::vector<std::pair<uint64_t, std::string>>
numbered_segments(const std::string& path) {
  std::vector<std::pair<uint64_t, std::string>> out;
  auto dir = dir_name(path);
  auto prefix = file_name(path) + ".";
  struct closer {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, closer> d{::opendir(dir.c_str())};
  if (!d)
    return out;
  while (auto* e = ::readdir(d.get())) {
    std::string_view name{e->d_name};
    if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix)
      continue;
    auto digits = name.substr(prefix.size());
    if (digits.size() > 18 || digits.front() == '0' ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.emplace_back(std::stoull(std::string{digits}),
                     path + "." + std::string{digits});
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Makes a created, renamed or removed file's name durable.
void sync_dir(const std::string& path) {
  int fd = ::open(dir_name(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return;
  ::fsync(fd);
  ::close(fd);
}

mapped_file::mapped_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = io_failure("cannot open");
    return;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    error = io_failure("cannot stat");
  } else if (st.st_size > 0) {
    size = size_t(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      error = io_failure("cannot map");
      size = 0;
    } else {
      data = static_cast<const uint8_t*>(p);
    }
  }
  ::close(fd);
}

mapped_file::~mapped_file() {
  if (data != nullptr)
    ::munmap(const_cast<uint8_t*>(data), size);
}

} // namespace cohort::audit::detail

namespace cohort::audit {

std::vector<std::string> audit_segments(const std::string& path) {
  std::vector<std::string> out;
  for (auto& [n, p] : detail::numbered_segments(path))
    out.push_back(std::move(p));
  return out;
}

} // namespace cohort::audit
