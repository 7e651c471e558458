#include "actors/balancer/batching.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <functional>

#include "messages/errc.hpp"

namespace cohort::actors::balancer::batching {

namespace {

uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

// Concatenates input `slot` of every member, in order.
host_buffer concat(std::span<const work_item* const> members, size_t slot) {
  size_t total = 0;
  for (auto* m : members)
    total += m->inputs[slot].size();
  std::vector<float> out;
  out.reserve(total);
  for (auto* m : members) {
    auto in = m->inputs[slot].span();
    out.insert(out.end(), in.begin(), in.end());
  }
  return host_buffer{std::move(out)};
}

} // namespace

bool batch_key::operator==(const batch_key& other) const {
  return kernel == other.kernel && bits(alpha) == bits(other.alpha) &&
         n == other.n && k == other.k && shared == other.shared;
}

size_t batch_key_hash::operator()(const batch_key& key) const {
  // boost::hash_combine's mix: cheap, and spreads the pointer's low zeros.
  size_t h = std::hash<uint8_t>{}(static_cast<uint8_t>(key.kernel));
  auto mix = [&h](size_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(std::hash<uint32_t>{}(bits(key.alpha)));
  mix(std::hash<uint64_t>{}(key.n));
  mix(std::hash<uint64_t>{}(key.k));
  mix(std::hash<const void*>{}(key.shared));
  return h;
}

std::optional<batch_key> key_of(const work_item& item) {
  // A chain's later stages, or a gang's devices, do not stack.
  if (!item.then.empty() || item.gang > 1)
    return std::nullopt;
  if (item.kernel != kernel_id::axpy && item.kernel != kernel_id::gemm)
    return std::nullopt;
  // Merging an invalid item would hide its error behind the batch's.
  if (!validate_item(item).empty())
    return std::nullopt;
  if (item.kernel == kernel_id::axpy)
    return batch_key{kernel_id::axpy, item.args.alpha, 0, 0, nullptr};
  return batch_key{kernel_id::gemm, item.args.alpha, item.args.n, item.args.k,
                   item.inputs[1].identity()};
}

uint64_t output_elements(const work_item& item) {
  auto lens = kernels::lengths(item.views());
  auto out = kernels::output_elements(item.kernel, item.args,
                                      kernels::input_lengths{lens});
  for (auto& st : item.then) {
    lens.clear();
    for (auto& in : st.inputs)
      lens.push_back(in.size());
    lens.insert(st.input_slot, out);
    out = kernels::output_elements(st.kernel, st.args,
                                   kernels::input_lengths{lens});
  }
  return out;
}

work_item merge(std::span<const work_item* const> members, uint64_t id,
                std::string tenant) {
  assert(!members.empty());
  assert(key_of(*members.front()));
  assert(std::all_of(members.begin(), members.end(), [&](auto* m) {
    return key_of(*m) == key_of(*members.front());
  }));
  auto& first = *members.front();
  work_item out;
  out.id = id;
  out.tenant = std::move(tenant);
  out.kernel = first.kernel;
  out.args = first.args;
  if (members.size() == 1) {
    out.inputs = first.inputs; // shares the values, copies nothing
    return out;
  }
  if (first.kernel == kernel_id::axpy) {
    out.inputs = {concat(members, 0), concat(members, 1)};
    return out;
  }
  // gemm: row-major A operands (m_i x k) stacked are one (sum m_i) x k
  // matrix, and row r of A * B depends on row r of A and on B only (in
  // value; OpenBLAS rounds a row by its place in its tiling, see merge).
  out.args.m = 0;
  for (auto* m : members)
    out.args.m += m->args.m;
  out.inputs = {concat(members, 0), first.inputs[1]};
  return out;
}

caf::expected<std::vector<kernels::kernel_output>>
split(const kernels::kernel_output& merged,
      std::span<const work_item* const> members) {
  uint64_t want = 0;
  for (auto* m : members)
    want += output_elements(*m);
  if (merged.values.size() != want || !merged.indices.empty())
    return make_error(
        errc::invalid_arguments,
        "batching: the merged output has " +
            std::to_string(merged.values.size()) + " values and " +
            std::to_string(merged.indices.size()) + " indices, but its " +
            std::to_string(members.size()) + " members need " +
            std::to_string(want) + " values and no indices");
  std::vector<kernels::kernel_output> out;
  out.reserve(members.size());
  auto next = merged.values.begin();
  for (auto* m : members) {
    auto len = static_cast<ptrdiff_t>(output_elements(*m));
    out.push_back({{next, next + len}, {}});
    next += len;
  }
  return out;
}

} // namespace cohort::actors::balancer::batching
