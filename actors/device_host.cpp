#include "actors/device_host.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include "actors/device_actor.hpp"
#include "actors/runtime.hpp"
#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "devices/gpu/discover.hpp"
#include "devices/memory/pool_resource.hpp"
#include "devices/sim/sim_device.hpp"
#include "ipc/stop_signals.hpp"
#include "messages/errc.hpp"
#include "messages/network.hpp"
#include "messages/system_config.hpp"

extern char** environ;

namespace cohort::actors {

// -- the node's stand-in ------------------------------------------------------

hosted_device::hosted_device(device_info info, pb::HostSpec spec)
    : device(std::move(info)), spec_(std::move(spec)) {
  // nop
}

hosted_device::hosted_device(device_info info, endpoint where, uint32_t index)
    : device(std::move(info)), where_(std::move(where)), remote_index_(index) {
  // nop
}

hosted_device::~hosted_device() {
  if (events_)
    events_->leave(this);
}

void hosted_device::watch_health(
    std::shared_ptr<devices::health::gpu_monitor> monitor,
    std::shared_ptr<devices::health::gpu_watch> events, uint32_t gpu_instance) {
  // A remote host's GPU is on another machine: its bus id names nothing
  // here.
  if (!monitor || monitor_ || remote() || info().pci_bus_id.empty())
    return;
  monitor_ = std::move(monitor);
  if (!events)
    return;
  events_ = std::move(events);
  // From the library's event thread; the counters are atomic. An Xid that
  // means the GPU fell off the bus (79) comes as a loss, and counts too.
  events_->join(this, gpu_instance,
                [this](const devices::health::gpu_event& ev) {
                  if (ev.xid != 0)
                    note_xid(ev.xid);
                });
}

devices::health::gpu_sample hosted_device::telemetry() const {
  if (!monitor_) {
    devices::health::gpu_sample s;
    s.unavailable_reason = "no health monitor for " + info().name + " here";
    return s;
  }
  return monitor_->sample_device(info().pci_bus_id, info().uuid);
}

caf::expected<devices::launch_result>
hosted_device::do_launch(uint32_t, uint64_t, kernels::kernel_id,
                         const kernels::kernel_args&, kernels::typed_inputs,
                         const devices::memory::owner_tag&) {
  return make_error(errc::device_lost,
                    info().name + " runs in " +
                        (remote() ? "a remote device host" : "a host process") +
                        ": its launches go to the device actor there");
}

caf::error hosted_device::do_health() {
  return caf::none;
}

caf::error hosted_device::do_reset() {
  // Its memory and its objects went with its process.
  return caf::none;
}

caf::error hosted_device::do_recreate() {
  return caf::none;
}

void hosted_device::do_release_memory() {
  // The process held the memory; ending it gave everything back.
}

std::vector<std::string> hosted_device::do_take_warnings() {
  return {};
}

std::pair<host_gate_actor, std::string> hosted_device::gate() const {
  std::lock_guard<std::mutex> guard{gate_mx_};
  return {gate_, token_};
}

void hosted_device::set_gate(host_gate_actor gate, std::string token) {
  std::lock_guard<std::mutex> guard{gate_mx_};
  gate_ = std::move(gate);
  token_ = std::move(token);
}

// -- joining remote hosts -----------------------------------------------------

caf::expected<std::vector<std::shared_ptr<hosted_device>>>
join_remote_hosts(caf::actor_system& sys, const network_settings& net) {
  std::vector<std::shared_ptr<hosted_device>> out;
  if (net.join.empty())
    return out;
  if (!sys.has_openssl_manager())
    return make_error(errc::malformed_config,
                      "joining remote device hosts needs CAF's TLS module in "
                      "the actor system: make its config with "
                      "cohort::system_config from the runtime config, or "
                      "call cohort::load_network with its network settings");
  caf::scoped_actor self{sys};
  auto mm = sys.openssl_manager().actor_handle();
  for (auto& where : net.join) {
    auto name = to_string(where);
    auto cannot = [&](errc code, const std::string& why) {
      return make_error(code, "cannot join the remote device host " + name +
                                  ": " + why);
    };
    caf::error failure;
    caf::strong_actor_ptr gate;
    // A handshake the middleman's heartbeat cut short (it drops a
    // connection still in its handshake at its first tick with
    // connection_timeout, docs/device-hosts.md) is tried again, twice at
    // most. A refused certificate (disconnect_during_handshake) is not.
    auto deadline = std::chrono::steady_clock::now() + net.connect_timeout;
    for (int attempt = 0; attempt < 3 && !gate; ++attempt) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        break;
      caf::error err;
      self->request(mm, left, caf::connect_atom::value, where.host, where.port)
          .receive([&](const caf::node_id&, caf::strong_actor_ptr& g,
                       const std::set<std::string>&) { gate = std::move(g); },
                   [&](caf::error& e) { err = std::move(e); });
      if (gate || !err)
        break;
      failure = cannot(errc::device_lost,
                       err == caf::sec::disconnect_during_handshake
                           ? describe(err) +
                                 " (the TLS handshake failed: one side's "
                                 "certificate is not signed by the CA the "
                                 "other trusts, or it does not speak TLS)"
                           : describe(err));
      if (err != caf::sec::connection_timeout)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    if (!gate && failure)
      return failure;
    if (!gate)
      return cannot(errc::device_lost, "it published no gate");
    std::vector<device_info> listed;
    self->request(caf::actor_cast<host_gate_actor>(gate), net.connect_timeout,
                  list_atom::value, net.token)
        .receive([&](std::vector<device_info>& l) { listed = std::move(l); },
                 [&](caf::error& err) {
                   failure = cannot(code_of(err) == errc::not_granted
                                        ? errc::not_granted
                                        : errc::device_lost,
                                    describe(err));
                 });
    if (failure)
      return failure;
    if (listed.empty())
      return cannot(errc::device_lost, "it serves no devices");
    for (uint32_t i = 0; i < listed.size(); ++i) {
      auto info = std::move(listed[i]);
      info.host_process = false;
      info.remote = name;
      // Its host's links are to GPUs of that machine, which gangs here do
      // not reach directly (docs/placement.md, "Links between GPUs").
      info.links.clear();
      out.push_back(std::make_shared<hosted_device>(std::move(info), where, i));
    }
  }
  return out;
}

// -- cutting connections (chaos) ---------------------------------------------

namespace {

// `a` as IPv4 when it is an IPv4 address mapped into IPv6.
sockaddr_storage unmapped(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET6)
    return a;
  auto& six = reinterpret_cast<const sockaddr_in6&>(a);
  if (!IN6_IS_ADDR_V4MAPPED(&six.sin6_addr))
    return a;
  sockaddr_storage out{};
  auto& four = reinterpret_cast<sockaddr_in&>(out);
  four.sin_family = AF_INET;
  four.sin_port = six.sin6_port;
  std::memcpy(&four.sin_addr, six.sin6_addr.s6_addr + 12, 4);
  return out;
}

bool same_peer(const sockaddr_storage& x, const sockaddr_storage& y) {
  auto a = unmapped(x), b = unmapped(y);
  if (a.ss_family != b.ss_family)
    return false;
  if (a.ss_family == AF_INET) {
    auto& p = reinterpret_cast<const sockaddr_in&>(a);
    auto& q = reinterpret_cast<const sockaddr_in&>(b);
    return p.sin_port == q.sin_port && p.sin_addr.s_addr == q.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    auto& p = reinterpret_cast<const sockaddr_in6&>(a);
    auto& q = reinterpret_cast<const sockaddr_in6&>(b);
    return p.sin6_port == q.sin6_port &&
           std::memcmp(&p.sin6_addr, &q.sin6_addr, sizeof p.sin6_addr) == 0;
  }
  return false;
}

} // namespace

caf::expected<size_t> shut_down_connections(const endpoint& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  auto port = std::to_string(where.port);
  if (auto rc = ::getaddrinfo(where.host.c_str(), port.c_str(), &hints, &found);
      rc != 0)
    return make_error(errc::io_error, "cannot resolve " + to_string(where) +
                                          ": " + ::gai_strerror(rc));
  std::vector<sockaddr_storage> peers;
  for (auto* a = found; a != nullptr; a = a->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, a->ai_addr, std::min<size_t>(a->ai_addrlen, sizeof s));
    peers.push_back(s);
  }
  ::freeaddrinfo(found);
  auto* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr)
    return make_error(errc::io_error,
                      std::string{"/proc/self/fd: "} + std::strerror(errno));
  size_t n = 0;
  while (auto* ent = ::readdir(dir)) {
    char* end = nullptr;
    auto fd = int(std::strtol(ent->d_name, &end, 10));
    if (end == ent->d_name || *end != '\0' || fd == ::dirfd(dir))
      continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0)
      continue;
    for (auto& p : peers)
      if (same_peer(peer, p)) {
        // Not closed: the descriptor stays CAF's, which reads the end of
        // the stream and closes it as for a peer that went.
        if (::shutdown(fd, SHUT_RDWR) == 0)
          ++n;
        break;
      }
  }
  ::closedir(dir);
  return n;
}

// -- faults -------------------------------------------------------------------

caf::error apply_sim_fault(devices::sim::sim_device& dev, const sim_fault& f) {
  switch (f.kind) {
  case pb::LOSE:
    dev.lose(false);
    break;
  case pb::LOSE_PERMANENTLY:
    dev.lose(true);
    break;
  case pb::FAIL_ALLOCATIONS:
    dev.fail_next_allocations(std::max(1u, f.allocations));
    break;
  case pb::RAISE_XID:
    dev.raise_xid(f.xid);
    break;
  case pb::HANG_STREAM:
    if (f.stream >= dev.info().streams)
      return make_error(errc::invalid_fault,
                        dev.info().name + " has " +
                            std::to_string(dev.info().streams) + " streams");
    dev.hang_stream(f.stream);
    break;
  case pb::SLOW_DOWN:
    if (!(f.factor > 0))
      return make_error(errc::invalid_fault,
                        "a slow-down's factor must be positive");
    dev.slow_down(f.factor);
    break;
  case pb::STICKY_ERROR:
    dev.poison();
    break;
  case pb::ECC_CORRECTED:
    dev.warn("corrected ECC error");
    break;
  case pb::THERMAL:
    dev.warn("thermal throttling");
    break;
  case pb::HEAT:
    dev.heat(int32_t(f.factor));
    break;
  default:
    return make_error(errc::invalid_fault,
                      "fault kind " + std::to_string(f.kind) +
                          " is not one a simulated device takes");
  }
  return caf::none;
}

// -- starting and ending host processes ---------------------------------------

namespace {

constexpr const char* gate_line = "cohort device-host: gate on port ";
constexpr const char* error_line = "cohort device-host: cannot start: ";
// A host whose GPU is not the one the node probed (unknown_device): trying
// again would find the same one.
constexpr const char* wrong_gpu_line =
    "cohort device-host: not the node's GPU: ";

caf::error lost(std::string what) {
  return make_error(errc::device_lost, std::move(what));
}

std::string wait_status(int status) {
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended (wait status " + std::to_string(status) + ")";
}

// Writes all of `data` to the non-blocking `fd` by `deadline`; false when
// the reader went (EPIPE), on an error, or when time ran out.
bool write_by(int fd, const char* data, size_t n,
              std::chrono::steady_clock::time_point deadline) {
  while (n > 0) {
    auto w = ::write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno != EAGAIN)
      return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, int(left.count())) < 0 && errno != EINTR)
      return false;
  }
  return true;
}

// Writes the spec's length and bytes by `deadline`. A closed pipe here is a
// process that died at once: the write fails and says so, with SIGPIPE
// blocked in this thread (and taken if it came) rather than ending the
// node.
bool write_spec(int fd, const std::string& framed,
                std::chrono::steady_clock::time_point deadline) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  auto flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  auto ok = write_by(fd, framed.data(), framed.size(), deadline);
  ::fcntl(fd, F_SETFL, flags);
  if (!ok) {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

// Whether process `pid` is exiting: PF_EXITING (0x4) in the flags of
// /proc/PID/stat, set from the start of its exit until it is reaped. True
// when that cannot be read (the process may be gone already).
bool exiting(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string stat{std::istreambuf_iterator<char>{in}, {}};
  // After "pid (comm) ": state ppid pgrp session tty_nr tpgid flags.
  auto close = stat.rfind(')');
  if (close == std::string::npos)
    return true;
  std::istringstream fields{stat.substr(close + 1)};
  std::string field;
  unsigned long flags = 0;
  for (int i = 0; i < 7 && fields >> field; ++i)
    if (i == 6)
      flags = std::strtoul(field.c_str(), nullptr, 10);
  if (!fields)
    return true;
  constexpr unsigned long pf_exiting = 0x4;
  return (flags & pf_exiting) != 0;
}

} // namespace

caf::expected<host_process>
start_host(const std::string& binary, const pb::HostSpec& spec,
           std::chrono::milliseconds timeout,
           const std::function<bool(int)>& spawned) {
  if (::access(binary.c_str(), X_OK) != 0)
    return lost("cannot run the device host program " + binary + ": " +
                std::strerror(errno));
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0)
    return lost(std::string{"pipe: "} + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    auto err = errno;
    ::close(in[0]);
    ::close(in[1]);
    return lost(std::string{"pipe: "} + std::strerror(err));
  }
  // The child gets the read end of `in` as its standard input and the write
  // end of `out` as its standard output; dup2 clears their close-on-exec.
  // Every other descriptor of the node is close-on-exec or inherited as it
  // is by any child (stderr stays shared: the host's messages go there).
  posix_spawn_file_actions_t acts;
  posix_spawn_file_actions_init(&acts);
  posix_spawn_file_actions_adddup2(&acts, in[0], 0);
  posix_spawn_file_actions_adddup2(&acts, out[1], 1);
  // Its own process group, so that a terminal's Ctrl-C reaches the node
  // alone (which ends its hosts as it stops); no signal blocked or ignored
  // as the node may have them (`cohort serve` blocks SIGINT and SIGTERM).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  std::string arg0 = binary, arg1 = "device-host";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  auto rc = posix_spawn(&pid, binary.c_str(), &acts, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&acts);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return lost("cannot start " + binary + ": " + std::strerror(rc));
  }
  host_process p;
  p.pid = pid;
  p.input = in[1];
  int from_host = out[0];
  auto fail = [&](std::string what, errc code = errc::device_lost) {
    if (from_host >= 0)
      ::close(from_host);
    auto how = end_host(p);
    return make_error(code, what + " (its process " + std::to_string(pid) +
                                " " + how + ")");
  };
  if (spawned && !spawned(pid))
    return fail("its node is stopping");
  std::string framed(4, '\0');
  if (!spec.AppendToString(&framed))
    return fail("the device's host spec does not serialize");
  auto size = framed.size() - 4;
  for (int i = 0; i < 4; ++i)
    framed[size_t(i)] = static_cast<char>(size >> (8 * i));
  // The whole start (spec written, gate published) has `timeout`.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!write_spec(p.input, framed, deadline))
    return fail("the device host did not read its spec");
  // Its first line says where the gate is.
  std::string line;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return fail("the device host did not publish its gate within " +
                  std::to_string(timeout.count()) + " ms");
    pollfd pfd{from_host, POLLIN, 0};
    auto n = ::poll(&pfd, 1, int(left.count()));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return fail(std::string{"poll: "} + std::strerror(errno));
    if (n == 0)
      continue;
    char buf[256];
    auto r = ::read(from_host, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return fail("the device host ended before it published its gate");
    line.append(buf, size_t(r));
    auto nl = line.find('\n');
    if (nl == std::string::npos) {
      if (line.size() > 1024)
        return fail("the device host wrote something other than its port");
      continue;
    }
    line.resize(nl);
    break;
  }
  ::close(std::exchange(from_host, -1));
  if (auto why = std::string{error_line}; line.rfind(why, 0) == 0)
    return fail("the device host could not start: " + line.substr(why.size()));
  if (auto why = std::string{wrong_gpu_line}; line.rfind(why, 0) == 0)
    return fail("the device host could not start: " + line.substr(why.size()),
                errc::unknown_device);
  auto prefix = std::string{gate_line};
  if (line.rfind(prefix, 0) != 0)
    return fail("the device host wrote '" + line + "', not its port");
  char* end = nullptr;
  auto port = std::strtoul(line.c_str() + prefix.size(), &end, 10);
  if (end == line.c_str() + prefix.size() || *end != '\0' || port == 0 ||
      port > 65535)
    return fail("the device host wrote '" + line + "', not its port");
  p.port = uint16_t(port);
  return p;
}

std::string end_host(host_process& p, std::chrono::milliseconds grace) {
  // Its input is closed only once it is reaped: a host ends by itself at
  // the end of its input, and would otherwise race our SIGKILL to say how.
  struct input_closer {
    int& fd;
    ~input_closer() {
      if (fd >= 0)
        ::close(std::exchange(fd, -1));
    }
  } closer{p.input};
  if (p.pid <= 0)
    return "had ended";
  auto pid = std::exchange(p.pid, 0);
  int status = 0;
  // A process that died may not be reapable yet when its connection drops
  // (its sockets close before it becomes a zombie): it gets `grace`, while
  // the kernel says it is exiting. One that is not (it hangs, or only its
  // connection was cut) is killed at once.
  auto deadline = std::chrono::steady_clock::now() + grace;
  for (;;) {
    auto r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return wait_status(status);
    if (r < 0 && errno != EINTR)
      return std::string{"could not be reaped: "} + std::strerror(errno);
    if (std::chrono::steady_clock::now() >= deadline || !exiting(pid))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{2});
  }
  ::kill(pid, SIGKILL);
  pid_t r;
  do
    r = ::waitpid(pid, &status, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0)
    return std::string{"could not be reaped: "} + std::strerror(errno);
  // Ended by our SIGKILL, or by itself just before it.
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
    return "was still running and was ended by its node";
  return wait_status(status);
}

// -- the host process ---------------------------------------------------------

namespace {

struct gate_state {
  std::vector<std::shared_ptr<devices::device>> devs;
  std::string token;
  /// Whether a node may greet a device again (a remote host: the node
  /// rejoins after a dropped connection), or only once (a host process).
  bool rejoin = false;
  /// Per device: greeted yet, and its actor now.
  std::vector<bool> greeted;
  std::vector<device_actor> actors;
  /// Hellos waiting for the actor they replace to be gone: what runs then,
  /// and how one fails when a newer hello takes its place.
  struct waiting_hello {
    std::function<void()> run;
    std::function<void()> fail;
  };
  std::map<caf::actor_addr, waiting_hello> after_down;
  static inline const char* name = "cohort.host_gate";
};

// Compares without an early exit: the time taken says nothing of where a
// guessed token first differs.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

using gate_ptr = host_gate_actor::stateful_pointer<gate_state>;

caf::error refuse_token() {
  return make_error(errc::not_granted,
                    "the device host's token does not match");
}

// Spawns the actor of device `d` for the node that greeted it.
device_actor spawn_device(gate_ptr self, uint32_t d, const host_hello& hello,
                          const caf::actor& listener,
                          const caf::actor& health) {
  auto& dev = self->state.devs[d];
  device_actor_config cfg;
  cfg.index = hello.index;
  cfg.kernel_timeout = std::chrono::milliseconds{hello.kernel_timeout_ms};
  for (auto ms : hello.kernel_timeouts_ms)
    cfg.kernel_timeouts.emplace_back(ms);
  if (hello.health_interval_ms > 0)
    cfg.health_interval = std::chrono::milliseconds{hello.health_interval_ms};
  // The node's Xid policy; a rule with an action out of range is left out.
  devices::xid_policy policy;
  for (size_t i = 0;
       i < std::min(hello.xid_codes.size(), hello.xid_actions.size()); ++i)
    if (hello.xid_actions[i] <= uint8_t(devices::xid_action::isolate))
      policy.set(hello.xid_codes[i], devices::xid_action(hello.xid_actions[i]));
  dev->set_xid_policy(std::move(policy));
  cfg.health = caf::actor_cast<health_listener>(health);
  auto to = caf::actor_cast<device_listener>(listener);
  device_actor a;
  if (dev->asynchronous()) {
    cfg.bind_numa = true;
    a = self->spawn<caf::detached>(device_impl, dev, to, cfg);
  } else {
    a = self->spawn(device_impl, dev, to, cfg);
  }
  self->monitor(a);
  self->state.actors[d] = a;
  return a;
}

// A device greeted again (a node that rejoins): its earlier actor is gone,
// so the device is reset (a new context when a sticky error survives the
// reset) before a new actor runs it.
caf::error reset_for_rejoin(devices::device& dev) {
  auto err = dev.reset();
  if (code_of(err) == errc::context_poisoned)
    err = dev.recreate();
  if (err)
    return make_error(errc::device_lost,
                      dev.info().name +
                          " could not be reset for its node: " + describe(err));
  return caf::none;
}

host_gate_actor::behavior_type
gate_impl(gate_ptr self, std::vector<std::shared_ptr<devices::device>> devs,
          std::string token, bool rejoin) {
  auto& st = self->state;
  st.greeted.assign(devs.size(), false);
  st.actors.resize(devs.size());
  st.devs = std::move(devs);
  st.token = std::move(token);
  st.rejoin = rejoin;
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    for (auto& a : st.actors)
      if (a && a.address() == dm.source)
        a = device_actor{};
    auto i = st.after_down.find(dm.source);
    if (i != st.after_down.end()) {
      auto w = std::move(i->second);
      st.after_down.erase(i);
      w.run();
    }
  });
  return {
      [=](list_atom,
          const std::string& token) -> caf::result<std::vector<device_info>> {
        auto& st = self->state;
        if (!same_token(token, st.token))
          return refuse_token();
        std::vector<device_info> out;
        for (auto& d : st.devs)
          out.push_back(d->info());
        return out;
      },
      [=](hello_atom, const std::string& token, const host_hello& hello,
          const caf::actor& listener,
          const caf::actor& health) -> caf::result<caf::actor> {
        auto& st = self->state;
        if (!same_token(token, st.token))
          return refuse_token();
        auto d = hello.device;
        if (d >= st.devs.size())
          return make_error(
              errc::unknown_device,
              "the device host has " + std::to_string(st.devs.size()) +
                  " devices, not one at index " + std::to_string(d));
        if (!hello.name.empty() && hello.name != st.devs[d]->info().name)
          return make_error(errc::unknown_device,
                            "the device host's device " + std::to_string(d) +
                                " is '" + st.devs[d]->info().name + "', not '" +
                                hello.name +
                                "' (was the host restarted with another "
                                "config?)");
        if (st.greeted[d] && !st.rejoin)
          return make_error(errc::invalid_transition,
                            "the device host has greeted its node already");
        bool again = st.greeted[d];
        st.greeted[d] = true;
        auto old = st.actors[d];
        if (!old) {
          if (again)
            if (auto err = reset_for_rejoin(*st.devs[d]))
              return err;
          return caf::actor_cast<caf::actor>(
              spawn_device(self, d, hello, listener, health));
        }
        // The node rejoins: the actor of its earlier connection ends first.
        // A device call that hangs keeps that actor from ending: a newer
        // hello (the node tries again after its timeout) then takes the
        // place of the one waiting, which fails.
        auto rp = self->make_response_promise<caf::actor>();
        auto waiting = st.after_down.find(old.address());
        if (waiting != st.after_down.end())
          waiting->second.fail();
        st.after_down[old.address()] = {
            [=]() mutable {
              auto& st = self->state;
              if (auto err = reset_for_rejoin(*st.devs[d])) {
                rp.deliver(std::move(err));
                return;
              }
              rp.deliver(caf::actor_cast<caf::actor>(
                  spawn_device(self, d, hello, listener, health)));
            },
            [=]() mutable {
              rp.deliver(make_error(errc::device_lost,
                                    "a newer hello took the place of this "
                                    "one while the device's earlier actor "
                                    "had not ended"));
            }};
        self->send_exit(old, caf::exit_reason::kill);
        return rp;
      },
      [=](fault_atom, const std::string& token, uint32_t d,
          const sim_fault& f) -> caf::result<bool> {
        auto& st = self->state;
        if (!same_token(token, st.token) || d >= st.devs.size() ||
            !st.greeted[d])
          return make_error(errc::not_granted,
                            "faults come from the node that greeted the "
                            "device, with its token");
        auto sim =
            std::dynamic_pointer_cast<devices::sim::sim_device>(st.devs[d]);
        if (!sim)
          return make_error(errc::invalid_fault,
                            "faults are injected into simulated devices only");
        if (auto err = apply_sim_fault(*sim, f))
          return err;
        return true;
      },
  };
}

// Reads exactly `n` bytes from standard input; false at its end or on an
// error.
bool read_stdin(void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    auto r = ::read(0, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

int host_error(int status, const std::string& what) {
  std::fprintf(stderr, "cohort device-host: %s\n", what.c_str());
  return status;
}

} // namespace

namespace {

// The device a host spec names, with the memory settings its node compiled:
// a simulated GPU, or a real one opened through its backend's plugin here.
caf::expected<std::shared_ptr<devices::device>>
host_device(const pb::HostSpec& spec) {
  devices::memory::memory_options mem;
  mem.limit = spec.memory_limit();
  for (auto& [tenant, bytes] : spec.tenant_limit())
    mem.tenant_limits[tenant] = bytes;
  for (auto& [tenant, bytes] : spec.reservation())
    mem.reservations[tenant] = bytes;
  pb::RuntimeConfig pool_cfg;
  *pool_cfg.mutable_pool() = spec.pool();
  if (spec.has_sim_gpu()) {
    auto params = sim_params_of(spec.sim_gpu());
    if (!params)
      return params.error();
    mem.pool = config::pool_options_for(pool_cfg, params->memory_bytes);
    params->memory = std::move(mem);
    auto dev = devices::sim::make_sim_device(std::move(*params));
    if (!dev)
      return dev.error();
    return std::shared_ptr<devices::device>{std::move(*dev)};
  }
  auto& g = spec.gpu();
  if (g.name().empty() || g.name().size() > 64 || g.streams() == 0 ||
      g.streams() > devices::memory::pool_resource::max_streams - 1)
    return make_error(errc::malformed_config,
                      "the host spec's GPU has no name or " +
                          std::to_string(g.streams()) + " streams");
  if (!g.visible().empty()) {
    if (g.vendor() != "CUDA" || g.visible().size() > 128 ||
        g.visible().find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklm"
                                      "nopqrstuvwxyz0123456789-") !=
            std::string::npos)
      return make_error(errc::malformed_config,
                        "the host spec's GPU names a bad MIG instance to see "
                        "(CUDA only, a UUID)");
    // Before the plugin loads: CUDA reads it as it initializes.
    if (devices::gpu::cuda_runtime_made())
      return make_error(errc::malformed_config,
                        "CUDA is already in use in this host process: it "
                        "cannot be limited to one MIG instance");
    ::setenv("CUDA_VISIBLE_DEVICES", g.visible().c_str(), 1);
  }
  devices::gpu::gpu_options opts;
  opts.streams = g.streams();
  opts.expect_uuid = g.uuid();
  opts.mig_instance = g.visible();
  auto dev = devices::gpu::open_gpu(g.vendor(), int(g.ordinal()), g.name(),
                                    std::move(opts));
  if (!dev)
    return dev.error();
  // As the node configures the GPUs of its own process (configure_memory).
  mem.pool = config::pool_options_for(pool_cfg, (*dev)->info().memory_bytes);
  if (auto err = (*dev)->memory()->configure(std::move(mem)))
    return make_error(errc::malformed_config, describe(err));
  return std::shared_ptr<devices::device>{std::move(*dev)};
}

} // namespace

// A device host that cannot start says why on standard output too, where
// its node reads (start_host puts it in the device's loss), and on standard
// error.
int start_error(int status, const std::string& what,
                const char* line = error_line) {
  std::printf("%s%s\n", line, what.c_str());
  std::fflush(stdout);
  return host_error(status, what);
}

int run_device_host() {
  // A spec is a few hundred bytes; this bound keeps a wrong input from
  // allocating without end.
  constexpr uint32_t max_spec = 1u << 20;
  unsigned char len[4];
  if (!read_stdin(len, 4))
    return host_error(2, "no host spec on standard input (this command is "
                         "started by a node: docs/device-hosts.md)");
  uint32_t n = uint32_t(len[0]) | uint32_t(len[1]) << 8 |
               uint32_t(len[2]) << 16 | uint32_t(len[3]) << 24;
  if (n == 0 || n > max_spec)
    return host_error(2, "the host spec's length is " + std::to_string(n) +
                             " bytes, not 1 to " + std::to_string(max_spec));
  std::string bytes(n, '\0');
  if (!read_stdin(bytes.data(), n))
    return host_error(2, "the host spec ended early");
  pb::HostSpec spec;
  if (!spec.ParseFromString(bytes) || spec.has_sim_gpu() == spec.has_gpu() ||
      spec.token().empty())
    return host_error(2, "the host spec is not a cohort.pb.HostSpec with one "
                         "device and a token");
  auto dev = host_device(spec);
  if (!dev)
    return start_error(spec.has_gpu() ? 1 : 2, describe(dev.error()),
                       code_of(dev.error()) == errc::unknown_device
                           ? wrong_gpu_line
                           : error_line);
  system_config cfg;
  load_network(cfg);
  caf::actor_system sys{cfg};
  auto gate =
      sys.spawn(gate_impl, std::vector<std::shared_ptr<devices::device>>{*dev},
                spec.token(), false);
  auto port = sys.middleman().publish(gate, 0, "127.0.0.1");
  if (!port)
    return start_error(1, "cannot publish the gate: " + describe(port.error()));
  std::printf("%s%u\n", gate_line, unsigned(*port));
  std::fflush(stdout);
  // Nothing else goes to the node's pipe.
  if (int null = ::open("/dev/null", O_WRONLY); null >= 0) {
    ::dup2(null, 1);
    ::close(null);
  }
  // The node holds the other end of standard input: its end (the node
  // ended the host or died) ends the process, at once, without waiting for
  // actors that serve a node no longer there.
  char c;
  while (read_stdin(&c, 1)) {
  }
  std::_Exit(0);
}

int run_remote_host(const std::string& listen, const pb::RuntimeConfig& cfg) {
  // SIGINT and SIGTERM stop the host: taken before any thread starts (the
  // devices' and CAF's), whichever thread the kernel hands them to.
  ipc::stop_signals stop_signals{"cohort device-host"};
  // A closed standard output (its reader went) or a peer gone mid-write
  // is an error of that write, not the end of the host.
  std::signal(SIGPIPE, SIG_IGN);
  auto where = parse_endpoint(listen, "--listen", true);
  if (!where)
    return host_error(2, describe(where.error()));
  auto net = compile_network(cfg);
  if (!net)
    return host_error(2, describe(net.error()));
  if (!net->tls() || net->token.empty())
    return host_error(2, "a remote device host needs TLS (network.certificate, "
                         "network.key, network.cafile) and the fleet's "
                         "shared token (network.token_file)");
  for (auto& g : cfg.devices().sim_gpu())
    if (g.host_process())
      return host_error(2, "device " + g.name() +
                               ": host_process does not apply in a remote "
                               "device host, whose devices all run in it");
  bool hosted_gpus = cfg.devices().has_gpu_host_processes() &&
                     cfg.devices().gpu_host_processes();
  for (auto& [name, hosted] : cfg.devices().gpu_host_process())
    hosted_gpus = hosted_gpus || hosted;
  if (hosted_gpus)
    return host_error(2, "devices.gpu_host_processes and gpu_host_process do "
                         "not apply in a remote device host, whose GPUs all "
                         "run in it");
  if (auto settings = config::compile(cfg); !settings)
    return host_error(2, describe(settings.error()));
  // Its GPUs run in it: the node that joins it is its supervision.
  auto devs = make_devices(cfg, {false, "a remote device host runs its GPUs"});
  if (!devs)
    return host_error(2, describe(devs.error()));
  std::vector<device_info> infos;
  for (auto& d : *devs)
    infos.push_back(d->info());
  auto lease = config::compile_quotas(cfg, infos);
  if (!lease)
    return host_error(2, describe(lease.error()));
  if (auto mem = configure_memory(*devs, cfg, *lease, nullptr); !mem)
    return host_error(2, describe(mem.error()));
  // The config's scheduler, and TLS from the settings checked above (the
  // files are not read again).
  auto plain = cfg;
  plain.clear_network();
  system_config scfg{plain};
  load_network(scfg, *net);
  caf::actor_system sys{scfg};
  auto gate = sys.spawn(gate_impl, *devs, net->token, true);
  auto port =
      caf::openssl::publish(gate, where->port, where->host.c_str(), true);
  if (!port)
    return host_error(1, "cannot listen on " + listen + ": " +
                             describe(port.error()));
  std::string names;
  for (auto& i : infos)
    names += (names.empty() ? "" : ", ") + i.name;
  std::printf("cohort device-host: serving %zu devices (%s) on %s:%u with "
              "TLS\n",
              infos.size(), names.c_str(), where->host.c_str(),
              unsigned(*port));
  std::fflush(stdout);
  int sig = stop_signals.wait();
  std::printf("cohort device-host: stopping (%s)\n", strsignal(sig));
  std::fflush(stdout);
  // The nodes see their connections drop: a loss of these devices, which
  // they rejoin when a host listens here again.
  std::_Exit(0);
}

} // namespace cohort::actors
