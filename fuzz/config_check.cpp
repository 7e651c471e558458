#include "fuzz/config_check.hpp"

#include "actors/runtime.hpp"
#include "config/compile.hpp"

namespace cohort::fuzz {

caf::expected<quota_lease> check_config(pb::RuntimeConfig cfg) {
  // The one compilation every command and runtime::start go through.
  if (auto err = config::check_config(cfg))
    return err;
  cfg.mutable_devices()->set_gpus(false);
  auto devs = actors::make_devices(cfg);
  if (!devs)
    return devs.error();
  std::vector<device_info> infos;
  for (auto& d : *devs)
    infos.push_back(d->info());
  auto fleet = config::compile_fleet(cfg, infos);
  if (!fleet)
    return fleet.error();
  if (auto memory = actors::configure_memory(*devs, cfg, fleet->lease);
      !memory)
    return memory.error();
  return std::move(fleet->lease);
}

} // namespace cohort::fuzz
