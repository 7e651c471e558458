// Tenant quotas from code: ask how much device memory a tenant may still use,
// dry-run a plan, then submit past a quota and let the tenant's policy hold
// the excess until memory frees up. Checks every answer and every result.
#include <cstdio>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "kernels/random_data.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"

using namespace cohort;

namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;

// A 512 x 512 matrix-vector product: about 1 MiB of device memory.
work_item product(uint64_t id, const std::string& tenant) {
  work_item item;
  item.id = id;
  item.tenant = tenant;
  item.kernel = kernel_id::gemv;
  item.args.m = 512;
  item.args.n = 512;
  item.inputs.emplace_back(kernels::random_floats(id, 512 * 512));
  item.inputs.emplace_back(kernels::random_floats(id + 1000, 512));
  return item;
}

int fail(const char* what) {
  std::fprintf(stderr, "quotas example: FAILED: %s\n", what);
  return 1;
}

} // namespace

int caf_main(caf::actor_system& sys, const system_config&) {
  // Two simulated GPUs of 256 MiB. "batch" may hold 4 MiB of device memory
  // and waits when it has that much (QUEUE); "web" reserved 8 MiB of sim0.
  pb::RuntimeConfig cfg;
  cfg.mutable_devices()->set_cpu_workers(1);
  cfg.mutable_devices()->set_gpus(false);
  for (auto name : {"sim0", "sim1"}) {
    auto* g = cfg.mutable_devices()->add_sim_gpu();
    g->set_name(name);
    g->set_memory_mib(256);
    g->set_streams(2);
    g->set_speed(1);
  }
  auto* batch = cfg.add_tenant();
  batch->set_tenant("batch");
  batch->add_kernels("*");
  batch->add_devices("sim");
  batch->set_memory_quota_bytes(4 * MiB);
  batch->set_on_limit(pb::QUEUE);
  auto* web = cfg.add_tenant();
  web->set_tenant("web");
  web->add_kernels("gemv");
  web->add_devices("*");
  auto* reserve = web->add_device_quota();
  reserve->set_device("sim0");
  reserve->set_reserve_bytes(8 * MiB);
  cfg.set_audit_path("quotas-example.audit.log");
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt) {
    std::fprintf(stderr, "cannot start: %s\n", describe(rt.error()).c_str());
    return 1;
  }

  // How much may "batch" use? 4 MiB on either GPU (its quota caps both).
  auto room = (*rt)->headroom("batch");
  if (!room || room->tenants.size() != 1)
    return fail("no headroom for batch");
  for (auto& d : room->tenants[0].devices)
    std::printf("batch may place %.1f MiB on %s now\n",
                double(d.headroom) / double(MiB), d.device.c_str());
  if (room->tenants[0].devices[0].headroom != 4 * MiB)
    return fail("batch's headroom should be its 4 MiB quota");

  // Would 3 MiB on sim0 and 2 MiB on sim1 fit? The second passes the quota.
  allocation_plan plan;
  plan.steps = {{"batch", "sim0", 3 * MiB, "gemv", "a", ""},
                {"batch", "sim1", 2 * MiB, "gemv", "b", ""}};
  auto dry = (*rt)->simulate(plan);
  if (!dry || !dry->steps[0].ok || dry->steps[1].ok || !dry->steps[1].soft)
    return fail("the dry run should refuse the second step, softly");
  std::printf("dry run: step 2 refused (%s)\n", dry->steps[1].detail.c_str());

  // 16 products of about 1 MiB each: at most 4 hold memory at once, the
  // rest wait for it. Slow GPUs keep them in flight long enough to see it.
  (*rt)->sim_device("sim0")->slow_down(2000);
  (*rt)->sim_device("sim1")->slow_down(2000);
  caf::scoped_actor self{sys};
  auto sink = caf::actor_cast<actors::client_sink>(self);
  std::vector<work_item> items;
  for (uint64_t id = 1; id <= 16; ++id) {
    items.push_back(product(id, "batch"));
    self->send((*rt)->entry(), submit_atom::value, items.back(), sink);
  }
  int wrong = 0;
  for (size_t ended = 0; ended < items.size(); ++ended)
    self->receive(
        [&](result_atom, work_result& res) {
          wrong += !check_result(items[res.id - 1], res.output).empty();
        },
        [&](failed_atom, uint64_t id, caf::error& err) {
          std::fprintf(stderr, "item %llu: %s\n", (unsigned long long)id,
                       describe(err).c_str());
          ++wrong;
        });
  auto admission = (*rt)->admission_stats();
  auto memory = (*rt)->memory_stats();
  if (wrong > 0 || !admission || !memory)
    return fail("an item failed or was wrong");
  uint64_t peak = 0;
  for (auto& m : *memory)
    peak = std::max(peak, m.peak_used);
  std::printf("16 products done; %llu waited for memory; peak on one GPU "
              "%.1f MiB (quota 4 MiB)\n",
              (unsigned long long)admission->memory_waits,
              double(peak) / double(MiB));
  if (admission->memory_waits == 0 || peak > 4 * MiB)
    return fail("the quota should have held items back");
  std::printf("quotas example: OK\n");
  return 0;
}

CAF_MAIN()
