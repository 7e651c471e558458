#include "messages/work.hpp"

namespace cohort {

namespace {

// Lengths of chained stage `st`'s inputs with `previous` elements in its slot.
kernels::input_shape stage_lengths(const chained_stage& st, uint64_t previous) {
  kernels::input_shape lens;
  for (auto& in : st.inputs)
    lens.push_back(in.size());
  lens.insert(st.input_slot, previous);
  return lens;
}

} // namespace

std::vector<std::span<const float>>
stage_views(const chained_stage& st, std::span<const float> previous) {
  std::vector<std::span<const float>> out;
  for (auto& in : st.inputs)
    out.push_back(in.span());
  out.insert(out.begin() + std::min<size_t>(st.input_slot, out.size()),
             previous);
  return out;
}

std::string shape_item(const work_item& item, item_shape& shape) {
  auto aligned = [](uint64_t b) {
    return (b + item_alignment - 1) / item_alignment * item_alignment;
  };
  auto lens = kernels::lengths(item.views());
  if (auto why = kernels::validate(item.kernel, item.args,
                                   kernels::input_lengths{lens});
      !why.empty())
    return why;
  item_shape out;
  for (auto& in : item.inputs)
    out.bytes += aligned(in.bytes());
  out.cost =
      kernels::cost(item.kernel, item.args, kernels::input_lengths{lens});
  out.output_elements = kernels::output_elements(item.kernel, item.args,
                                                 kernels::input_lengths{lens});
  out.bytes += aligned(kernels::output_bytes(item.kernel, item.args,
                                             kernels::input_lengths{lens}));
  auto id = item.kernel;
  for (size_t i = 0; i < item.then.size(); ++i) {
    auto& st = item.then[i];
    auto stage = [&] {
      return "chained stage " + std::to_string(i + 1) + ": ";
    };
    if (id == kernel_id::topk_cosine)
      return stage() + "topk_cosine returns row indices and cannot feed "
                       "another kernel; it must be the last stage";
    if (!kernels::is_known(static_cast<uint8_t>(st.kernel)))
      return stage() + "unknown kernel (id " + std::to_string(int(st.kernel)) +
             ")";
    if (st.input_slot >= kernels::input_count(st.kernel))
      return stage() + std::string{kernels::name(st.kernel)} + " has " +
             std::to_string(kernels::input_count(st.kernel)) +
             " input(s); input_slot " + std::to_string(st.input_slot) +
             " does not exist";
    auto previous = out.output_elements;
    lens = stage_lengths(st, previous);
    if (lens.size() != kernels::input_count(st.kernel))
      return stage() + std::string{kernels::name(st.kernel)} + " takes " +
             std::to_string(kernels::input_count(st.kernel)) +
             " inputs: the previous output and " +
             std::to_string(kernels::input_count(st.kernel) - 1) +
             " more, got " + std::to_string(st.inputs.size()) + " more";
    if (auto why =
            kernels::validate(st.kernel, st.args, kernels::input_lengths{lens});
        !why.empty())
      return stage() + why;
    for (auto& in : st.inputs)
      out.bytes += aligned(in.bytes());
    auto sc = kernels::cost(st.kernel, st.args, kernels::input_lengths{lens});
    out.cost.flops += sc.flops;
    // The chained input does not cross the host link.
    out.cost.bytes += sc.bytes - double(previous) * sizeof(float);
    out.output_elements = kernels::output_elements(
        st.kernel, st.args, kernels::input_lengths{lens});
    out.bytes += aligned(kernels::output_bytes(st.kernel, st.args,
                                               kernels::input_lengths{lens}));
    id = st.kernel;
  }
  shape = out;
  return {};
}

std::string validate_item(const work_item& item) {
  item_shape ignored;
  return shape_item(item, ignored);
}

uint64_t item_bytes(const work_item& item) {
  item_shape s;
  shape_item(item, s);
  return s.bytes;
}

kernels::kernel_cost item_cost(const work_item& item) {
  item_shape s;
  shape_item(item, s);
  return s.cost;
}

kernels::kernel_output run_item_on_host(
    const work_item& item,
    kernels::kernel_output (*run)(kernel_id, const kernels::kernel_args&,
                                  kernels::input_views)) {
  auto views = item.views();
  auto out = run(item.kernel, item.args, views);
  for (auto& st : item.then) {
    auto in = stage_views(st, out.values);
    auto next = run(st.kernel, st.args, in);
    out = std::move(next);
  }
  return out;
}

std::string check_result(const work_item& item,
                         const kernels::kernel_output& got) {
  auto views = item.views();
  if (item.then.empty())
    return kernels::compare(
        item.kernel, item.args, views, got,
        kernels::run_reference(item.kernel, item.args, views));
  // The last stage is compared on the reference's own intermediate result.
  auto ref = kernels::run_reference(item.kernel, item.args, views);
  for (size_t i = 0; i + 1 < item.then.size(); ++i) {
    auto in = stage_views(item.then[i], ref.values);
    auto next =
        kernels::run_reference(item.then[i].kernel, item.then[i].args, in);
    ref = std::move(next);
  }
  auto& last = item.then.back();
  auto in = stage_views(last, ref.values);
  auto want = kernels::run_reference(last.kernel, last.args, in);
  return kernels::compare(last.kernel, last.args, in, got, want);
}

} // namespace cohort
