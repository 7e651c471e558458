#include "messages/work.hpp"

#include "kernels/registry.hpp"

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

kernels::small_vector<kernels::typed_view, 8>
typed_stage_views(const chained_stage& st, kernels::typed_view previous) {
  kernels::small_vector<kernels::typed_view, 8> out;
  for (auto& in : st.inputs)
    out.push_back(in.view());
  out.insert(std::min<size_t>(st.input_slot, out.size()), previous);
  return out;
}

std::string shape_item(const work_item& item, item_shape& shape) {
  auto aligned = [](uint64_t b) {
    return (b + item_alignment - 1) / item_alignment * item_alignment;
  };
  kernels::input_shape lens;
  kernels::small_vector<kernels::dtype, 8> types;
  for (auto& in : item.inputs) {
    lens.push_back(in.size());
    types.push_back(in.type());
  }
  if (auto why = kernels::validate(item.kernel, item.args,
                                   kernels::input_lengths{lens});
      !why.empty())
    return why;
  if (auto why = kernels::check_types(item.kernel, types); !why.empty())
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
    auto& slot = kernels::find(st.kernel)->signature.inputs[st.input_slot];
    if (slot.type != kernels::output_type(id))
      return stage() + std::string{kernels::name(st.kernel)} + "'s input " +
             std::to_string(st.input_slot) + " ('" + slot.name + "') takes " +
             std::string{kernels::name(slot.type)} +
             ", the previous stage's output is " +
             std::string{kernels::name(kernels::output_type(id))};
    types.clear();
    for (auto& in : st.inputs)
      types.push_back(in.type());
    types.insert(st.input_slot, slot.type);
    if (auto why = kernels::check_types(st.kernel, types); !why.empty())
      return stage() + why;
    for (auto& in : st.inputs)
      out.bytes += aligned(in.bytes());
    auto sc = kernels::cost(st.kernel, st.args, kernels::input_lengths{lens});
    out.cost.flops += sc.flops;
    // The chained input does not cross the host link.
    out.cost.bytes +=
        sc.bytes - double(previous) * kernels::element_size(slot.type);
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
  try {
    return shape_item(item, ignored);
  } catch (const kernels::kernel_failure& e) {
    return e.what();
  }
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
                                  kernels::typed_inputs)) {
  auto views = item.typed_views();
  auto out = run(item.kernel, item.args, views);
  for (auto& st : item.then) {
    auto in = typed_stage_views(st, out.view());
    auto next = run(st.kernel, st.args, in);
    out = std::move(next);
  }
  return out;
}

std::string check_result(const work_item& item,
                         const kernels::kernel_output& got) {
  kernels::kernel_output (*ref)(kernel_id, const kernels::kernel_args&,
                                kernels::typed_inputs) = kernels::run_reference;
  // The last stage is compared on the reference's own intermediate result.
  auto first = item.typed_views();
  kernels::kernel_output previous;
  if (!item.then.empty()) {
    work_item before = item;
    before.then.pop_back();
    previous = run_item_on_host(before, ref);
  }
  auto last = item.then.empty()
                  ? first
                  : typed_stage_views(item.then.back(), previous.view());
  auto kernel = item.then.empty() ? item.kernel : item.then.back().kernel;
  auto& args = item.then.empty() ? item.args : item.then.back().args;
  kernels::small_vector<std::span<const float>, 8> floats;
  for (auto& v : last)
    floats.push_back(v.type == kernels::dtype::f32 ? v.as<float>()
                                                   : std::span<const float>{});
  return kernels::compare(kernel, args, floats, got,
                          ref(kernel, args, kernels::typed_inputs{last}));
}

} // namespace cohort
