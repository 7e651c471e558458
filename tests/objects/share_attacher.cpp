// A consumer process for the share tests: attaches to an exported object
// with the client library, prints "attached ID SUM" (the sum of its f32
// elements) and waits on stdin; on a line "detach" it detaches and exits,
// at end of input it exits without detaching. The tests kill it with
// SIGKILL while it is attached.
#include <cstdio>
#include <iostream>
#include <string>

#include <vector>

#include "cohort/client.hpp"
#include "devices/gpu/discover.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: share_attacher SOCKET TOKEN [write]\n");
    return 2;
  }
  try {
    auto a = cohort::client::attachment::attach(
        argv[1], argv[2], argc > 3 && std::string{argv[3]} == "write");
    double sum = 0;
    if (a.type() == cohort::dtype::f32) {
      if (a.where() == cohort::client::memory_kind::host) {
        for (auto x : a.view<float>())
          sum += x;
      } else {
        // A GPU's memory, opened through its IPC handle: read back through
        // the same vendor runtime (default stream).
        auto rt = a.where() == cohort::client::memory_kind::cuda
                      ? cohort::devices::gpu::cuda_runtime()
                      : cohort::devices::gpu::hip_runtime();
        std::vector<float> host(a.size());
        if (rt->copy_to_host(host.data(), a.data(), a.bytes(), nullptr)
                .failed() ||
            rt->stream_synchronize(nullptr).failed()) {
          std::printf("error io_error reading the GPU's memory\n");
          return 1;
        }
        for (auto x : host)
          sum += x;
      }
    }
    std::printf("attached %llu %.1f\n", (unsigned long long)a.id(), sum);
    std::fflush(stdout);
    std::string line;
    while (std::getline(std::cin, line))
      if (line == "detach") {
        a.detach();
        std::printf("detached\n");
        return 0;
      }
    return 0;
  } catch (const cohort::error& e) {
    std::printf("error %s %s\n", cohort::to_string(e.code()).c_str(), e.what());
    return 1;
  }
}
