#include "kernels/catalog.hpp"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/builtin.hpp"
#include "kernels/registry.hpp"

namespace cohort::kernels {

namespace {

std::string format(const char* fmt, auto... xs) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, xs...);
  return buf;
}

// Called with ids validate() accepted: the definition exists.
const kernel_def& def(kernel_id id) {
  return *find(id);
}

} // namespace

std::string_view name(kernel_id id) {
  auto* d = find(id);
  return d != nullptr ? std::string_view{d->name} : "unknown";
}

bool is_known(uint8_t raw) {
  return find(static_cast<kernel_id>(raw)) != nullptr;
}

std::optional<kernel_id> parse_kernel(std::string_view text) {
  for (unsigned i = 1; i <= max_kernels; ++i) {
    auto id = static_cast<kernel_id>(i);
    if (auto* d = find(id); d != nullptr && d->name == text)
      return id;
  }
  return std::nullopt;
}

dtype output_type(kernel_id id) {
  return def(id).signature.output.type;
}

size_t input_count(kernel_id id) {
  auto* d = find(id);
  return d != nullptr ? d->signature.inputs.size() : 0;
}

input_shape lengths(input_views inputs) {
  input_shape out;
  for (auto& in : inputs)
    out.push_back(in.size());
  return out;
}

std::string validate(kernel_id id, const kernel_args& args,
                     input_views inputs) {
  auto lens = lengths(inputs);
  return validate(id, args, input_lengths{lens});
}

std::string validate(kernel_id id, const kernel_args& args,
                     input_lengths inputs) {
  auto* d = find(id);
  if (d == nullptr)
    return format("unknown kernel (id %d): no kernel of that id is "
                  "registered (`cohort kernel list` lists them)",
                  int(id));
  auto kn = std::string_view{d->name};
  if (d->sized_by_caller)
    return format("%.*s is a kernel of the node this device host serves: "
                  "only the node checks and sizes its items",
                  int(kn.size()), kn.data());
  auto want = d->signature.inputs.size();
  if (inputs.size() != want)
    return format("%.*s takes %zu input buffer(s), got %zu", int(kn.size()),
                  kn.data(), want, inputs.size());
  if (d->check)
    if (auto err = d->check(args, inputs); !err.empty())
      return err;
  if (!std::isfinite(args.alpha))
    return format("%.*s: alpha must be a finite number", int(kn.size()),
                  kn.data());
  auto out = d->output_elements(args, inputs);
  if (out > max_output_elements)
    return format("%.*s: the output would have %llu elements, at most %llu "
                  "are allowed per item",
                  int(kn.size()), kn.data(), (unsigned long long)out,
                  (unsigned long long)max_output_elements);
  return {};
}

uint64_t output_elements(kernel_id id, const kernel_args& args,
                         input_lengths inputs) {
  return def(id).output_elements(args, inputs);
}

uint64_t output_bytes(kernel_id id, const kernel_args& args,
                      input_views inputs) {
  auto lens = lengths(inputs);
  return output_bytes(id, args, input_lengths{lens});
}

uint64_t output_bytes(kernel_id id, const kernel_args& args,
                      input_lengths inputs) {
  auto& d = def(id);
  auto elems = d.output_elements(args, inputs);
  // topk_cosine's row indices come with its scores.
  auto per = element_size(d.signature.output.type) +
             (id == kernel_id::topk_cosine ? sizeof(int64_t) : 0);
  return elems * per;
}

kernel_cost cost(kernel_id id, const kernel_args& args, input_views inputs) {
  auto lens = lengths(inputs);
  return cost(id, args, input_lengths{lens});
}

kernel_cost cost(kernel_id id, const kernel_args& args, input_lengths inputs) {
  auto& d = def(id);
  double bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    bytes +=
        static_cast<double>(inputs[i]) *
        element_size(i < d.signature.inputs.size() ? d.signature.inputs[i].type
                                                   : dtype::f32);
  bytes += static_cast<double>(output_bytes(id, args, inputs));
  kernel_cost out;
  if (d.cost)
    out = d.cost(args, inputs);
  out.bytes += bytes;
  return out;
}

small_vector<typed_view, 8> typed(input_views inputs) {
  small_vector<typed_view, 8> out;
  for (auto& in : inputs)
    out.push_back({in.data(), in.size(), dtype::f32});
  return out;
}

kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      input_views inputs) {
  auto views = typed(inputs);
  return run_cpu(id, args, typed_inputs{views});
}

kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      typed_inputs inputs) {
  return def(id).cpu(args, inputs);
}

kernel_output run_cpu(kernel_id id, const kernel_args& args,
                      typed_inputs inputs, std::chrono::milliseconds limit) {
  auto& d = def(id);
  return d.cpu_within ? d.cpu_within(args, inputs, limit) : d.cpu(args, inputs);
}

kernel_output run_reference(kernel_id id, const kernel_args& args,
                            input_views inputs) {
  auto views = typed(inputs);
  return run_reference(id, args, typed_inputs{views});
}

kernel_output run_reference(kernel_id id, const kernel_args& args,
                            typed_inputs inputs) {
  auto& d = def(id);
  return d.reference ? d.reference(args, inputs) : d.cpu(args, inputs);
}

std::string compare(kernel_id id, const kernel_args& args, input_views inputs,
                    const kernel_output& got, const kernel_output& want) {
  if (is_builtin(id))
    return builtin::compare(id, args, inputs, got, want);
  auto kn = name(id);
  if (got.type != want.type || got.elements() != want.elements() ||
      got.indices.size() != want.indices.size())
    return format(
        "%.*s: result has %llu %.*s elements, reference %llu %.*s",
        int(kn.size()), kn.data(), (unsigned long long)got.elements(),
        int(kernels::name(got.type).size()), kernels::name(got.type).data(),
        (unsigned long long)want.elements(),
        int(kernels::name(want.type).size()), kernels::name(want.type).data());
  // A registered kernel states no error bound: floating-point results must
  // agree to a relative 1e-5 (f32) or 1e-12 (f64), integers exactly.
  auto check = [&](auto g, auto w, double rel) -> std::string {
    for (size_t i = 0; i < g.size(); ++i) {
      double a = static_cast<double>(g[i]), b = static_cast<double>(w[i]);
      if (a == b || (std::isnan(a) && std::isnan(b)))
        continue;
      if (rel > 0 && std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b)))
        continue;
      return format("%.*s: element %zu is %.17g, reference %.17g",
                    int(kn.size()), kn.data(), i, a, b);
    }
    return {};
  };
  switch (got.type) {
  case dtype::f32:
    return check(got.as<float>(), want.as<float>(), 1e-5);
  case dtype::f64:
    return check(got.as<double>(), want.as<double>(), 1e-12);
  case dtype::i32:
    return check(got.as<int32_t>(), want.as<int32_t>(), 0);
  case dtype::i64:
    return check(got.as<int64_t>(), want.as<int64_t>(), 0);
  case dtype::u8:
    return check(got.as<uint8_t>(), want.as<uint8_t>(), 0);
  }
  return {};
}

void use_single_threaded_blas() {
  openblas_set_num_threads(1);
}

} // namespace cohort::kernels
