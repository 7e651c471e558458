// Objects shared across processes through the public API and the client
// library (docs/objects.md, "Sharing across processes"): export, attach in
// this process and in another one, read in place, read-write exports,
// refusals, malformed requests, a consumer killed with SIGKILL (its
// attachment reclaimed, the memory given back) and objects with only a
// host copy. Real GPUs: the same through CUDA IPC runs in the GPU check.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cohort/client.hpp"
#include "cohort/cohort.hpp"
#include "objects/share.pb.h"
#include "tests/api/api_fixture.hpp"
#include "tests/temp_dir.hpp"

extern char** environ;

namespace {

using clock_type = std::chrono::steady_clock;

cohort::runtime start_shared(const cohort::test::temp_dir& dir,
                             const std::string& devices =
                                 "cpu_workers: 1 sim_gpu { name: \"sim0\" "
                                 "memory_mib: 64 streams: 2 speed: 4 }") {
  cohort::options o;
  o.config_text = "devices { " + devices +
                  " gpus: false } tenant { tenant: \"t\" kernels: \"*\" "
                  "devices: \"*\" } tenant { tenant: \"u\" kernels: \"*\" "
                  "devices: \"*\" }";
  o.audit_path = (dir.path / "audit.log").string();
  o.share_socket = dir.file("share.sock");
  return cohort::runtime::start(o);
}

using cohort::test::code_of;
using cohort::test::ramp;

bool eventually(const std::function<bool()>& f, int ms = 5000) {
  auto end = clock_type::now() + std::chrono::milliseconds(ms);
  while (clock_type::now() < end) {
    if (f())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return f();
}

cohort::work sum_of(const cohort::object_ref& obj) {
  cohort::work w;
  w.tenant = obj.tenant();
  w.kernel = cohort::kernel::reduce_sum;
  w.inputs = {cohort::buffer{obj}};
  return w;
}

// By value: rt.objects() is a temporary, and a pointer into it would dangle.
std::optional<cohort::object_view>
find(const std::vector<cohort::object_view>& all, uint64_t id) {
  for (auto& o : all)
    if (o.id == id)
      return o;
  return std::nullopt;
}

// How many processes have the object attached; -1 once it is gone.
int attached_of(cohort::runtime& rt, uint64_t id) {
  auto o = find(rt.objects(), id);
  return o ? static_cast<int>(o->attached) : -1;
}

// A raw connection to the share socket, for what the client library never
// sends.
struct raw_conn {
  int fd = -1;
  explicit raw_conn(const std::string& path) {
    fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) ==
            0);
  }
  ~raw_conn() { ::close(fd); }
  // Sends `bytes` and returns the reply and the descriptor beside it.
  cohort::share::Reply ask(const std::string& bytes, int& got_fd) {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), 0) == ssize_t(bytes.size()));
    return receive(got_fd);
  }
  cohort::share::Reply receive(int& got_fd) {
    char buf[8192];
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    auto n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    REQUIRE(n > 0);
    got_fd = -1;
    for (auto* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_type == SCM_RIGHTS)
        std::memcpy(&got_fd, CMSG_DATA(c), sizeof(int));
    cohort::share::Reply r;
    REQUIRE(r.ParseFromArray(buf, int(n)));
    return r;
  }
};

// The consumer program in a process of its own; its stdin and stdout are
// pipes.
struct consumer {
  pid_t pid = -1;
  int in = -1;
  FILE* out = nullptr;
  consumer(const std::string& socket, const std::string& token,
           bool write = false) {
    int to[2], from[2];
    REQUIRE(::pipe2(to, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    std::string prog = COHORT_SHARE_ATTACHER;
    std::vector<char*> argv{prog.data(), const_cast<char*>(socket.c_str()),
                            const_cast<char*>(token.c_str())};
    std::string w = "write";
    if (write)
      argv.push_back(w.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid, prog.c_str(), &fa, nullptr, argv.data(),
                          environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(to[0]);
    ::close(from[1]);
    in = to[1];
    out = ::fdopen(from[0], "r");
  }
  std::string line() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, out) == nullptr)
      return {};
    std::string s{buf};
    if (!s.empty() && s.back() == '\n')
      s.pop_back();
    return s;
  }
  void say(const std::string& s) {
    auto l = s + "\n";
    REQUIRE(::write(in, l.data(), l.size()) == ssize_t(l.size()));
  }
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
  ~consumer() {
    if (in >= 0)
      ::close(in);
    if (out != nullptr)
      std::fclose(out);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

} // namespace

TEST_CASE("an exported object is attached and read where it lives",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  CHECK(rt.share_socket() == dir.file("share.sock"));
  auto x = ramp(100000);
  auto obj = rt.put("t", cohort::buffer{x}, "sim0");
  auto token = rt.share(obj);
  CHECK(token.size() == 32);
  {
    auto a = cohort::client::attachment::attach(rt.share_socket(), token);
    CHECK(a.attached());
    CHECK(a.object() == obj.id());
    CHECK(a.tenant() == "t");
    CHECK(a.type() == cohort::dtype::f32);
    CHECK(a.size() == x.size());
    CHECK(a.where() == cohort::client::memory_kind::host);
    CHECK(a.device() == "sim0");
    CHECK_FALSE(a.writable());
    auto v = a.view<float>();
    REQUIRE(v.size() == x.size());
    CHECK(std::equal(v.begin(), v.end(), x.begin()));
    CHECK(code_of([&] { a.mutable_data(); }) == cohort::errc::not_granted);
    CHECK(code_of([&] { a.view<double>(); }) ==
          cohort::errc::invalid_arguments);
    auto o = find(rt.objects(), obj.id());
    REQUIRE(o.has_value());
    CHECK(o->attached == 1);
    CHECK(o->exports == 1);
    // Items still read it in place while it is attached.
    auto r = rt.run(sum_of(obj));
    REQUIRE(r.ok());
    a.detach();
    CHECK_FALSE(a.attached());
    CHECK(a.data() == nullptr);
  }
  CHECK(eventually([&] { return attached_of(rt, obj.id()) == 0; }));
  // The export outlives the attachment; revoked, it lets nobody in.
  auto again = cohort::client::attachment::attach(rt.share_socket(), token);
  again.detach();
  rt.unshare(token);
  CHECK(code_of([&] {
          cohort::client::attachment::attach(rt.share_socket(), token);
        }) == cohort::errc::not_granted);
  CHECK(code_of([&] { rt.unshare(token); }) == cohort::errc::invalid_arguments);
}

TEST_CASE("attaches are refused unless the export grants them",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto x = ramp(1000);
  auto obj = rt.put("t", cohort::buffer{x}, "sim0");
  auto attach = [&](const std::string& token, bool write = false) {
    return code_of([&] {
      cohort::client::attachment::attach(rt.share_socket(), token, write);
    });
  };
  CHECK(attach(std::string(32, '0')) == cohort::errc::not_granted);
  CHECK(attach("") == cohort::errc::not_granted);
  auto ro = rt.share(obj);
  CHECK(attach(ro, true) == cohort::errc::not_granted);
  cohort::share_options other;
  other.uid = int64_t(::getuid()) + 1;
  CHECK(attach(rt.share(obj, other)) == cohort::errc::not_granted);
  cohort::share_options one;
  one.max_attached = 1;
  auto t1 = rt.share(obj, one);
  {
    auto a = cohort::client::attachment::attach(rt.share_socket(), t1);
    CHECK(attach(t1) == cohort::errc::not_granted);
  }
  // The first one detached: room again (its detach is a message).
  CHECK(eventually([&] { return attach(t1) == cohort::errc::none; }));
  // No runtime at a path; bad exports.
  CHECK(code_of([&] {
          cohort::client::attachment::attach(
              (dir.path / "nobody.sock").string(), ro);
        }) == cohort::errc::io_error);
  CHECK(code_of([&] { rt.share(cohort::object_ref{}); }) ==
        cohort::errc::invalid_arguments);
  cohort::share_options bad;
  bad.uid = -7;
  CHECK(code_of([&] { rt.share(obj, bad); }) ==
        cohort::errc::invalid_arguments);
  // Every refusal is audited; the metrics count them (tools tests).
  auto objs = rt.objects();
  auto o = find(objs, obj.id());
  REQUIRE(o.has_value());
  CHECK(o->exports == 3);
}

TEST_CASE("a read-only attachment's descriptor refuses writable mappings",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto x = ramp(4096);
  auto obj = rt.put("t", cohort::buffer{x}, "sim0");
  auto token = rt.share(obj);
  raw_conn c{rt.share_socket()};
  cohort::share::Request req;
  req.mutable_attach()->set_token(token);
  int fd = -1;
  auto r = c.ask(req.SerializeAsString(), fd);
  REQUIRE(r.error().empty());
  REQUIRE(fd >= 0);
  CHECK(r.kind() == "memfd");
  CHECK(r.offset() + x.size() * sizeof(float) <= r.region_bytes());
  // What a process that ignores the client library would try.
  errno = 0;
  CHECK(::mmap(nullptr, r.region_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED,
               fd, 0) == MAP_FAILED);
  CHECK(errno == EACCES);
  float y = 1;
  CHECK(::pwrite(fd, &y, sizeof y, off_t(r.offset())) < 0);
  CHECK(::ftruncate(fd, 0) < 0);
  // Reopened through /proc, it gives no more than it had: the slab's mode
  // is 0400. Root passes any mode, so this holds for other users only.
  auto again = "/proc/self/fd/" + std::to_string(fd);
  int rw = ::open(again.c_str(), O_RDWR | O_CLOEXEC);
  if (::geteuid() != 0) {
    CHECK(rw < 0);
  } else {
    WARN("running as root: a reopen of a read-only descriptor is not "
         "refused to root (file modes do not bind it); checked for others");
  }
  if (rw >= 0) {
    // Even then the slab's size is sealed: no SIGBUS for the runtime.
    CHECK(::ftruncate(rw, 0) < 0);
    CHECK(::ftruncate(rw, off_t(r.region_bytes()) * 2) < 0);
    ::close(rw);
  }
  auto* ro = static_cast<const char*>(
      ::mmap(nullptr, r.region_bytes(), PROT_READ, MAP_SHARED, fd, 0));
  REQUIRE(ro != MAP_FAILED);
  CHECK(std::memcmp(ro + r.offset(), x.data(), x.size() * sizeof(float)) == 0);
  ::munmap(const_cast<char*>(ro), r.region_bytes());
  ::close(fd);
  // A detach of an attachment this connection did not make is refused; its
  // own is accepted.
  cohort::share::Request other;
  other.mutable_detach()->set_attachment(r.attachment() + 1000);
  CHECK(c.ask(other.SerializeAsString(), fd).error() == "invalid_arguments");
  cohort::share::Request mine;
  mine.mutable_detach()->set_attachment(r.attachment());
  auto done = c.ask(mine.SerializeAsString(), fd);
  CHECK(done.error().empty());
  CHECK(eventually([&] { return attached_of(rt, obj.id()) == 0; }));
}

TEST_CASE("malformed requests get an error and the socket serves on",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto obj = rt.put("t", cohort::buffer{ramp(100)}, "sim0");
  auto token = rt.share(obj);
  raw_conn c{rt.share_socket()};
  int fd = -1;
  CHECK(c.ask(std::string("\xff\xff\xff\x0f garbage", 12), fd).error() ==
        "invalid_arguments");
  CHECK(c.ask(std::string(1, '\0'), fd).error() == "invalid_arguments");
  auto huge = c.ask(std::string(64 * 1024, 'x'), fd);
  CHECK(huge.error() == "invalid_arguments");
  CHECK_THAT(huge.detail(), Catch::Contains("4096 bytes"));
  // The same connection still attaches.
  cohort::share::Request req;
  req.mutable_attach()->set_token(token);
  auto ok = c.ask(req.SerializeAsString(), fd);
  CHECK(ok.error().empty());
  if (fd >= 0)
    ::close(fd);
  // Many connections that say nothing do not block the others.
  std::vector<std::unique_ptr<raw_conn>> idle;
  for (int i = 0; i < 50; ++i)
    idle.push_back(std::make_unique<raw_conn>(rt.share_socket()));
  auto a = cohort::client::attachment::attach(rt.share_socket(), token);
  CHECK(a.attached());
  // One user holds at most 64 connections: the next is told so.
  while (idle.size() < 62)
    idle.push_back(std::make_unique<raw_conn>(rt.share_socket()));
  raw_conn over{rt.share_socket()};
  auto full = over.receive(fd);
  CHECK(full.error() == "queue_full");
  CHECK_THAT(full.detail(), Catch::Contains("64 connections"));
}

TEST_CASE("a read-write attach's slab cannot be shrunk or grown",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto obj = rt.put("t", cohort::buffer{ramp(4096)}, "sim0");
  cohort::share_options rw;
  rw.write = true;
  auto token = rt.share(obj, rw);
  raw_conn c{rt.share_socket()};
  cohort::share::Request req;
  req.mutable_attach()->set_token(token);
  req.mutable_attach()->set_write(true);
  int fd = -1;
  auto r = c.ask(req.SerializeAsString(), fd);
  REQUIRE(r.error().empty());
  REQUIRE(fd >= 0);
  CHECK(r.writable());
  // What would take the runtime's pages from under it (SIGBUS there).
  errno = 0;
  CHECK(::ftruncate(fd, 0) < 0);
  CHECK(errno == EPERM);
  CHECK(::ftruncate(fd, off_t(r.region_bytes()) + 4096) < 0);
  auto* p = static_cast<float*>(::mmap(
      nullptr, r.region_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(p != MAP_FAILED);
  p[r.offset() / sizeof(float)] = 42.0f;
  ::munmap(p, r.region_bytes());
  ::close(fd);
  CHECK(rt.get(obj).view<float>()[0] == 42.0f);
}

TEST_CASE("a read-write export is written in place and read by items",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  std::vector<float> x(1000, 1.0f);
  auto obj = rt.put("t", cohort::buffer{x}, "sim0");
  cohort::share_options rw;
  rw.write = true;
  auto token = rt.share(obj, rw);
  {
    auto a = cohort::client::attachment::attach(rt.share_socket(), token, true);
    REQUIRE(a.writable());
    auto* p = static_cast<float*>(a.mutable_data());
    for (size_t i = 0; i < x.size(); ++i)
      p[i] = 2.0f;
  }
  // The attached copy became the only one: items and get see the writes.
  auto r = rt.run(sum_of(obj));
  REQUIRE(r.ok());
  CHECK(r->values.view<float>()[0] == Approx(2000.0f));
  auto back = rt.get(obj);
  CHECK(back.view<float>()[999] == 2.0f);
  auto o = find(rt.objects(), obj.id());
  REQUIRE(o.has_value());
  CHECK_FALSE(o->host_copy);
}

TEST_CASE("an attached process holds the object; killed, it is reclaimed",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto before = rt.headroom("t")[0].memory;
  auto x = ramp(1 << 20); // 4 MiB
  auto obj = rt.put("t", cohort::buffer{x}, "sim0");
  auto id = obj.id();
  auto token = rt.share(obj);
  double sum = 0;
  for (auto v : x)
    sum += v;
  consumer c{rt.share_socket(), token};
  auto first = c.line();
  char expect[64];
  std::snprintf(expect, sizeof expect, "%.1f", sum);
  REQUIRE(first.rfind("attached ", 0) == 0);
  CHECK_THAT(first, Catch::EndsWith(expect));
  CHECK(eventually([&] { return attached_of(rt, id) == 1; }));
  // The application lets go: the attached process still holds it.
  obj = cohort::object_ref{};
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(find(rt.objects(), id).has_value());
  CHECK(rt.headroom("t")[0].memory > before);
  auto killed = clock_type::now();
  ::kill(c.pid, SIGKILL);
  auto status = c.wait();
  CHECK(WIFSIGNALED(status));
  CHECK(eventually([&] { return !find(rt.objects(), id).has_value(); }));
  auto took =
      std::chrono::duration<double, std::milli>(clock_type::now() - killed)
          .count();
  CHECK(rt.headroom("t")[0].memory == before);
  WARN("reclaimed 4 MiB " << took << " ms after SIGKILL");
  // And the audit log says so.
  rt.stop();
  std::ifstream log{rt.audit_path(), std::ios::binary};
  std::string all{std::istreambuf_iterator<char>{log}, {}};
  CHECK(all.find("reclaimed from process") != std::string::npos);
  CHECK(all.find("attached by process") != std::string::npos);
}

TEST_CASE("a process that detaches gives the object back at once",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto obj = rt.put("t", cohort::buffer{ramp(1000)}, "sim0");
  auto id = obj.id();
  auto token = rt.share(obj);
  consumer c{rt.share_socket(), token};
  REQUIRE(c.line().rfind("attached ", 0) == 0);
  obj = cohort::object_ref{};
  c.say("detach");
  CHECK(c.line() == "detached");
  CHECK(WEXITSTATUS(c.wait()) == 0);
  CHECK(eventually([&] { return !find(rt.objects(), id).has_value(); }));
}

TEST_CASE("a consumer's refused attach says why", "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir);
  auto obj = rt.put("t", cohort::buffer{ramp(10)}, "sim0");
  consumer c{rt.share_socket(), "not-a-token"};
  CHECK_THAT(c.line(), Catch::StartsWith("error not_granted"));
  CHECK(WEXITSTATUS(c.wait()) == 1);
}

TEST_CASE("an object with only a host copy is shared as a sealed snapshot",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  auto rt = start_shared(dir, "cpu_workers: 1");
  auto x = ramp(5000);
  auto obj = rt.put("t", cohort::buffer{x});
  auto token = rt.share(obj);
  auto a = cohort::client::attachment::attach(rt.share_socket(), token);
  CHECK(a.device() == "host");
  CHECK(a.where() == cohort::client::memory_kind::host);
  auto v = a.view<float>();
  CHECK(std::equal(v.begin(), v.end(), x.begin()));
  cohort::share_options rw;
  rw.write = true;
  auto wt = rt.share(obj, rw);
  CHECK(code_of([&] {
          cohort::client::attachment::attach(rt.share_socket(), wt, true);
        }) == cohort::errc::invalid_arguments);
}

TEST_CASE("sharing needs a share socket, and stop ends it",
          "[api][objects][share]") {
  cohort::test::temp_dir dir;
  cohort::options o;
  o.config_text =
      "devices { cpu_workers: 1 sim_gpu { name: \"sim0\" "
      "memory_mib: 16 streams: 2 speed: 1 } gpus: false } tenant { tenant: "
      "\"default\" kernels: \"*\" devices: \"*\" }";
  o.audit_path = (dir.path / "audit.log").string();
  {
    auto rt = cohort::runtime::start(o);
    CHECK(rt.share_socket().empty());
    auto obj = rt.put("default", cohort::buffer{ramp(10)});
    CHECK(code_of([&] { rt.share(obj); }) == cohort::errc::invalid_arguments);
  }
  // A file in the way is an error; a stale socket is replaced.
  auto path = dir.file("share.sock");
  { std::ofstream{path} << "x"; }
  o.share_socket = path;
  CHECK(code_of([&] { cohort::runtime::start(o); }) == cohort::errc::io_error);
  std::filesystem::remove(path);
  {
    int s = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.data(), path.size());
    REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(s); // left behind, as by a process that died
  }
  auto rt = cohort::runtime::start(o);
  auto obj = rt.put("default", cohort::buffer{ramp(1000)});
  auto token = rt.share(obj);
  auto a = cohort::client::attachment::attach(path, token);
  // A second runtime on the same socket is refused while this one lives.
  CHECK(code_of([&] { cohort::runtime::start(o); }) == cohort::errc::io_error);
  rt.stop();
  CHECK_FALSE(std::filesystem::exists(path));
  // The attachment's mapping stays this process's until it detaches.
  CHECK(a.view<float>()[999] == 999.0f);
  a.detach();
}

TEST_CASE("an object on a real CUDA GPU is attached through CUDA IPC",
          "[api][objects][share][gpu][cuda]") {
  cohort::test::temp_dir dir;
  cohort::options o;
  // CUDA IPC maps memory of the node's own process: the GPU stays there.
  o.config_text = "devices { cpu_workers: 1 gpus: true gpu_host_processes: "
                  "false } tenant { tenant: "
                  "\"default\" kernels: \"*\" devices: \"*\" }";
  o.audit_path = (dir.path / "audit.log").string();
  o.share_socket = dir.file("share.sock");
  auto rt = cohort::runtime::start(o);
  std::string gpu;
  for (auto& d : rt.devices())
    if (d.kind == "cuda" && gpu.empty())
      gpu = d.name;
  if (gpu.empty()) {
    WARN("SKIPPED CUDA IPC: no CUDA GPU on this machine");
    return;
  }
  auto x = ramp(1 << 22); // 16 MiB
  double sum = 0;
  for (auto v : x)
    sum += v;
  auto obj = rt.put("default", cohort::buffer{x}, gpu);
  auto token = rt.share(obj);
  auto started = clock_type::now();
  consumer c{rt.share_socket(), token};
  auto line = c.line();
  auto attach_ms =
      std::chrono::duration<double, std::milli>(clock_type::now() - started)
          .count();
  INFO(line);
  REQUIRE(line.rfind("attached ", 0) == 0);
  char expect[64];
  std::snprintf(expect, sizeof expect, "%.1f", sum);
  CHECK_THAT(line, Catch::EndsWith(expect));
  WARN("CUDA IPC: a new process attached to 16 MiB on "
       << gpu << " and read it in " << attach_ms << " ms");
  auto id = obj.id();
  obj = cohort::object_ref{};
  ::kill(c.pid, SIGKILL);
  c.wait();
  CHECK(eventually([&] { return !find(rt.objects(), id).has_value(); }));
}
