// An outside CAF program built against an installed Cohort's typed actor
// interface (<cohort/caf.hpp>; CMake's cohort::caf): scripts/install-check.sh.
// It starts a runtime inside its own actor system and sends an item to the
// entry actor from a client actor, as docs/embedding.md describes.
#include <caf/all.hpp>

#include <cohort/caf.hpp>

#include <cstdio>
#include <future>

int main(int argc, char** argv) {
  cohort::system_config cfg;
  caf::actor_system sys{cfg};
  auto conf = cohort::actors::default_config();
  conf.set_audit_path(argc > 1 ? argv[1] : "caf-consumer-audit.log");
  auto rt = cohort::actors::runtime::start(sys, conf);
  if (!rt) {
    std::fprintf(stderr, "%s\n", cohort::describe(rt.error()).c_str());
    return 1;
  }
  cohort::work_item item;
  item.id = 1;
  item.tenant = "default";
  item.kernel = cohort::kernel_id::dot;
  item.inputs.emplace_back(std::vector<float>{1, 2, 3});
  item.inputs.emplace_back(std::vector<float>{4, 5, 6});
  auto res = (*rt)->run(item);
  if (!res) {
    std::fprintf(stderr, "%s\n", cohort::describe(res.error()).c_str());
    return 1;
  }
  bool right = res->output.values.size() == 1 && res->output.values[0] == 32.0f;
  std::printf("caf: dot on %s: %g (%s)\n", res->device.c_str(),
              double(res->output.values[0]), right ? "right" : "WRONG");
  (*rt)->stop();
  return right ? 0 : 1;
}
