#include "actors/balancer/host_kernels.hpp"

#include "kernels/registry.hpp"
#include "messages/errc.hpp"

namespace cohort::actors::balancer {

namespace {

const kernels::gpu_code* code_for(const device_info& device,
                                  const kernels::kernel_def& def) {
  if (device.kind == device_kind::cuda_gpu)
    return def.cuda.present() ? &def.cuda : nullptr;
  if (device.kind == device_kind::hip_gpu)
    return def.hip.present() ? &def.hip : nullptr;
  return nullptr;
}

// The stage's sizes: its output's elements, and its launch's threads (one
// per output element unless its GPU code for the device's backend has a
// rule: a node's kernel, or a geo kernel chained with one).
void add_sizes(const device_info& device, kernel_id id,
               const kernels::kernel_args& args, kernels::input_lengths lens,
               std::vector<uint64_t>& out) {
  auto elements = kernels::output_elements(id, args, lens);
  auto threads = elements;
  if (auto* def = kernels::find(id); def != nullptr)
    if (auto* code = code_for(device, *def); code && code->launch_elements)
      threads = code->launch_elements(args, lens);
  out.push_back(elements);
  out.push_back(threads);
}

} // namespace

bool node_only(kernel_id id) {
  auto* d = kernels::find(id);
  return d != nullptr && d->origin != "built-in";
}

bool has_node_only(const work_item& item) {
  if (kernels::is_builtin(item.kernel) && item.then.empty())
    return false;
  if (node_only(item.kernel))
    return true;
  for (auto& st : item.then)
    if (node_only(st.kernel))
      return true;
  return false;
}

bool host_runs(const device_info& device, const work_item& item) {
  if (!device.host_process || !device.remote.empty() || device.simulated)
    return false;
  auto runs = [&](kernel_id id) {
    if (!node_only(id))
      return true;
    return code_for(device, *kernels::find(id)) != nullptr;
  };
  if (!runs(item.kernel))
    return false;
  for (auto& st : item.then)
    if (!runs(st.kernel))
      return false;
  return true;
}

std::vector<kernel_code> code_to_send(const device_info& device,
                                      const work_item& item,
                                      std::bitset<256>& sent) {
  std::vector<kernel_code> out;
  auto add = [&](kernel_id id) {
    auto raw = static_cast<uint8_t>(id);
    if (sent.test(raw) || !node_only(id))
      return;
    auto* def = kernels::find(id);
    auto* code = code_for(device, *def);
    if (code == nullptr)
      return;
    sent.set(raw);
    kernel_code c;
    c.id = raw;
    c.name = def->name;
    c.origin = def->origin;
    for (auto& in : def->signature.inputs)
      c.inputs.push_back(static_cast<uint8_t>(in.type));
    c.output = static_cast<uint8_t>(def->signature.output.type);
    c.format = static_cast<uint8_t>(code->kind);
    c.image.assign(code->image->begin(), code->image->end());
    c.function = code->function;
    c.block = code->block;
    out.push_back(std::move(c));
  };
  add(item.kernel);
  for (auto& st : item.then)
    add(st.kernel);
  return out;
}

caf::expected<std::vector<uint64_t>> launch_sizes(const device_info& device,
                                                  const work_item& item) try {
  std::vector<uint64_t> out;
  out.reserve(2 * (1 + item.then.size()));
  kernels::input_shape lens;
  for (auto& in : item.inputs)
    lens.push_back(in.size());
  add_sizes(device, item.kernel, item.args, kernels::input_lengths{lens}, out);
  for (auto& st : item.then) {
    auto previous = out[out.size() - 2];
    lens.clear();
    for (size_t i = 0, j = 0; i < st.inputs.size() + 1; ++i)
      lens.push_back(i == st.input_slot ? previous : st.inputs[j++].size());
    add_sizes(device, st.kernel, st.args, kernels::input_lengths{lens}, out);
  }
  return out;
} catch (const std::exception& e) {
  return make_error(errc::kernel_error,
                    std::string{kernels::name(item.kernel)} +
                        ": a size rule failed on the node: " + e.what());
}

void mark_refused(std::bitset<256>& bits, const work_item& item) {
  if (node_only(item.kernel))
    bits.set(static_cast<uint8_t>(item.kernel));
  for (auto& st : item.then)
    if (node_only(st.kernel))
      bits.set(static_cast<uint8_t>(st.kernel));
}

bool refused(const std::bitset<256>& bits, const work_item& item) {
  if (bits.none())
    return false;
  if (bits.test(static_cast<uint8_t>(item.kernel)))
    return true;
  for (auto& st : item.then)
    if (bits.test(static_cast<uint8_t>(st.kernel)))
      return true;
  return false;
}

} // namespace cohort::actors::balancer
