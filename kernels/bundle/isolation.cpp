#include "kernels/bundle/isolation.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>
#include <thread>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

extern char** environ;

namespace cohort::kernels::bundle {

namespace {

using pb::BundleProbeEvent;

/// What the child may write back: its events and its standard error.
constexpr size_t max_report_bytes = 4 << 20;
constexpr size_t stderr_tail_bytes = 2048;
/// Descriptors the parent hands over are moved at least this high first,
/// so that placing them at 0, 1, 2, 3... in the child never overwrites one
/// not yet placed.
constexpr int high_fd = 256;

/// A descriptor closed when it goes out of scope.
struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  explicit fd_guard(int f) : fd(f) {}
  fd_guard(fd_guard&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  fd_guard& operator=(fd_guard&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// `bytes` in an anonymous file (memory_file) above high_fd.
std::optional<fd_guard> handed_file(const char* label, const std::string& bytes,
                                    std::string& why) {
  fd_guard made{memory_file(label, bytes, why)};
  if (made.fd < 0)
    return std::nullopt;
  fd_guard high{::fcntl(made.fd, F_DUPFD_CLOEXEC, high_fd)};
  if (high.fd < 0) {
    why = std::string{"cannot move a descriptor: "} + std::strerror(errno);
    return std::nullopt;
  }
  return high;
}

std::string read_file(int fd, size_t limit) {
  std::string out;
  auto end = ::lseek(fd, 0, SEEK_END);
  if (end <= 0)
    return out;
  out.resize(std::min(size_t(end), limit));
  auto n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? size_t(n) : 0);
  return out;
}

std::string stderr_tail(int fd) {
  auto end = ::lseek(fd, 0, SEEK_END);
  if (end <= 0)
    return {};
  auto from =
      end > off_t(stderr_tail_bytes) ? end - off_t(stderr_tail_bytes) : 0;
  std::string out(size_t(end - from), '\0');
  auto n = ::pread(fd, out.data(), out.size(), from);
  out.resize(n > 0 ? size_t(n) : 0);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string{"SIG"} + abbrev
                           : "signal " + std::to_string(sig);
}

/// The child's outcome: how it ended, within the deadline or not.
struct child_end {
  bool timed_out = false;
  /// waitpid's status; unknown when the child was reaped by someone else
  /// (SIGCHLD ignored).
  std::optional<int> status;
};

child_end wait_for(pid_t pid, std::chrono::milliseconds timeout) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + timeout;
  auto pause = std::chrono::microseconds{200};
  for (;;) {
    int st = 0;
    auto r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return {false, st};
    if (r < 0 && errno != EINTR)
      return {false, std::nullopt};
    if (clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      return {true, std::nullopt};
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds{10'000});
  }
}

/// The probe's request and the descriptors it names, in the order they are
/// placed in the child (from 3 up).
struct request {
  pb::BundleProbe msg;
  std::vector<fd_guard> fds;
};

std::optional<refused> make_request(const checked_bundle& b,
                                    const isolation& iso, request& req) {
  // One object per blob the kernels use, with every symbol asked of it.
  std::map<std::string, pb::BundleProbe::Object*> by_path;
  auto object = [&](const std::string& path) {
    auto& o = by_path[path];
    if (o == nullptr) {
      o = req.msg.add_object();
      o->set_path(path);
      for (auto& blob : b.manifest.blob())
        if (blob.path() == path)
          o->set_kind(blob.kind());
    }
    return o;
  };
  for (auto& k : b.manifest.kernel()) {
    object(k.cpu_blob())->add_symbol(k.cpu_symbol());
    for (auto* g : {&k.cuda(), &k.hip()})
      if (!g->blob().empty())
        object(g->blob())->add_symbol(g->function());
  }
  for (auto& o : *req.msg.mutable_object()) {
    std::string why;
    auto label = "cohort-probe:" + o.path();
    auto f = handed_file(label.c_str(), b.blobs.at(o.path()), why);
    if (!f)
      return refused{refusal::load_failed,
                     "cannot hand blob '" + o.path() +
                         "' to the isolated load: " + why};
    o.set_fd(3 + int(req.fds.size()));
    req.fds.push_back(std::move(*f));
  }
  for (auto& [vendor, path] : iso.plugins)
    (*req.msg.mutable_plugin())[vendor] = path;
  return std::nullopt;
}

std::string step_text(const BundleProbeEvent& e) {
  return "'" + e.path() + "' on " + e.device();
}

} // namespace

int memory_file(const char* label, const std::string& bytes, std::string& why) {
  int fd = ::memfd_create(label, MFD_CLOEXEC);
  if (fd < 0) {
    why = std::string{"memfd_create: "} + std::strerror(errno);
    return -1;
  }
  size_t put = 0;
  while (put < bytes.size()) {
    auto n = ::write(fd, bytes.data() + put, bytes.size() - put);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      why = std::string{"cannot write to memory: "} + std::strerror(errno);
      ::close(fd);
      return -1;
    }
    put += size_t(n);
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    why = std::string{"lseek: "} + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

std::variant<probe_report, refused> probe(const checked_bundle& b,
                                          const isolation& iso) {
  if (iso.helper.empty())
    return refused{refusal::load_failed,
                   std::string{"no "} + probe_program +
                       " to load it in isolation (searched: " +
                       (iso.searched.empty() ? "nowhere" : iso.searched) +
                       "; set COHORT_PLUGIN_PATH to the folder holding it)"};
  request req;
  if (auto no = make_request(b, iso, req))
    return *no;
  std::string why;
  auto in =
      handed_file("cohort-probe:request", req.msg.SerializeAsString(), why);
  auto out = handed_file("cohort-probe:report", {}, why);
  auto err = handed_file("cohort-probe:stderr", {}, why);
  if (!in || !out || !err)
    return refused{refusal::load_failed,
                   "cannot start the isolated load: " + why};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in->fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out->fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err->fd, 2);
  for (size_t i = 0; i < req.fds.size(); ++i)
    posix_spawn_file_actions_adddup2(&actions, req.fds[i].fd, 3 + int(i));
  posix_spawn_file_actions_addclosefrom_np(&actions, 3 + int(req.fds.size()));
  // Default signal dispositions and mask in the child, whatever the
  // embedding program set.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::string argv0 = iso.helper;
  char* argv[] = {argv0.data(), nullptr};
  pid_t pid = 0;
  int rc =
      ::posix_spawn(&pid, iso.helper.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0)
    return refused{refusal::load_failed,
                   "cannot start " + iso.helper + ": " + std::strerror(rc)};
  auto end = wait_for(pid, iso.timeout);

  // What the child said, event by event, up to where it stopped.
  auto bytes = read_file(out->fd, max_report_bytes);
  google::protobuf::io::ArrayInputStream stream{bytes.data(),
                                                int(bytes.size())};
  probe_report report;
  std::optional<BundleProbeEvent> open_step;
  std::optional<BundleProbeEvent> failed;
  std::set<std::string> answered;
  BundleProbeEvent e;
  bool clean_eof = false;
  // The parser merges into `e`: cleared before each event.
  for (e.Clear(); google::protobuf::util::ParseDelimitedFromZeroCopyStream(
           &e, &stream, &clean_eof);
       e.Clear()) {
    switch (e.kind()) {
    case BundleProbeEvent::STEP:
      open_step = e;
      break;
    case BundleProbeEvent::OK:
      open_step.reset();
      answered.insert(e.path());
      report.loaded.push_back(e.path() + " on " + e.device());
      break;
    case BundleProbeEvent::FAILED:
      open_step.reset();
      if (!failed)
        failed = e;
      break;
    case BundleProbeEvent::NOTE:
      answered.insert(e.path());
      report.notes.push_back(e.path() + ": " + e.text());
      break;
    default:
      break;
    }
  }
  auto at = open_step ? " while loading " + step_text(*open_step) : "";
  if (end.timed_out)
    return refused{refusal::load_hung, "the isolated load did not finish in " +
                                           std::to_string(iso.timeout.count()) +
                                           " ms" + at + "; it was killed"};
  if (failed)
    return refused{refusal::load_failed,
                   step_text(*failed) + ": " + failed->text()};
  auto tail = stderr_tail(err->fd);
  auto said = tail.empty() ? std::string{} : "; it wrote: " + tail;
  if (end.status && WIFSIGNALED(*end.status))
    return refused{refusal::load_crashed,
                   "the isolated load crashed (" +
                       signal_name(WTERMSIG(*end.status)) + ")" + at + said};
  if (end.status && WEXITSTATUS(*end.status) != 0)
    return refused{refusal::load_crashed,
                   "the isolated load exited with status " +
                       std::to_string(WEXITSTATUS(*end.status)) + at + said};
  if (open_step || !clean_eof)
    return refused{refusal::load_crashed,
                   "the isolated load stopped before it finished" + at + said};
  for (auto& o : req.msg.object())
    if (answered.count(o.path()) == 0)
      return refused{refusal::load_failed,
                     "the isolated load said nothing of '" + o.path() + "'" +
                         said};
  return report;
}

} // namespace cohort::kernels::bundle
