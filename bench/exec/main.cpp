// bench/exec: what `cohort exec`'s allocation shim costs (docs/exec.md), the
// figures issue 22 asks for.
//
//   cost     an allocation and its free through the CUDA runtime
//            (cudaMalloc, cudaFree) and the driver (cuMemAlloc_v2,
//            cuMemFree_v2), in a program run without the shim and with it
//            (credit leased from a session in this process). The CUDA
//            library is the fake the tests build, which allocates with
//            malloc: the difference is the shim's cost alone, and the ratio
//            is against a far cheaper call than a real GPU's.
//   reclaim  from SIGKILL of a program holding device memory to its credit
//            being back in its session (the node sees the exit through a
//            pidfd).
//
// The two variants alternate round by round; the table gives the median
// and the spread (min to max) of the rounds.
//
//   build/bench/bench_exec [--pairs N] [--bytes B] [--rounds R]
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "exec/exec_wire.hpp"
#include "exec/session_client.hpp"
#include "exec/session_server.hpp"
#include "messages/errc.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  uint64_t pairs = 200000;
  uint64_t bytes = 4096;
  uint32_t rounds = 5;
};

struct child {
  pid_t pid = -1;
  int out = -1;
};

// Runs the loop program with `args`; with `session`, under the shim.
child spawn(const std::vector<std::string>& args,
            const cohort::exec::opened_session* session,
            const std::string& socket) {
  int fds[2];
  if (::pipe(fds) != 0)
    std::exit(1);
  child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::setenv("COHORT_FAKE_CUDA_LIB", COHORT_BENCH_FAKE_CUDA, 1);
    if (session != nullptr) {
      ::setenv("LD_PRELOAD", COHORT_EXEC_SHIM, 1);
      ::setenv(cohort::exec::socket_env, socket.c_str(), 1);
      ::setenv(cohort::exec::token_env, session->token.c_str(), 1);
    } else {
      ::unsetenv("LD_PRELOAD");
    }
    std::vector<char*> argv{const_cast<char*>(COHORT_BENCH_ALLOC_LOOP)};
    for (auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  c.out = fds[0];
  return c;
}

// Its output up to `what` (or its end).
std::string read_until(child& c, const std::string& what) {
  std::string text;
  char buf[256];
  while (text.find(what) == std::string::npos) {
    auto n = ::read(c.out, buf, sizeof buf);
    if (n <= 0)
      break;
    text.append(buf, size_t(n));
  }
  return text;
}

double ns_per_pair(const std::string& kind, const settings& s,
                   const cohort::exec::opened_session* session,
                   const std::string& socket) {
  auto c = spawn({kind, std::to_string(s.pairs), std::to_string(s.bytes)},
                 session, socket);
  auto text = read_until(c, "\n");
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  ::close(c.out);
  double v = 0;
  if (std::sscanf(text.c_str(), "ns_per_pair %lf", &v) != 1 ||
      !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench_exec: the %s loop failed: %s\n", kind.c_str(),
                 text.c_str());
    std::exit(1);
  }
  return v;
}

struct spread {
  double median, lo, hi;
};

spread of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

} // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    auto n = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--pairs" && n > 0)
      s.pairs = n;
    else if (k == "--bytes" && n > 0)
      s.bytes = n;
    else if (k == "--rounds" && n > 0 && n <= 100)
      s.rounds = uint32_t(n);
    else {
      std::fprintf(stderr,
                   "usage: bench_exec [--pairs N] [--bytes B] [--rounds R]\n");
      return 2;
    }
  }
  char dir[] = "/tmp/bench-exec-XXXXXX";
  if (::mkdtemp(dir) == nullptr)
    return 1;
  std::string socket = std::string{dir} + "/exec.sock";
  cohort::exec::session_options opts;
  opts.path = socket;
  opts.grants.push_back({"t", int64_t(::getuid()), -1});
  cohort::exec::session_backend backend;
  backend.known = [](const std::string&) { return true; };
  backend.charge = [](const std::string&, uint64_t) { return caf::error{}; };
  backend.refund = [](const std::string&, uint64_t) {};
  backend.audit = [](const std::string&, uint64_t, const std::string&) {};
  auto server = cohort::exec::session_server::start(opts, backend);
  if (!server) {
    std::fprintf(stderr, "bench_exec: %s\n",
                 cohort::describe(server.error()).c_str());
    return 1;
  }
  auto session = cohort::exec::open_session(socket, "t", uint64_t{1} << 40);
  if (!session) {
    std::fprintf(stderr, "bench_exec: %s\n",
                 cohort::describe(session.error()).c_str());
    return 1;
  }
  std::printf("bench/exec: %llu allocation+free pairs of %llu bytes per "
              "run, %u rounds, the fake CUDA library (malloc)\n",
              (unsigned long long)s.pairs, (unsigned long long)s.bytes,
              s.rounds);
  std::printf("\n%-26s %12s %12s %12s %9s %12s\n", "call", "without ns",
              "with ns", "overhead ns", "ratio", "leases/pair");
  for (auto kind : {"rt", "drv"}) {
    std::vector<double> none, shim;
    auto leases0 = (*server)->stats().leases;
    for (uint32_t r = 0; r < s.rounds; ++r) {
      none.push_back(ns_per_pair(kind, s, nullptr, socket));
      shim.push_back(ns_per_pair(kind, s, &*session, socket));
    }
    auto leases = (*server)->stats().leases - leases0;
    auto a = of(none), b = of(shim);
    std::printf("%-26s %5.0f (%3.0f-%3.0f) %5.0f (%3.0f-%3.0f) %12.0f %8.2fx "
                "%12.6f\n",
                std::string{kind} == "rt" ? "cudaMalloc + cudaFree"
                                          : "cuMemAlloc_v2 + cuMemFree_v2",
                a.median, a.lo, a.hi, b.median, b.lo, b.hi, b.median - a.median,
                b.median / a.median,
                double(leases) / double(s.pairs * s.rounds));
  }
  // Reclaim: SIGKILL to credit back.
  std::vector<double> ms;
  uint64_t held = uint64_t{64} << 20;
  for (uint32_t r = 0; r < s.rounds; ++r) {
    auto c = spawn({"hold", std::to_string(held)}, &*session, socket);
    read_until(c, "holding");
    auto leased = [&] {
      uint64_t sum = 0;
      for (auto& v : (*server)->stats().sessions)
        sum += v.leased_bytes;
      return sum;
    };
    if (leased() < held) {
      std::fprintf(stderr, "bench_exec: the held program leased %llu\n",
                   (unsigned long long)leased());
      return 1;
    }
    auto t0 = clock_type::now();
    ::kill(c.pid, SIGKILL);
    while (leased() != 0)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    ms.push_back(
        std::chrono::duration<double, std::milli>(clock_type::now() - t0)
            .count());
    ::waitpid(c.pid, nullptr, 0);
    ::close(c.out);
  }
  auto r = of(ms);
  std::printf("\nreclaim (SIGKILL of a program holding 64 MiB to its credit "
              "back): %.2f ms median (%.2f-%.2f)\n",
              r.median, r.lo, r.hi);
  ::close(session->fd);
  (*server)->stop();
  ::rmdir(dir);
  return 0;
}
