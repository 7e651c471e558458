// Kernel bundles: time to sign, verify (read, signature, parse, digests)
// and load (in isolation in a child process first, then the shared object
// from memory, registration) a bundle of 10 kernels;
// the figure issue 19 asks for. Each round is a new bundle (new kernel
// names: a process holds 255 kernels, so at most 24 rounds).
// `calls`: the cost of one call of a bundle's CPU kernel in a kernel host
// process against the same kernel called in this process (IN_PROCESS), at
// three sizes, calls of the two interleaved.
//
//   build/bench/bench_bundles [ROUNDS]
//   build/bench/bench_bundles calls [CALLS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <unistd.h>

#include "devices/gpu/bundle_isolation.hpp"
#include "kernels/bundle/bundle.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/catalog.hpp"

namespace {

using namespace cohort::kernels::bundle;
using clock_type = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream{path, std::ios::binary | std::ios::trunc} << bytes;
}

// A bundle of `kernels` kernels named ROUND.kI, each the shared object's
// acme_scale_add.
void make(const std::string& dir, int round, int kernels,
          const std::string& so) {
  std::filesystem::create_directories(dir + "/cpu");
  write_file(dir + "/cpu/lib.so", so);
  auto digest =
      to_hex(sha256({reinterpret_cast<const uint8_t*>(so.data()), so.size()}));
  std::string m = "name: \"bench" + std::to_string(round) +
                  "\"\nversion: \"1\"\nblob { path: \"cpu/lib.so\" sha256: \"" +
                  digest + "\" size: " + std::to_string(so.size()) +
                  " kind: CPU_SHARED_OBJECT }\n";
  for (int i = 0; i < kernels; ++i)
    m += "kernel { name: \"bench" + std::to_string(round) + ".k" +
         std::to_string(i) +
         "\" input { name: \"x\" dtype: \"f64\" } input { name: \"y\" dtype: "
         "\"f64\" } output { dtype: \"f64\" } scalar: \"alpha\" output_size: "
         "\"x\" require: \"x == y\" flops: \"2 * x\" cpu_blob: \"cpu/lib.so\" "
         "cpu_symbol: \"acme_scale_add\" }\n";
  write_file(dir + "/manifest.textproto", m);
}

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0)
      .count();
}

void row(const char* what, std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  std::printf("%-34s %10.1f %10.1f %10.1f\n", what, xs[xs.size() / 2],
              xs.front(), xs.back());
}

// Loads the bundle in `dir` (one kernel, NAME.k0) with its CPU code in
// kernel hosts or in this process.
cohort::kernels::kernel_id load_one(const std::string& dir, int round,
                                    const std::string& so,
                                    const private_key& key,
                                    const trust_store& trust, isolation iso) {
  make(dir, round, 1, so);
  auto sig = sign_bundle(dir, key);
  write_file(dir + "/manifest.sig",
             signature_text(std::get<cohort::pb::BundleSignature>(sig)));
  auto loaded = load_bundle(dir, trust, iso);
  if (auto* no = std::get_if<refused>(&loaded)) {
    std::fprintf(stderr, "bench_bundles: refused: %s\n", no->detail.c_str());
    std::exit(1);
  }
  return std::get<loaded_bundle>(loaded).kernels.at(0).second;
}

int calls(int n, const std::string& so, const private_key& key,
          const trust_store& trust, const isolation& iso,
          const std::string& root) {
  if (iso.host.empty()) {
    std::fprintf(stderr, "bench_bundles: no %s (searched %s)\n", host_program,
                 iso.searched.c_str());
    return 2;
  }
  auto in_host = iso;
  auto in_process = iso;
  in_process.cpu_in_process = true;
  auto hosted = load_one(root + "/host", 100, so, key, trust, in_host);
  auto direct = load_one(root + "/direct", 101, so, key, trust, in_process);
  std::printf("one call of a bundle's CPU kernel (alpha * x + y, f64), %d "
              "calls per size, interleaved (microseconds)\n",
              n);
  std::printf("%-26s %10s %10s %10s %10s %10s %10s\n", "elements", "host p50",
              "host min", "host p99", "proc p50", "proc min", "proc p99");
  for (uint64_t elems : {uint64_t{16}, uint64_t{4096}, uint64_t{1} << 20}) {
    std::vector<double> x(elems, 1.5), y(elems, 2.0);
    std::vector<cohort::kernels::typed_view> in{
        {x.data(), elems, cohort::kernels::dtype::f64},
        {y.data(), elems, cohort::kernels::dtype::f64}};
    cohort::kernels::kernel_args a;
    a.alpha = 2;
    std::vector<double> host_us, proc_us;
    auto one = [&](cohort::kernels::kernel_id id, std::vector<double>& into) {
      auto t0 = clock_type::now();
      auto out = cohort::kernels::run_cpu(
          id, a, cohort::kernels::typed_inputs{in}, std::chrono::seconds{10});
      into.push_back(us_since(t0));
      if (out.as<double>()[elems - 1] != 5.0) {
        std::fprintf(stderr, "bench_bundles: wrong result\n");
        std::exit(1);
      }
    };
    // Warm-up: the host starts on the first call.
    one(hosted, host_us);
    one(direct, proc_us);
    host_us.clear();
    proc_us.clear();
    for (int i = 0; i < n; ++i) {
      one(hosted, host_us);
      one(direct, proc_us);
    }
    std::sort(host_us.begin(), host_us.end());
    std::sort(proc_us.begin(), proc_us.end());
    auto at = [](const std::vector<double>& v, double q) {
      return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
    };
    std::printf("%-26llu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n",
                (unsigned long long)elems, at(host_us, 0.5), host_us.front(),
                at(host_us, 0.99), at(proc_us, 0.5), proc_us.front(),
                at(proc_us, 0.99));
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  bool call_mode = argc > 1 && std::string{argv[1]} == "calls";
  if (call_mode) {
    ++argv;
    --argc;
  }
  // ROUNDS, or CALLS per size with `calls`.
  int count = argc > 1 ? std::atoi(argv[1]) : (call_mode ? 2000 : 20);
  if (call_mode && (count < 10 || count > 1000000)) {
    std::fprintf(stderr, "bench_bundles: CALLS must be 10..1000000\n");
    return 2;
  }
  if (!call_mode && (count < 1 || count > 24)) {
    std::fprintf(stderr, "bench_bundles: ROUNDS must be 1..24\n");
    return 2;
  }
  int rounds = count;
  const int kernels = 10;
  auto so = read_file(COHORT_ACME_KERNELS);
  if (so.empty()) {
    std::fprintf(stderr, "bench_bundles: cannot read %s\n",
                 COHORT_ACME_KERNELS);
    return 2;
  }
  char tmpl[] = "/tmp/cohort-bench-bundles-XXXXXX";
  std::string root = ::mkdtemp(tmpl);
  auto key = private_key::generate();
  if (!key)
    return 2;
  trust_store trust;
  trust.keys.push_back(key->public_key());
  auto isolated = cohort::devices::gpu::bundle_isolation();
  if (isolated.helper.empty()) {
    std::fprintf(stderr, "bench_bundles: no %s (searched %s)\n", probe_program,
                 isolated.searched.c_str());
    return 2;
  }
  if (call_mode) {
    int status = calls(count, so, *key, trust, isolated, root);
    std::filesystem::remove_all(root);
    return status;
  }
  std::vector<double> sign_us, verify_us, load_us, total_us;
  for (int r = 0; r < rounds; ++r) {
    auto dir = root + "/b" + std::to_string(r);
    make(dir, r, kernels, so);
    auto t0 = clock_type::now();
    auto sig = sign_bundle(dir, *key);
    sign_us.push_back(us_since(t0));
    write_file(dir + "/manifest.sig",
               signature_text(std::get<cohort::pb::BundleSignature>(sig)));
    auto t1 = clock_type::now();
    auto checked = check_bundle(dir, trust);
    verify_us.push_back(us_since(t1));
    auto t2 = clock_type::now();
    auto loaded = load_checked(std::get<checked_bundle>(checked), isolated);
    load_us.push_back(us_since(t2));
    total_us.push_back(us_since(t1));
    if (!std::holds_alternative<loaded_bundle>(loaded)) {
      std::fprintf(stderr, "bench_bundles: refused: %s\n",
                   std::get<refused>(loaded).detail.c_str());
      return 1;
    }
  }
  std::filesystem::remove_all(root);
  std::printf("bundle of %d kernels, shared object %zu bytes, %d rounds "
              "(microseconds)\n",
              kernels, so.size(), rounds);
  std::printf("%-34s %10s %10s %10s\n", "phase", "median", "min", "max");
  row("sign (parse, digests, Ed25519)", sign_us);
  row("verify (read, signature, digests)", verify_us);
  row("load (isolated, dlopen, register)", load_us);
  row("verify + load", total_us);
  return 0;
}
